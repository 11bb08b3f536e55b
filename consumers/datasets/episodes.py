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

Memory is bounded by `max_held_steps` per single-lane session: a session that has not
ended holds its whole episodes (to tag them from a caution advisory read later) until its
episodes pending hold more steps than that; its whole episodes are then released at once
(a caution read afterwards is counted as `exported_before_their_caution_advisory`, not
tagged), and an episode that alone passes the bound is skipped as `too_long` once its
session ended and its terminal observation was read, its observations, actions and steps
dropped at once (a restart reads it again up to the bound). About 530 bytes a step for
CartPole's four floats (Python's heap, measured with tracemalloc): 0.53 GB per session at
the default bound. A running vector-env session holding more lane steps than that
releases its episodes whole so far and drops the group steps no open episode needs
(vector.py `release_prefix`).

Single-lane events (the SDK bridge publishes every lane of a vector env as
its own lane) place themselves (runtime-events.md §3, "Step numbers"): an
observation's `step` is the number of steps its episode had taken (the reset
one 0, with `is_reset`; the terminal one T). The first observation read for a
step wins (a later one for the same step is a duplicate, or a roll's, below). A reset
observation's infos may carry the env's spec (`events.ENV_SPEC_INFO`), kept with the episode.

A one-lane session under NEXT_STEP autoreset rolls after each episode: one more action,
step (`autoreset_roll`) and observation attributed to the ended episode, the observation
being the next episode's reset observation (runtime-events.md §3). An episode's records of
one type sit in one partition in publishing order (a producer's copies of a record are
dropped before, redelivery.py), so the roll's observation is the one read after the
episode's terminal one, at the same step T. The next episode
(`events.next_episode_record_id`) holds it, and takes it as its reset observation once its
start says it began from a roll; its offset is that episode's resume point. An episode is
decided (released or skipped) only once read out (started, completed, its steps, actions
and terminal observation read, held or not: `PendingEpisode.read_out`) or at the end of an
offline run; a session remembers the episodes it decided whose records may still come
(`SessionState.decided`, in its state row): their later records are dropped, never made
pending again (counted twice, or holding a live run's resume point), except a roll's
observation (at the roll's step).

Events carrying several lanes are a vector-env session's group steps, split into lanes
(groups.py, vector.py) once the session has ended. The data classes are in model.py; what
is read of each event, packed, is packed.py's.

Size: one class whose reading, releasing and committed state share the pending episodes,
the sessions' flags and the resume points, and change them together (a unit read, released
or forgotten moves the resume point and the state's journal at once).
"""

from __future__ import annotations

import heapq
from collections import Counter
from itertools import islice
from typing import Any

from rlmesh_stream.consumers.datasets import DEFAULT_MAX_HELD_STEPS
from rlmesh_stream.consumers.datasets.certificate import LATE_CAUTION
from rlmesh_stream.consumers.datasets.groups import GroupSession
from rlmesh_stream.consumers.datasets.model import (
    TP,
    Decided,
    Episode,
    Filters,
    Key,
    PendingEpisode,
    SessionState,
    StepRow,
    Steps,
    Unit,
    route_of,
)
from rlmesh_stream.consumers.datasets.packed import NO_UNIT, PACKERS, UNIT_KINDS, unit_of
from rlmesh_stream.consumers.datasets.vector import all_read, release_prefix, release_session
from rlmesh_stream.schemas.codec.leaves import LeafDecoder
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.errors import ContractError
from rlmesh_stream.schemas.contract.topics import EventType

TOO_LONG = "too_long"  # the skip reason of an episode longer than `max_held_steps`
DECIDED_KEPT = 64  # decided episodes a session remembers (`_remember_decided`)


class Joiner:
    """Events in, whole episodes out; its state is plain data, kept as JSON (state.py)."""

    def __init__(self, filters: Filters, max_held_steps: int = DEFAULT_MAX_HELD_STEPS) -> None:
        self.filters = filters
        self.max_held_steps = max_held_steps
        # per session: the steps its pending single-lane episodes hold (`max_held_steps`)
        self._held: Counter[str] = Counter()
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
        # the kept vector sessions' first offsets: below them (in a partition read again
        # from an earlier unit's) their records are groups dropped before, not read again
        self._floors: dict[Unit, dict[TP, int]] = {}
        # the kept units' first records: below the frontier, one of these that names
        # another unit is a NEXT_STEP roll's observation, its next episode's (read again)
        self._kept_at: set[tuple[TP, int]] = set()
        # where the record being handled was read (topic, partition) and its offset, and
        # whether it is read again only as a kept unit's first record (`_kept_at`)
        self._at: tuple[TP, int] | None = None
        self._roll_again = False
        # Per commit, the work is the commit's, not the history's: a commit looks only at
        # the sessions read since the last one (`_touched`: no other verdict can have
        # changed), finds their pending episodes by session (`_by_session`), and
        # re-encodes only the state rows that changed (`_session_rows`, `_first_rows`,
        # JSON-ready). Over a history whose sessions all run at once (every episode
        # pending until its session ends) a commit looked at every session and encoded
        # every pending unit: 0.26x the bare loop over 82 851 events, 0.063x over 552 921.
        self._touched: set[str] = set()
        self._by_session: dict[str, dict[Key, PendingEpisode]] = {}
        self._dirty: set[str] = set()  # sessions whose state row is to be encoded again
        self._session_rows: dict[str, list[Any]] = {}
        self._first_rows: dict[Unit, list[Any]] = {}
        # What changed since `changes` was last called (a commit journals only these):
        # sessions whose row differs, units whose first offsets were added to or that
        # were released; `_fresh`: units made since, of which a release leaves no trace.
        self._rows_changed: set[str] = set()
        self._first_changed: set[Unit] = set()
        self._fresh: set[Unit] = set()
        # `resume_offsets`'s heaps of the pending units' first offsets per partition (None:
        # to be built), how many of each unit's offsets are in them, and their sum
        self._heaps: dict[TP, list[tuple[int, Unit]]] | None = None
        self._pushed: dict[Unit, int] = {}
        self._live = 0

    # -- state, for the manifest ---------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a restart needs besides re-reading from `resume_offsets` (small: no payloads),
        JSON-ready (state.py's `dump` writes it): each session's row and each pending
        unit's first offsets. Copies of the containers (the committed state is kept while
        these go on changing); a row is replaced when it changes, never changed in place."""
        self._encode_dirty()
        return {"sessions": dict(self._session_rows), "first": list(self._first_rows.values()),
                "skipped": self.skipped, "skip_examples": self.skip_examples}

    def changes(self) -> dict[str, Any]:
        """The rows of `state()` changed since the last call, JSON-ready: "sessions" (a row
        per session id) and "first" ([unit, first offsets], the offsets null for a unit
        released); what a commit journals instead of the whole state."""
        self._encode_dirty()
        sessions = {sid: self._session_rows.get(sid) for sid in sorted(self._rows_changed)}
        first = [self._first_rows.get(unit) or [list(unit), None]
                 for unit in sorted(self._first_changed)]
        self._rows_changed, self._first_changed, self._fresh = set(), set(), set()
        return {"sessions": sessions, "first": first}

    def stored_whole(self) -> None:
        """`state()` was stored whole (no journal): nothing changed since then (what
        `changes` would say is forgotten; `resume_offsets` has read it)."""
        self._rows_changed, self._first_changed, self._fresh = set(), set(), set()

    def _encode_dirty(self) -> None:
        rows = self._session_rows
        for sid in self._dirty:
            s = self.sessions.get(sid)
            if s is None:
                if rows.pop(sid, None) is not None:
                    self._rows_changed.add(sid)
                continue
            row = _session_row(s)
            if rows.get(sid) != row:  # most events change no flag of their session
                rows[sid] = row
                self._rows_changed.add(sid)
        self._dirty.clear()

    def restore(self, state: dict[str, Any], frontier: dict[TP, int]) -> None:
        self.sessions = state["sessions"]
        self._first = state["first"]  # still the resume point until they are released
        self.kept = set(self._first)
        self._kept_at = {(tp, offset) for unit, where in self._first.items() if unit[0] == "e"
                         for tp, offset in where.items()}
        self._floors = {unit: dict(where) for unit, where in self._first.items()
                        if unit[0] == "s"}
        for unit in self._floors:  # its groups (of lanes not known yet) read again from 0
            s = self.sessions.get(unit[1])
            if s is not None:
                s.groups = GroupSession(0, known=set(s.early), real=s.dropped_real)
        self.skipped = state["skipped"]
        self.skip_examples = state["skip_examples"]
        self.frontier = frontier
        self._dirty = set()
        self._session_rows = {sid: _session_row(s) for sid, s in self.sessions.items()}
        self._first_rows = {unit: _first_row(unit, where) for unit, where in self._first.items()}
        self._rows_changed, self._first_changed, self._fresh = set(), set(), set()
        self._heaps = None

    def resume_offsets(self, read: dict[TP, int]) -> dict[TP, int]:
        """Per partition, where a restart must read again from: the first record of any unit
        still pending, else everything read (`read`: the next offset read per partition).

        Per partition, a heap of the pending units' first offsets: a call pushes the
        offsets added since (the units `add` marked in `_first_changed`) and pops those
        of units released, so a commit's work is what changed, not every pending unit
        (52 000 of them over a 16-lane fleet whose sessions all run at once)."""
        heaps = self._heaps
        if heaps is None:  # at first, or after a restore: every pending unit
            heaps = self._heaps = {}
            self._pushed, self._live = {}, 0
            todo: Any = self._first.keys()
        else:
            todo = self._first_changed
        for unit in todo:
            first = self._first.get(unit)
            done = self._pushed.get(unit, 0)
            if first is None or done == len(first):
                continue
            # a unit's offsets are only ever added to (in order), never changed
            for tp, offset in islice(first.items(), done, None):
                heapq.heappush(heaps.setdefault(tp, []), (offset, unit))
            self._pushed[unit] = len(first)
            self._live += len(first) - done
        if sum(map(len, heaps.values())) > 4 * self._live + 4096:
            self._heaps = None  # mostly released units' offsets: pushed again, live only
            return self.resume_offsets(read)
        out = dict(read)
        for tp, heap in heaps.items():
            while heap and self._first.get(heap[0][1], {}).get(tp) != heap[0][0]:
                heapq.heappop(heap)  # its unit released since
            if heap and heap[0][0] < out.get(tp, heap[0][0] + 1):
                out[tp] = heap[0][0]
        return out

    # -- reading -------------------------------------------------------------------------------

    def add(self, event: Any, where: tuple[str, int, int] | None = None) -> None:
        """One decoded event: `add_planned` of its packed values."""
        event_type = EventType.of(event)
        pack = PACKERS.get(event_type)
        if pack is not None:
            self.add_planned(plan_of(event_type), pack(event, None), where)

    def add_planned(self, plan: Plan, v: tuple[Any, ...],
                    where: tuple[str, int, int] | None = None) -> None:
        """One event's `ITEMS` (read straight from its payload, or packed from a decoded
        event), with its type's `plan_of` (the caller looks it up once per run of one
        type's records: an enum's hash is a Python call); `where` (topic, partition,
        offset) tracks the resume point."""
        handle, kind = plan
        unit = unit_of(kind, v)
        self._at, self._roll_again = None, False
        if where is not None and unit is not None:
            tp = (where[0], where[1])
            if where[2] < self.frontier.get(tp, -1):
                if where[2] < self._floors.get(unit, {}).get(tp, -1):
                    return  # a vector session's group dropped before the last restart
                if unit not in self.kept:
                    if (tp, where[2]) not in self._kept_at:
                        return  # read and released before the last restart
                    self._roll_again = True
            self._at = (tp, where[2])
            first = self._first.get(unit)
            if first is None or tp not in first:  # else nothing to note: most records
                self._note_first(unit, tp, where[2])
        session_id = v[0]
        self._touched.add(session_id)
        self._dirty.add(session_id)
        if handle is not None:
            handle(self, v)

    def _note_first(self, unit: Unit, tp: TP, offset: int) -> None:
        """`unit` has a record at `offset` of `tp`: its first there is a resume point."""
        first = self._first.get(unit)
        if first is None:
            first = self._first[unit] = {}
            if unit not in self._first_changed:  # else committed, released since
                self._fresh.add(unit)
        if tp not in first:
            first[tp] = offset
            self._first_rows[unit] = _first_row(unit, first)
            self._first_changed.add(unit)

    def move_first(self, unit: Unit, first: dict[TP, int]) -> None:
        """`unit`'s resume point moves up to `first` (its records below were dropped); in a
        partition not in `first` (none of its records read there since) it stays. Forgotten
        and noted again: a unit's offsets are only ever added to (`resume_offsets`)."""
        moved = {**self._first.get(unit, {}), **first}
        self.forget(unit)
        for tp, offset in sorted(moved.items()):
            self._note_first(unit, tp, offset)

    def forget(self, unit: Unit) -> None:
        """A unit released or decided: no longer a resume point."""
        if self._first.pop(unit, None) is not None:
            del self._first_rows[unit]
            self._live -= self._pushed.pop(unit, 0)
            if unit in self._fresh:  # made and released between two commits
                self._fresh.discard(unit)
                self._first_changed.discard(unit)
            else:
                self._first_changed.add(unit)

    def _episode_started(self, v: tuple[Any, ...]) -> None:
        (session_id, record, episode_id, episode_index, env_index, seed, trial_index,
         from_auto_reset) = v[:8]
        ep = self._episode(session_id, record, v[8:])
        if ep is None:
            return
        ep.started = {"episode_id": episode_id, "episode_index": episode_index,
                      "env_index": env_index, "seed": seed, "trial_index": trial_index,
                      "started_from_auto_reset": from_auto_reset}

    def _episode_completed(self, v: tuple[Any, ...]) -> None:
        (session_id, record, episode_id, step_count, cumulative_reward, terminated,
         truncated, success, seed, episode_index, env_index, trial_index, duration_ms) = v[:13]
        ep = self._episode(session_id, record, v[13:])
        if ep is None:
            return
        ep.completed = {"episode_id": episode_id, "step_count": step_count,
                        "cumulative_reward": cumulative_reward, "terminated": terminated,
                        "truncated": truncated, "success": success, "seed": seed,
                        "episode_index": episode_index, "env_index": env_index,
                        "trial_index": trial_index, "duration_ms": duration_ms}

    def _session_ended(self, v: tuple[Any, ...]) -> None:
        session = self._session(v[0])
        session.ended = True
        session.totals = (v[1], v[2])

    def _session_failed(self, v: tuple[Any, ...]) -> None:
        session = self._session(v[0])
        session.ended = session.failed = True

    def _advisory(self, v: tuple[Any, ...]) -> None:
        if v[1] is not ev.AdvisorySeverity.CAUTION:
            return
        session = self._session(v[0])
        if not session.caution and session.exported:
            # read after its session's episodes were written (other topics ran ahead):
            # they went out untagged; say so in the certificate
            self.skipped[LATE_CAUTION] += session.exported
        session.caution = True

    def _session(self, session_id: str) -> SessionState:
        state = self.sessions.get(session_id)
        if state is None:
            state = self.sessions[session_id] = SessionState()
        return state

    def _episode(self, session_id: str, record_id: str,
                 route: tuple[Any, ...]) -> PendingEpisode | None:
        """The pending episode of a record, made at its first; None for an episode decided
        already (a later record of it: dropped, and no resume point, which `add_planned`
        made it)."""
        key = (session_id, record_id)
        ep = self.pending.get(key)
        if ep is None:
            if record_id in self._session(session_id).decided:
                self.forget(("e", session_id, record_id))
                return None
            ep = self.pending[key] = PendingEpisode(session_id, record_id)
            self._by_session.setdefault(session_id, {})[key] = ep
        if ep.route is None:
            ep.route = route_of(route)
        return ep

    def _groups(self, session_id: str, lanes: int, records: list[str],
                route: tuple[Any, ...]) -> GroupSession:
        session = self._session(session_id)
        groups = session.groups
        if groups is None:
            if session.released_whole:
                # a group read after its session was released whole (its lanes' last
                # NEXT_STEP rolls): held nowhere, no resume point, no episode pending
                self.forget(("s", session_id))
                return GroupSession(lanes)
            groups = session.groups = GroupSession(lanes)
        elif not groups.lanes:  # restored (`restore`): its width known now
            groups.lanes = lanes
        if records and records != groups.known_records:
            # the records not seen before in this session, found at C speed: a lane starts
            # an episode every few group steps, the others name the same ones
            for record in set(records).difference(groups.known):
                if record:
                    ep = self._episode(session_id, record, route)
                    if ep is not None and ep.lane is None:
                        ep.lane = records.index(record)
                    groups.known.add(record)
            groups.known_records = records
        return groups

    def _observation(self, v: tuple[Any, ...]) -> None:
        (session_id, record, records, num_envs, is_reset, step, leaves, spec,
         infos) = v[:9]
        if num_envs > 1 or len(records) > 1:
            self._groups(session_id, num_envs, records, v[9:]).add_observation(
                records, leaves, spec, is_reset, self._at)
            return
        if not record:
            return
        if self._roll_again:  # read again after a restart, for the episode it began
            self.forget(("e", session_id, record))
            self._roll(session_id, record, leaves, spec, v[9:])
            return
        ep = self.pending.get((session_id, record))
        if ep is None:
            decided = self._session(session_id).decided.get(record)
            if decided is not None:  # a later record of it: only its roll's is taken
                self.forget(("e", session_id, record))
                if not is_reset and step == decided.roll_step:
                    self._roll(session_id, record, leaves, spec, v[9:])
                return
            ep = self._episode(session_id, record, v[9:])
            assert ep is not None  # not decided
        if is_reset:
            ep.obs_high = max(ep.obs_high, 0)
        elif step == ep.obs_high and (ep.completed is None
                                      or step == ep.completed["step_count"]):
            self._roll(session_id, record, leaves, spec, v[9:])  # after its terminal one
            return
        else:
            ep.obs_high = max(ep.obs_high, step)
        if ep.problem == TOO_LONG:
            return
        ep.note_spec("obs_spec", spec)
        index = 0 if is_reset else step
        if leaves is None:
            ep.problem = ep.problem or "observation_leaves_omitted"
            return
        if index in ep.observations:
            return
        ep.observations[index] = leaves
        self._bound(ep)
        if is_reset and infos is not None:
            infos = dict(infos)
            env_spec = infos.pop(ev.ENV_SPEC_INFO, None)
            ep.env_spec = env_spec if isinstance(env_spec, str) else None
            ep.reset_infos = infos

    def _action(self, v: tuple[Any, ...]) -> None:
        session_id, record, records, step, leaves, spec = v[:6]
        if len(records) > 1:
            self._groups(session_id, len(records), records, v[6:]).add_action(
                record, step, records, leaves, spec, self._at)
            return
        if not record:
            return
        ep = self._episode(session_id, record, v[6:])
        if ep is None:
            return
        if step > ep.act_high:
            ep.act_high = step
        if ep.problem == TOO_LONG:
            return
        ep.note_spec("act_spec", spec)
        if leaves is None:
            ep.problem = ep.problem or "action_leaves_omitted"
            return
        ep.actions[step] = leaves
        self._bound(ep)

    def _step(self, v: tuple[Any, ...]) -> None:
        session_id, record, step, rewards, terminated, truncated, rolls, infos = v[:8]
        if len(rewards) > 1:
            self._groups(session_id, len(rewards), [], v[8:]).add_step(
                record, step, rewards, terminated, truncated, rolls, self._at)
            return
        if not record:
            return
        if rolls and rolls[0]:  # a NEXT_STEP roll is not a step of any episode
            if (session_id, record) not in self.pending:
                self.forget(("e", session_id, record))  # no resume point of its own
            return
        ep = self._episode(session_id, record, v[8:])
        if ep is None:
            return
        if step > ep.step_high:
            ep.step_high = step
        if ep.problem == TOO_LONG:
            return
        if step not in ep.steps:
            self._held[session_id] += 1
        ep.steps[step] = StepRow(float(rewards[0]), bool(terminated[0]), bool(truncated[0]),
                                 infos)
        self._bound(ep)

    def _roll(self, session_id: str, record: str, leaves: list[bytes] | None, spec: bytes,
              route: tuple[Any, ...]) -> None:
        """A NEXT_STEP roll's observation, attributed to the ended episode `record`: the next
        episode holds it (the first read wins), and its offset is that episode's resume
        point."""
        following = ev.next_episode_record_id(record)
        if following is None:
            return
        ep = self._episode(session_id, following, route)
        if ep is not None and ep.roll_reset is None:
            ep.roll_reset = (leaves, spec)
            if self._at is not None:
                self._note_first(("e", session_id, following), *self._at)

    def _bound(self, ep: PendingEpisode) -> None:
        """An episode longer than `max_held_steps` (by any of its parts: the topics are
        read at different paces) is never held whole: its values are dropped at once and
        no more kept, and it is skipped once its session ended and it was read out."""
        limit = self.max_held_steps
        # T + 1 actions and observations: a roll's action is kept with its ended episode
        if len(ep.steps) > limit or len(ep.actions) > limit + 1 or (
                len(ep.observations) > limit + 1):
            self._drop_values(ep)
            ep.problem = TOO_LONG

    def _drop_values(self, ep: PendingEpisode) -> None:
        """Free what an episode holds (skipped, or too long to hold)."""
        self._unhold(ep.session_id, len(ep.steps))
        ep.observations, ep.actions, ep.steps = {}, {}, {}

    def _unhold(self, session_id: str, steps: int) -> None:
        held = self._held[session_id] - steps
        if held > 0:
            self._held[session_id] = held
        else:
            self._held.pop(session_id, None)

    # -- releasing -----------------------------------------------------------------------------

    def release(self, *, final: bool = False) -> list[Episode]:
        """Episodes that are whole now; with `final`, also decide on everything else.
        Only the sessions read since the last release are looked at (with `final`, all):
        an episode's verdict changes only with its own session's events."""
        out: list[Episode] = []
        looked_at = sorted(self.sessions) if final else sorted(
            sid for sid in self._touched if sid in self.sessions)
        self._touched = set()
        for session_id in looked_at:
            session = self.sessions[session_id]
            mine = self._by_session.get(session_id, {})
            groups = session.groups
            if groups is not None and (final or all_read(session, mine, session_id)):
                out.extend(release_session(self, session_id, session, dict(mine)))
                self._by_session[session_id] = {k: ep for k, ep in mine.items()
                                                if k in self.pending}
            elif groups is not None and groups.held() > max(self.max_held_steps,
                                                            groups.next_try):
                # a running session holding too much: its episodes whole so far go now
                out.extend(release_prefix(self, session_id, session, dict(mine),
                                          self.max_held_steps))
                self._by_session[session_id] = {k: ep for k, ep in mine.items()
                                                if k in self.pending}
                self._dirty.add(session_id)
        out.extend(self._release_single(final, looked_at))
        for e in out:
            self.sessions[e.session_id].exported += 1
            self._dirty.add(e.session_id)
        return out

    def _release_single(self, final: bool, sessions: list[str]) -> list[Episode]:
        out: list[Episode] = []
        # a vector-env session's episodes are released as a whole, in `release`: not
        # looked at here (all of them pending until their session ends)
        single = [sid for sid in (self._by_session if final else sessions)
                  if (s := self.sessions.get(sid)) is None or s.groups is None]
        keys = sorted(key for sid in single for key in self._by_session.get(sid, {}))
        for key in keys:
            ep = self.pending[key]
            session = self.sessions.get(ep.session_id) or SessionState()
            verdict = self._verdict(ep, session, final)
            if verdict is None:
                continue
            del self.pending[key]
            del self._by_session[key[0]][key]
            self.forget(("e", *key))
            if verdict == "forget":
                continue
            self._remember_decided(ep, session)
            if verdict.startswith("skip:"):
                self._drop_values(ep)
                self._skip(verdict[5:], ep)
                continue
            built = self._build(ep, session, abandoned=verdict == "abandoned")
            self._unhold(ep.session_id, len(ep.steps))
            if built is not None:
                out.append(built)
        return out

    def _remember_decided(self, ep: PendingEpisode, session: SessionState) -> None:
        """Keep a decided episode (`SessionState.decided`) while its records may still come
        (its roll's; any at the end of a history): one decided before the end was read out
        (`read_out`, or whole), past every record of its lane's episodes before it (each
        topic in order), so they are forgotten then; at most `DECIDED_KEPT` a session (the
        oldest forgotten first)."""
        steps = None if ep.completed is None else int(ep.completed["step_count"])
        lane = None if ep.started is None else ep.started["env_index"]
        entry = Decided(steps, lane)
        decided = session.decided
        index = ev.episode_index_of(ep.record_id)
        if index is not None and lane is not None:
            for record in [r for r, d in decided.items() if d.lane == lane
                           and (ev.episode_index_of(r) or index) < index]:
                del decided[record]
        decided[ep.record_id] = entry
        while len(decided) > DECIDED_KEPT:
            del decided[next(iter(decided))]
        self._dirty.add(ep.session_id)

    def _verdict(self, ep: PendingEpisode, session: SessionState, final: bool) -> str | None:
        """None: keep waiting; 'release'/'abandoned'; or 'skip:<reason>'. An episode the
        filters leave out is decided when it would be released or skipped, so counted once:
        dropped at its first batch, its later events made it pending again (counted once
        per batch: 37 filtered of 30 episodes)."""
        verdict = self._decide(ep, session, final)
        if verdict not in (None, "forget") and ep.route is not None and not self.filters.wants(
                ep.route):
            return "skip:filtered"
        return verdict

    def _decide(self, ep: PendingEpisode, session: SessionState, final: bool) -> str | None:
        if ep.roll_reset is not None:
            if 0 not in ep.observations and ep.rolled_into():
                leaves, spec = ep.roll_reset
                ep.note_spec("obs_spec", spec)
                ep.obs_high = max(ep.obs_high, 0)
                if leaves is None:
                    ep.problem = ep.problem or "observation_leaves_omitted"
                else:
                    ep.observations[0] = leaves
            elif ep.holds_only_a_roll() and ((final and session.ended) or _past_the_last(
                    ep.record_id, session.totals)):
                return "forget"  # the roll after the session's last episode: no episode
        if ep.problem is not None:
            # decided once its session ended and it was read out (only its roll's records
            # come after; an episode not completed, at the end of the history, as below); a
            # too-long one never before its session's end
            done = session.ended and (final or ep.read_out())
            return f"skip:{ep.problem}" if done or (final and ep.problem != TOO_LONG) else None
        if not session.ended and not final and (
                ep.completed is None or self._held.get(ep.session_id, 0) <= self.max_held_steps):
            return None  # else a running session holding too much: its whole episodes go now
        if ep.completed is None:
            # The session's end can be read before its episodes' completed events: they are
            # on other topics, in any order. Only the end of the history decides.
            if not session.ended or not final:
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
            obs_leaves = [ep.observations[t] for t in range(steps + 1 if terminal else steps)]
            act_leaves = [ep.actions[t] for t in range(steps)]
            # one array each for a space of one array leaf (no value per step), else values
            observations: Any = obs_decoder.decode_stacked(obs_leaves)
            actions: Any = act_decoder.decode_stacked(act_leaves)
            if observations is None or actions is None:
                observations = [obs_decoder.decode(v) for v in obs_leaves]
                actions = [act_decoder.decode(v) for v in act_leaves]
        except ContractError as exc:
            self._skip("bad_leaves", ep)
            self.skip_examples.setdefault("bad_leaves_error", str(exc))
            return None
        return Episode(
            session_id=ep.session_id, record_id=ep.record_id, route=ep.route,
            started=ep.started or {}, completed=ep.completed, observations=observations,
            actions=actions, steps=Steps.of_rows([ep.steps[t] for t in range(steps)]),
            obs_spec=obs_spec,
            act_spec=act_spec, terminal_observation=terminal, abandoned=abandoned,
            caution=session.caution, reset_infos=ep.reset_infos, env_spec=ep.env_spec)


def _session_row(s: SessionState) -> list[Any]:
    """A session's flags and counts, as the state's JSON holds them (state.py `_session`):
    what only some sessions have in one trailing dict, its keys only when set."""
    row: list[Any] = [s.ended, s.failed, s.caution, list(s.totals) if s.totals else None,
                      s.exported]
    extra = {"decided": [[record, *d] for record, d in s.decided.items()],
             "early": [[r, lane, index] for r, (lane, index) in sorted(s.early.items())],
             "early_done": s.early_done, "dropped_steps": s.dropped_real,
             "released_whole": s.released_whole, "misaligned": s.misaligned}
    extra = {k: v for k, v in extra.items() if v}
    if extra:
        row.append(extra)
    return row



def _first_row(unit: Unit, where: dict[TP, int]) -> list[Any]:
    """A pending unit and its first offsets, as the state's JSON holds them."""
    return [list(unit), [[t, p, o] for (t, p), o in sorted(where.items())]]


def _past_the_last(record_id: str, totals: tuple[int, int] | None) -> bool:
    """An episode record id past its ended session's episode count."""
    index = ev.episode_index_of(record_id)
    return totals is not None and index is not None and index > totals[1]


def _contiguous(*parts: dict[int, Any]) -> int:
    """How many steps from 0 every part holds (an abandoned episode's whole prefix)."""
    t = 0
    while all(t in p for p in parts):
        t += 1
    return t


_HANDLERS: dict[EventType, Any] = {
    EventType.OBSERVATION_EMITTED: Joiner._observation,
    EventType.ACTION_RECEIVED: Joiner._action,
    EventType.STEP_COMPLETED: Joiner._step,
    EventType.EPISODE_STARTED: Joiner._episode_started,
    EventType.EPISODE_COMPLETED: Joiner._episode_completed,
    EventType.SESSION_ENDED: Joiner._session_ended,
    EventType.SESSION_FAILED: Joiner._session_failed,
    EventType.RELAY_ADVISORY: Joiner._advisory,
}


Plan = tuple[Any, int]  # an event type's handler (None: none) and its UNIT_KINDS kind


def plan_of(event_type: EventType) -> Plan:
    """What the joiner does with an event type's values (`add_planned`)."""
    return _HANDLERS.get(event_type), UNIT_KINDS.get(event_type, NO_UNIT)
