"""The export's resume state (the joiner's small state and the certificate) as JSON.

Datasets are shared artifacts: whatever is read back from one must be data, never
code, so the state is never pickled (a crafted pickle in a dataset directory ran on
the next export). `dump` turns the joiner's `state()` plus the certificate into
JSON-ready values; `load` checks the shape and rebuilds them, or raises
`DatasetError` naming what is wrong.

A commit stores only what changed (manifest.py's journal): `Changes.line` is one
commit's changes, in the shape of `dump`'s values (a session's row, a pending unit's
first offsets, a producer's ranges, a partition's re-delivery marks, replaced whole
or removed by a null; the counts that changed); `replay` folds the lines into the
state `dump` would have written. `read_certificate` is a dataset directory's whole
certificate, per-producer figures included, read from its manifest and state.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlmesh_stream.consumers.datasets.certificate import Certificate, with_runs
from rlmesh_stream.consumers.datasets.manifest import (
    STATE_DIR,
    DatasetError,
    StateFiles,
    read_manifest,
)
from rlmesh_stream.consumers.datasets.model import Decided, SessionState

if TYPE_CHECKING:
    from rlmesh_stream.consumers.datasets.episodes import Joiner

VERSION = 1
_COUNTS = ("exported", "exported_steps", "tagged_caution", "without_terminal_observation",
           "abandoned_exported")


def dump(joiner_state: dict[str, Any], certificate: Certificate) -> dict[str, Any]:
    """JSON-ready values of a joiner's `state()` (its rows JSON-ready already: sessions
    as [ended, failed, caution, totals, exported(, extra)] (`_session`), pending units as
    [unit, [[topic, partition, offset], ...]]) and the certificate."""
    return {
        "version": VERSION, "sessions": joiner_state["sessions"],
        "first": joiner_state["first"],
        "skipped": dict(joiner_state["skipped"]),
        "skip_examples": dict(joiner_state["skip_examples"]),
        # copies: the store keeps these values as the committed state, the certificate
        # goes on changing
        "certificate": {"producers": {k: {"ranges": list(map(list, v["ranges"])),
                                          "duplicates": v["duplicates"],
                                          "dead_letters": v["dead_letters"]}
                                      for k, v in certificate.producers.items()},
                        "offsets": {k: list(v) for k, v in certificate.offsets.items()},
                        "other": dict(certificate.other),
                        **{k: getattr(certificate, k) for k in _COUNTS}},
    }


def load(data: Any, source: str) -> dict[str, Any]:
    """The joiner state and certificate (under "certificate") from `dump`'s values."""
    try:
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
        sessions = {str(sid): _session(v) for sid, v in data["sessions"].items()}
        first = {tuple(str(x) for x in unit): {(str(t), int(p)): int(o) for t, p, o in where}
                 for unit, where in data["first"]}
        cert = data["certificate"]
        certificate = Certificate(
            producers={str(k): {"ranges": [[int(a), int(b)] for a, b in v["ranges"]],
                                "duplicates": int(v["duplicates"]),
                                "dead_letters": int(v["dead_letters"])}
                       for k, v in cert["producers"].items()},
            offsets={str(k): [int(a), int(b)] for k, (a, b) in cert["offsets"].items()},
            # absent from a state written before producers were capped
            other={k: int(cert.get("other", {}).get(k, 0)) for k in ("records", "dead_letters")})
        for k in _COUNTS:
            setattr(certificate, k, int(cert[k]))
        return {"sessions": sessions, "first": first,
                "skipped": Counter({str(k): int(v) for k, v in data["skipped"].items()}),
                "skip_examples": {str(k): str(v) for k, v in data["skip_examples"].items()},
                "certificate": certificate}
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise DatasetError(f"{source} is not a valid export state ({type(exc).__name__}: "
                           f"{exc}); remove the dataset and export again") from None


def _session(v: list[Any]) -> SessionState:
    """A session's row: [ended, failed, caution, totals, exported], then (absent from a
    state written before, and while all are defaults) one dict of what only some sessions
    keep, each key only when set: a single-lane session's decided episodes ("decided":
    [[record, roll step, lane], ...]), and what a vector-env session's early release
    keeps (vector.py): "early" ([[record, lane, episode index], ...]), "early_done",
    "dropped_steps", "released_whole", "misaligned"."""
    s = SessionState(bool(v[0]), bool(v[1]), bool(v[2]), None,
                     (int(v[3][0]), int(v[3][1])) if v[3] else None, int(v[4]))
    if len(v) > 5:
        extra = v[5]
        s.decided = {str(record): Decided(*(None if x is None else int(x) for x in values))
                     for record, *values in extra.get("decided", [])}
        s.early = {str(r): (int(lane), int(index))
                   for r, lane, index in extra.get("early", [])}
        s.early_done = int(extra.get("early_done", 0))
        s.dropped_real = int(extra.get("dropped_steps", 0))
        s.released_whole = bool(extra.get("released_whole", False))
        s.misaligned = bool(extra.get("misaligned", False))
    return s


class Changes:
    """What a commit changed in the state, as one journal line (`line`): the joiner's and
    the certificate's changed rows (they track them), the re-delivery marks that differ,
    and the counts that differ from the last line's."""

    def __init__(self, committed: Any = None) -> None:
        """`committed`: the state as committed (`dump`'s values, `replay`'s), or None."""
        self.counts: dict[str, Any] = _counts(committed) if committed is not None else {}

    def line(self, joiner: Joiner, certificate: Certificate, seen_before: dict[str, Any],
             seen_after: dict[str, Any]) -> dict[str, Any]:
        """One commit's changes (the joiner's and the certificate's since they were last
        asked: `Joiner.changes`, `Certificate.changes`); `seen_*`: the re-delivery states
        as last committed and as committed now."""
        rows = joiner.changes()
        cert = certificate.changes()
        out: dict[str, Any] = {}
        if rows["sessions"]:
            out["sessions"] = rows["sessions"]
        if rows["first"]:
            out["first"] = rows["first"]
        counts = _counts({"skipped": joiner.skipped, "skip_examples": joiner.skip_examples,
                          "certificate": {"other": certificate.other,
                                          **{k: getattr(certificate, k) for k in _COUNTS}}})
        for key in ("skipped", "skip_examples"):
            changed = {k: v for k, v in counts[key].items()
                       if self.counts.get(key, {}).get(k) != v}
            if changed:
                out[key] = changed
        certificate_changes = {k: v for k, v in cert.items() if v}
        certificate_changes.update({k: v for k, v in counts.items()
                                    if k not in ("skipped", "skip_examples")
                                    and self.counts.get(k) != v})
        if certificate_changes:
            out["certificate"] = certificate_changes
        seen = seen_changes(seen_before, seen_after)
        if seen:
            out["seen"] = seen
        self.counts = counts
        return out


def _counts(data: Any) -> dict[str, Any]:
    """The small parts of a state, written when they change: copies."""
    cert = data["certificate"]
    return {"skipped": dict(data["skipped"]), "skip_examples": dict(data["skip_examples"]),
            "other": dict(cert.get("other", {})), **{k: cert[k] for k in _COUNTS}}


def seen_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per "topic|partition", what changed in its re-delivery state (redelivery.py's
    `Seen.to_json`): `until` and `dropped`, and the producers' marks that changed (a
    forgotten producer's: null); a partition no longer held: null."""
    out: dict[str, Any] = {key: None for key in before.keys() - after.keys()}
    for key, value in after.items():
        old = before.get(key)
        if old == value:
            continue
        old_marks = old["producers"] if old is not None else {}
        marks = value["producers"]
        changed: dict[str, Any] = {p: m for p, m in marks.items() if old_marks.get(p) != m}
        changed.update({p: None for p in old_marks.keys() - marks.keys()})
        out[key] = {"until": value["until"], "dropped": value["dropped"],
                    "producers": changed}
    return out


def replay(base: Any, lines: list[dict[str, Any]], source: str) -> Any:
    """The state `dump` (and the sink's "seen") would have written after the journal's
    last line: `base`, the state written whole (None: none), with every line's changes
    (the last value of a key wins; null removes it). A DatasetError when they do not fit."""
    if not lines:
        return base
    try:
        if base is None:
            raise ValueError("a journal without the state it changes")
        state = dict(base)
        sessions = dict(state["sessions"])
        first = {tuple(unit): where for unit, where in state["first"]}
        skipped, examples = dict(state["skipped"]), dict(state["skip_examples"])
        cert = dict(state["certificate"])
        producers, offsets = dict(cert["producers"]), dict(cert["offsets"])
        seen = dict(state.get("seen", {}))
        runs: dict[str, list[list[int]]] = {}  # per producer, the runs its lines add
        for line in lines:
            _merge(sessions, line.get("sessions", {}))
            for unit, where in line.get("first", []):
                if where is None:
                    first.pop(tuple(unit), None)
                else:
                    first[tuple(unit)] = where
            skipped.update(line.get("skipped", {}))
            examples.update(line.get("skip_examples", {}))
            changed = dict(line.get("certificate", {}))
            _merge_producers(producers, runs, changed.pop("producers", {}))
            _merge(offsets, changed.pop("offsets", {}))
            cert.update(changed)
            for key, value in line.get("seen", {}).items():
                if value is None:
                    seen.pop(key, None)
                    continue
                marks = dict(seen.get(key, {}).get("producers", {}))
                _merge(marks, value["producers"])
                seen[key] = {"until": value["until"], "dropped": value["dropped"],
                             "producers": marks}
        for producer, added in runs.items():
            p = producers[producer]
            producers[producer] = {**p, "ranges": with_runs(p["ranges"], added)}
        return {**state, "sessions": sessions,
                "first": [[list(unit), where] for unit, where in first.items()],
                "skipped": skipped, "skip_examples": examples,
                "certificate": {**cert, "producers": producers, "offsets": offsets},
                "seen": seen}
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{source} is not a valid export state ({type(exc).__name__}: "
                           f"{exc}); remove the dataset and export again") from None


def _merge_producers(producers: dict[str, Any], runs: dict[str, list[list[int]]],
                     changes: dict[str, Any]) -> None:
    """A line's producers: each with the runs of sequences its ranges took in (put in
    once, after the last line: `runs`) and its counts, or (an older journal's) its
    ranges whole."""
    for producer, value in changes.items():
        if value is None:
            producers.pop(producer, None)
            runs.pop(producer, None)
        elif "runs" in value:
            p = producers.get(producer) or {"ranges": [], "duplicates": 0, "dead_letters": 0}
            producers[producer] = {**p, "duplicates": value["duplicates"],
                                   "dead_letters": value["dead_letters"]}
            runs.setdefault(producer, []).extend(value["runs"])
        else:
            producers[producer] = value
            runs.pop(producer, None)


def _merge(into: dict[str, Any], changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if value is None:
            into.pop(key, None)
        else:
            into[key] = value


def read_certificate(root: Path) -> dict[str, Any]:
    """The certificate of the dataset directory `root` (Minari or Parquet) as its last
    commit left it, with each producer's figures (`Certificate.summary`: manifest.json
    holds the totals, the state the producers' ranges). Reads only: an export may be
    running there (a compaction meanwhile: read again)."""
    state_dir = root / STATE_DIR
    if not (state_dir / "manifest.json").exists():
        raise DatasetError(f"{root} holds no export (no {STATE_DIR}/manifest.json)")
    attempts = 0
    while True:
        committed = read_manifest(state_dir)
        try:
            base, lines = StateFiles.of(state_dir, committed).read()
            break
        except DatasetError:
            attempts += 1
            if attempts < 5 and read_manifest(state_dir).generation != committed.generation:
                continue  # committed again (and compacted) while being read
            raise
    certificate = dict(committed.certificate)
    if base is not None:
        restored = load(replay(base, lines, str(state_dir)), str(state_dir))
        certificate["producers"] = restored["certificate"].summary({})["producers"]
    return dict(sorted(certificate.items()))
