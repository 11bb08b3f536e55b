"""Test helpers for anyone testing against the event contract (needs the `test` extra).

`rlmesh_stream.schemas.testing.examples.example(event_type)`: one realistic valid event.
`rlmesh_stream.schemas.testing.strategies.events(event_type)`: hypothesis strategies of valid
events, and `exact(value)` for bit-exact comparison (NaN == NaN).
They live in the package, not under tests/, so every test directory can import them.
"""
