"""Joining a session's events, in any arrival order, into whole episodes.

Per (`session_id`, `episode_record_id`) the joiner collects `episode_started`,
`episode_completed`, each step's `action_received` and `step_completed`, and
the observations: the reset one (index 0) and the one after step t (index
t + 1). An episode is released once it is completed with all T steps, T
actions and T+1 observations, and its session has ended (relay advisories are
delivered before the end, so the caution tag is known). What cannot be
released whole is decided at `finish()` (the end of an offline run): an
episode without its terminal observation is released flagged (never padded),
one with a missing step is skipped, one its session never completed is
abandoned. Every skip is counted by reason for the certificate.

Single-lane events (the SDK bridge publishes every lane of a vector env as
its own lane) place themselves: an observation's `step` is the step that
produced it (the reset one has `is_reset`). Events carrying several lanes are
a vector-env session's group steps, split into lanes by groups.py once the
session has ended.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rlmesh_stream.consumers.datasets.groups import GroupSession, LaneValues, assemble
from rlmesh_stream.schemas import events as ev
from rlmesh_stream.schemas.errors import ContractError
from rlmesh_stream.schemas.leaves import LeafDecoder

Key = tuple[str, str]  # (session_id, episode_record_id)
Unit = tuple[str, ...]  # ("e", session, record): an episode; ("s", session): a vector session
TP = tuple[str, int]


@dataclass
class StepRow:
    reward: float
    terminated: bool
    truncated: bool
    infos: dict[str, Any] | None


@dataclass
class PendingEpisode:
    """What has been read of one episode so far (pickled with the dataset's manifest)."""

    session_id: str
    record_id: str
    route: dict[str, Any] | None = None
    started: dict[str, Any] | None = None
    completed: dict[str, Any] | None = None
    observations: dict[int, list[bytes]] = field(default_factory=dict)
    actions: dict[int, list[bytes]] = field(default_factory=dict)
    steps: dict[int, StepRow] = field(default_factory=dict)
    obs_spec: bytes | None = None
    act_spec: bytes | None = None
    problem: str | None = None  # a reason this episode can never be released

    def note_spec(self, which: str, spec: ev.SpaceSpec) -> None:
        raw = spec.SerializeToString(deterministic=True)
        old = getattr(self, which)
        if old is None:
            setattr(self, which, raw)
        elif old != raw and self.problem is None:
            self.problem = "space_changed"


@dataclass
class SessionState:
    ended: bool = False
    failed: bool = False
    caution: bool = False
    groups: GroupSession | None = None  # a vector-env session's group-step events
    totals: tuple[int, int] | None = None  # session_ended's (total_steps, total_episodes)
    exported: int = 0  # episodes of this session released so far


@dataclass
class Episode:
    """A released episode, decoded: T+1 observations (T if `terminal_observation` is False)."""

    session_id: str
    record_id: str
    route: dict[str, Any]
    started: dict[str, Any]
    completed: dict[str, Any] | None
    observations: list[Any]
    actions: list[Any]
    steps: list[StepRow]
    obs_spec: ev.SpaceSpec
    act_spec: ev.SpaceSpec
    terminal_observation: bool
    abandoned: bool
    caution: bool

    @property
    def length(self) -> int:
        return len(self.steps)


def _route(route: ev.RuntimeEnvContext) -> dict[str, Any]:
    return {"env_id": route.env_id, "env_component_id": route.env_component_id,
            "model_component_id": route.model_component_id, "lane": route.lane}


@dataclass
class Filters:
    env_ids: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    include_abandoned: bool = False
    exclude_caution: bool = False

    def wants(self, route: dict[str, Any]) -> bool:
        return ((not self.env_ids or route["env_id"] in self.env_ids)
                and (not self.models or route["model_component_id"] in self.models))


class Joiner:
    """Events in, whole episodes out; its state is plain data, so it can be pickled."""

    def __init__(self, filters: Filters) -> None:
        self.filters = filters
        self.pending: dict[Key, PendingEpisode] = {}
        self.sessions: dict[str, SessionState] = {}
        self.skipped: Counter[str] = Counter()
        self.skip_examples: dict[str, str] = {}
        # where each unit still pending was first read, per partition: the resume point
        self._first: dict[Unit, dict[TP, int]] = {}
        # after a restart: records below `frontier` were read before; of those only the
        # units still pending at that commit (`kept`) are read again
        self.frontier: dict[TP, int] = {}
        self.kept: set[Unit] = set()

    # -- state, for the manifest ---------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a restart needs besides re-reading from `resume_offsets` (small: no payloads)."""
        sessions = {sid: SessionState(s.ended, s.failed, s.caution, None, s.totals, s.exported)
                    for sid, s in self.sessions.items()}
        return {"sessions": sessions, "first": self._first, "skipped": self.skipped,
                "skip_examples": self.skip_examples}

    def restore(self, state: dict[str, Any], frontier: dict[TP, int]) -> None:
        self.sessions = state["sessions"]
        self._first = state["first"]  # still the resume point until they are released
        self.kept = set(self._first)
        self.skipped = state["skipped"]
        self.skip_examples = state["skip_examples"]
        self.frontier = frontier

    def resume_offsets(self, read: dict[TP, int]) -> dict[TP, int]:
        """Per partition, where a restart must read again from: the first record of any unit
        still pending, else everything read (`read`: the next offset read per partition)."""
        out = dict(read)
        for first in self._first.values():
            for tp, offset in first.items():
                if offset < out.get(tp, offset + 1):
                    out[tp] = offset
        return out

    # -- reading -------------------------------------------------------------------------------

    def add(self, event: Any, where: tuple[str, int, int] | None = None) -> None:
        """One decoded event; `where` (topic, partition, offset) tracks the resume point."""
        unit = _unit_of(event)
        if where is not None and unit is not None:
            tp = (where[0], where[1])
            if where[2] < self.frontier.get(tp, -1) and unit not in self.kept:
                return  # read and released before the last restart
            first = self._first.setdefault(unit, {})
            if tp not in first:
                first[tp] = where[2]
        self._add(event)

    def _add(self, event: Any) -> None:
        if isinstance(event, ev.ObservationEmittedEvent):
            self._observation(event)
        elif isinstance(event, ev.ActionReceivedEvent):
            self._action(event)
        elif isinstance(event, ev.StepCompletedEvent):
            self._step(event)
        elif isinstance(event, ev.EpisodeStartedEvent):
            ep = self._episode(event.session_id, event.episode_record_id, event.route)
            ep.started = {"episode_id": event.episode_id, "episode_index": event.episode_index,
                          "env_index": event.env_index, "seed": event.seed,
                          "trial_index": event.trial_index,
                          "started_from_auto_reset": event.started_from_auto_reset}
        elif isinstance(event, ev.EpisodeCompletedEvent):
            ep = self._episode(event.session_id, event.episode_record_id, event.route)
            ep.completed = {"episode_id": event.episode_id, "step_count": event.step_count,
                            "cumulative_reward": event.cumulative_reward,
                            "terminated": event.terminated, "truncated": event.truncated,
                            "success": event.success, "seed": event.seed,
                            "episode_index": event.episode_index, "env_index": event.env_index,
                            "trial_index": event.trial_index, "duration_ms": event.duration_ms}
        elif isinstance(event, ev.SessionEndedEvent):
            session = self._session(event.session_id)
            session.ended = True
            session.totals = (event.total_steps, event.total_episodes)
        elif isinstance(event, ev.SessionFailedEvent):
            session = self._session(event.session_id)
            session.ended = session.failed = True
        elif (isinstance(event, ev.RelayAdvisoryEvent)
              and event.advisory.severity is ev.AdvisorySeverity.CAUTION):
            session = self._session(event.session_id)
            if not session.caution and session.exported:
                # read after its session's episodes were written (other topics ran ahead):
                # they went out untagged; say so in the certificate
                self.skipped["exported_before_their_caution_advisory"] += session.exported
            session.caution = True

    def _session(self, session_id: str) -> SessionState:
        state = self.sessions.get(session_id)
        if state is None:
            state = self.sessions[session_id] = SessionState()
        return state

    def _episode(self, session_id: str, record_id: str,
                 route: ev.RuntimeEnvContext) -> PendingEpisode:
        key = (session_id, record_id)
        ep = self.pending.get(key)
        if ep is None:
            ep = self.pending[key] = PendingEpisode(session_id, record_id)
            self._session(session_id)
        if ep.route is None:
            ep.route = _route(route)
        return ep

    def _groups(self, session_id: str, lanes: int, records: list[str],
                route: ev.RuntimeEnvContext) -> GroupSession:
        session = self._session(session_id)
        if session.groups is None:
            session.groups = GroupSession(lanes)
        for record in records:
            if record:
                self._episode(session_id, record, route)
        return session.groups

    def _observation(self, e: ev.ObservationEmittedEvent) -> None:
        if max(e.num_envs, len(e.episode_record_ids)) > 1:
            self._groups(e.session_id, e.num_envs, e.episode_record_ids, e.route
                         ).add_observation(e)
            return
        if not e.episode_record_id:
            return
        ep = self._episode(e.session_id, e.episode_record_id, e.route)
        ep.note_spec("obs_spec", e.observation_space)
        index = 0 if e.is_reset else e.step + 1
        if e.observation is None:
            ep.problem = ep.problem or "observation_leaves_omitted"
            return
        ep.observations[index] = list(e.observation)

    def _action(self, e: ev.ActionReceivedEvent) -> None:
        if len(e.episode_record_ids) > 1:
            self._groups(e.session_id, len(e.episode_record_ids), e.episode_record_ids,
                         e.route).add_action(e)
            return
        if not e.episode_record_id:
            return
        ep = self._episode(e.session_id, e.episode_record_id, e.route)
        ep.note_spec("act_spec", e.action_space)
        if e.action is None:
            ep.problem = ep.problem or "action_leaves_omitted"
            return
        ep.actions[e.step] = list(e.action)

    def _step(self, e: ev.StepCompletedEvent) -> None:
        if len(e.rewards) > 1:
            self._groups(e.session_id, len(e.rewards), [], e.route).add_step(e)
            return
        if not e.episode_record_id:
            return
        ep = self._episode(e.session_id, e.episode_record_id, e.route)
        if e.autoreset_roll and e.autoreset_roll[0]:
            return  # a NEXT_STEP roll is not a step of any episode
        ep.steps[e.step] = StepRow(float(e.rewards[0]), bool(e.terminated[0]),
                                   bool(e.truncated[0]), e.infos)

    # -- releasing -----------------------------------------------------------------------------

    def release(self, *, final: bool = False) -> list[Episode]:
        """Episodes that are whole now; with `final`, also decide on everything else."""
        out: list[Episode] = []
        for session_id, session in sorted(self.sessions.items()):
            if session.groups is not None and (final or _all_read(session, self.pending,
                                                                   session_id)):
                out.extend(self._release_groups(session_id, session, final))
        out.extend(self._release_single(final))
        for e in out:
            self.sessions[e.session_id].exported += 1
        return out

    def _release_single(self, final: bool) -> list[Episode]:
        out: list[Episode] = []
        for key in sorted(self.pending):
            ep = self.pending[key]
            session = self.sessions.get(ep.session_id) or SessionState()
            if session.groups is not None:
                continue  # a vector-env session: released as a whole, above
            verdict = self._verdict(ep, session, final)
            if verdict is None:
                continue
            del self.pending[key]
            self._first.pop(("e", *key), None)
            if verdict.startswith("skip:"):
                self._skip(verdict[5:], ep)
                continue
            built = self._build(ep, session, abandoned=verdict == "abandoned")
            if built is not None:
                out.append(built)
        return out

    def _verdict(self, ep: PendingEpisode, session: SessionState, final: bool) -> str | None:
        """None: keep waiting; 'release'/'abandoned'; or 'skip:<reason>'."""
        if ep.route is not None and not self.filters.wants(ep.route):
            return "skip:filtered"
        if ep.problem is not None:
            return f"skip:{ep.problem}" if (session.ended or final) else None
        if not session.ended and not final:
            return None
        if ep.completed is None:
            if not session.ended:
                return None  # still running when the history ends: decided by a later run
            if not session.failed:
                return "skip:incomplete"
            return "abandoned" if self.filters.include_abandoned else "skip:abandoned"
        steps = int(ep.completed["step_count"])
        whole = (ep.started is not None and all(t in ep.steps for t in range(steps))
                 and all(t in ep.actions for t in range(steps))
                 and all(t in ep.observations for t in range(steps)) and len(ep.steps) == steps)
        if whole and steps in ep.observations:
            return "release"
        if whole and final:
            return "release"  # released without its terminal observation, flagged
        return "skip:incomplete" if final else None

    def _release_groups(self, session_id: str, session: SessionState,
                        final: bool) -> list[Episode]:
        """Every episode of an ended vector-env session (or of any at the end of a run)."""
        groups = session.groups
        assert groups is not None
        mine = {k[1]: ep for k, ep in self.pending.items() if k[0] == session_id}
        if not session.ended and any(ep.completed is None for ep in mine.values()):
            return []  # still running at the end of the history: a later run decides
        lane_order: dict[int, list[str]] = {}
        for record, ep in sorted(mine.items(), key=lambda kv: (
                (kv[1].started or {}).get("episode_index") or 0, kv[0])):
            if ep.started is not None:
                lane_order.setdefault(int(ep.started["env_index"]), []).append(record)
        found = assemble(groups, lane_order)
        values = LaneValues(groups)
        out = []
        for record, ep in sorted(mine.items()):
            del self.pending[(session_id, record)]
            self._first.pop(("e", session_id, record), None)
            verdict = self._group_verdict(ep, session, found.problem)
            if verdict is not None:
                self._skip(verdict, ep)
                continue
            lane_ep = found.episodes.get(record)
            built = self._build_lane(ep, session, lane_ep, found.bad_groups, values)
            if built is not None:
                out.append(built)
        session.groups = None
        self._first.pop(("s", session_id), None)
        return out

    def _group_verdict(self, ep: PendingEpisode, session: SessionState,
                       problem: str | None) -> str | None:
        if ep.route is not None and not self.filters.wants(ep.route):
            return "filtered"
        if problem is not None:
            return problem
        if ep.completed is None:
            if session.failed:
                return None if self.filters.include_abandoned else "abandoned"
            return "incomplete"
        if session.caution and self.filters.exclude_caution:
            return "caution"
        return None

    def _build_lane(self, ep: PendingEpisode, session: SessionState, lane_ep: Any,
                    bad: set[int], values: LaneValues) -> Episode | None:
        groups = session.groups
        assert groups is not None
        if lane_ep is None or ep.route is None or ep.started is None:
            self._skip("incomplete", ep)
            return None
        abandoned = ep.completed is None
        steps = len(lane_ep.groups) if ep.completed is None else int(ep.completed["step_count"])
        if len(lane_ep.groups) != steps or any(k in bad for k in lane_ep.groups):
            self._skip("incomplete", ep)
            return None
        if steps == 0:
            self._skip("empty", ep)
            return None
        if lane_ep.reset is None:
            self._skip("no_reset_observation", ep)
            return None
        specs = {groups.actions[k].spec for k in lane_ep.groups}
        obs_specs = {groups.observations[k].spec for k in lane_ep.groups}
        first_obs = groups.reset if lane_ep.reset[0] < 0 else groups.observations[lane_ep.reset[0]]
        assert first_obs is not None
        obs_specs.add(first_obs.spec)
        if len(specs) > 1 or len(obs_specs) > 1:
            self._skip("space_changed", ep)
            return None
        lane = lane_ep.lane
        try:
            observations = [values.observation(lane_ep.reset[0], lane)]
            observations += [values.observation(k, lane) for k in lane_ep.groups]
            actions = [values.action(k, lane) for k in lane_ep.groups]
        except ContractError as exc:
            self._skip("bad_leaves", ep)
            self.skip_examples.setdefault("bad_leaves_error", str(exc))
            return None
        rows = [StepRow(groups.steps[k].rewards[lane], groups.steps[k].terminated[lane],
                        groups.steps[k].truncated[lane], None) for k in lane_ep.groups]
        obs_spec, act_spec = ev.SpaceSpec(), ev.SpaceSpec()
        obs_spec.ParseFromString(obs_specs.pop())
        if specs:
            act_spec.ParseFromString(specs.pop())
        return Episode(
            session_id=ep.session_id, record_id=ep.record_id, route=ep.route,
            started=ep.started, completed=ep.completed, observations=observations,
            actions=actions, steps=rows, obs_spec=obs_spec, act_spec=act_spec,
            terminal_observation=True, abandoned=abandoned, caution=session.caution)

    def _skip(self, reason: str, ep: PendingEpisode) -> None:
        self.skipped[reason] += 1
        self.skip_examples.setdefault(reason, f"{ep.session_id}/{ep.record_id}")

    def _build(self, ep: PendingEpisode, session: SessionState, *,
               abandoned: bool) -> Episode | None:
        if session.caution and self.filters.exclude_caution:
            self._skip("caution", ep)
            return None
        if ep.obs_spec is None or ep.act_spec is None or ep.route is None or (
                ep.started is None and not abandoned):
            self._skip("incomplete", ep)
            return None
        steps = (int(ep.completed["step_count"]) if ep.completed is not None
                 else _contiguous(ep.steps, ep.actions, ep.observations))
        obs_spec, act_spec = ev.SpaceSpec(), ev.SpaceSpec()
        obs_spec.ParseFromString(ep.obs_spec)
        act_spec.ParseFromString(ep.act_spec)
        terminal = steps in ep.observations
        try:
            obs_decoder, act_decoder = LeafDecoder(obs_spec), LeafDecoder(act_spec)
            observations = [obs_decoder.decode(ep.observations[t])
                            for t in range(steps + 1 if terminal else steps)]
            actions = [act_decoder.decode(ep.actions[t]) for t in range(steps)]
        except ContractError as exc:
            self._skip("bad_leaves", ep)
            self.skip_examples.setdefault("bad_leaves_error", str(exc))
            return None
        return Episode(
            session_id=ep.session_id, record_id=ep.record_id, route=ep.route,
            started=ep.started or {}, completed=ep.completed, observations=observations,
            actions=actions, steps=[ep.steps[t] for t in range(steps)], obs_spec=obs_spec,
            act_spec=act_spec, terminal_observation=terminal, abandoned=abandoned,
            caution=session.caution)


def _unit_of(event: Any) -> Unit | None:
    """The pending unit an event belongs to (None: session-level, kept in the state)."""
    if isinstance(event, (ev.EpisodeStartedEvent, ev.EpisodeCompletedEvent)):
        return ("e", event.session_id, event.episode_record_id)
    if isinstance(event, ev.StepCompletedEvent):
        if len(event.rewards) > 1:
            return ("s", event.session_id)
        return ("e", event.session_id, event.episode_record_id)
    if isinstance(event, (ev.ObservationEmittedEvent, ev.ActionReceivedEvent)):
        if len(event.episode_record_ids) > 1:
            return ("s", event.session_id)
        return ("e", event.session_id, event.episode_record_id)
    return None


def _all_read(session: SessionState, pending: dict[Key, PendingEpisode], session_id: str) -> bool:
    """An ended vector-env session whose events have all been read (its end event can be
    read before them): its totals match the groups and the episodes read."""
    groups = session.groups
    if groups is None or session.totals is None:
        return False  # running, or failed (no totals): decided at the end of a run
    total_steps, total_episodes = session.totals
    if not len(groups.actions) == len(groups.steps) == len(groups.observations):
        return False
    real = 0
    for k, step in groups.steps.items():
        action = groups.actions.get(k)
        if action is None:
            return False
        real += sum(1 for lane, roll in enumerate(step.rolls)
                    if not roll and lane < len(action.records) and action.records[lane])
    completed = sum(1 for (sid, _), ep in pending.items()
                    if sid == session_id and ep.completed is not None)
    return real == total_steps and completed == total_episodes


def _contiguous(*parts: dict[int, Any]) -> int:
    """How many steps from 0 every part holds (an abandoned episode's whole prefix)."""
    t = 0
    while all(t in p for p in parts):
        t += 1
    return t
