"""Valid events for tests: examples and Hypothesis strategies of the event contract.

`contract_samples.examples.example(event_type)`: one realistic valid event;
`contract_samples.examples.step_event(lanes)`: the hot-path step event with N lanes.
`contract_samples.strategies.events(event_type)`: hypothesis strategies of valid
events, and `exact(value)` for bit-exact comparison (NaN == NaN).
They live under tests/ (on the test session's import path), not in the installed package.
"""
