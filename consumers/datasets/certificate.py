"""The completeness certificate of an export: per producer, the delivery sequences seen.

Each record's (producer id, sequence) delivery headers are folded into the producer's
sorted, disjoint ranges (`Certificate.saw`, `merge`); gaps and duplicates follow from
them, with the offsets covered and the episodes' counts, in `Certificate.summary`, the
certificate a user reads. The manifest (manifest.py) commits it with the batch; its
per-producer ranges are part of the resume state (state.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from rlmesh_stream.schemas.contract import headers as h

# The certificate's totals are read by JVM readers (Spark, Flink: a JSON number past a long
# breaks them): a sum that would pass 2**63 - 1 is written as 2**63 - 1 (saturated). One
# producer's own figures cannot pass it (sequences stop at headers.MAX_SEQUENCE); a sum
# over producers can (two forged sequence headers near 2**63).
INT64_MAX = 2**63 - 1
# Producer ids whose sequences the certificate tracks one by one (their ranges, in the
# state). A fleet has one id per producer process; past this many, a producer id that
# changes per record would grow the state without bound (4.7 MB at 60 000 ids): the
# records of further ids are counted in `other_producers`, their sequences unchecked.
MAX_PRODUCERS = 1000
# The joiner's count of episodes written before their session's caution advisory was read
# (untagged): kept with its skip counts, but no skip (`episodes_skipped` leaves it out).
LATE_CAUTION = "exported_before_their_caution_advisory"


def saturated(n: int) -> int:
    """`n`, or INT64_MAX when it is larger."""
    return min(n, INT64_MAX)


def skipped_episodes(skipped: Mapping[str, int]) -> int:
    """The episodes a joiner skipped, as `episodes_skipped` counts them."""
    return sum(n for reason, n in skipped.items() if reason != LATE_CAUTION)


@dataclass
class Certificate:
    """Completeness over the exported range: the delivery check, offsets and counts."""

    producers: dict[str, dict[str, Any]] = field(default_factory=dict)
    offsets: dict[str, list[int]] = field(default_factory=dict)  # "topic[p]" -> [first, next]
    exported: int = 0
    exported_steps: int = 0
    tagged_caution: int = 0
    without_terminal_observation: int = 0
    abandoned_exported: int = 0
    # the records of producer ids past MAX_PRODUCERS: counted, their sequences unchecked
    other: dict[str, int] = field(default_factory=lambda: {"records": 0, "dead_letters": 0})
    _batch: dict[str, list[int]] = field(default_factory=dict, repr=False)
    _dead: dict[str, int] = field(default_factory=dict, repr=False)
    _fresh: int = field(default=0, repr=False)  # producers of `_batch` not yet tracked
    # what changed since `changes` was last called: producers merged, offsets covered
    _changed: set[str] = field(default_factory=set, repr=False)
    _moved: set[str] = field(default_factory=set, repr=False)
    # per producer, the runs its ranges took in since `changes` (what a commit journals)
    _runs: dict[str, list[list[int]]] = field(default_factory=dict, repr=False)
    _seen: dict[str, int] = field(default_factory=dict, repr=False)  # `seen`'s counts

    def saw(self, producer: str, seq: int, dead_letter: bool) -> None:
        """One record's (producer, sequence); merged into the ranges by `merge` (per batch:
        records of different topics interleave, so sequences arrive out of order)."""
        seqs = self._batch.get(producer)
        if seqs is None:
            if producer not in self.producers:
                if len(self.producers) + self._fresh >= MAX_PRODUCERS:
                    self.other["records"] += 1
                    self.other["dead_letters"] += dead_letter
                    return
                self._fresh += 1
            seqs = self._batch[producer] = []
        seqs.append(seq)
        if dead_letter:
            self._dead[producer] = self._dead.get(producer, 0) + 1

    def merge(self) -> None:
        """Fold the batch's sequences into each producer's sorted, disjoint ranges.

        The batch's sequences are sorted and placed among the ranges by numpy
        (`searchsorted`) and its runs put in between them (`_with_runs`, which copies
        the ranges between two runs by slicing), so the Python work is the batch's runs,
        not its records nor the ranges: records of different topics are read at
        different paces, so one producer's ranges are many while a backlog is read
        (160 000 over a 16-lane fleet's 490 000 records)."""
        for producer, seqs in self._batch.items():
            p = self.producers.setdefault(producer, {"ranges": [], "duplicates": 0,
                                                     "dead_letters": 0})
            p["dead_letters"] += self._dead.get(producer, 0)
            ranges: list[list[int]] = p["ranges"]
            fresh = np.unique(np.asarray(seqs, dtype=np.int64))
            duplicates = len(seqs) - len(fresh)
            bounds = np.fromiter(chain.from_iterable(ranges), np.int64, 2 * len(ranges))
            starts, ends = bounds[0::2], bounds[1::2]
            if len(ranges):
                at = np.searchsorted(starts, fresh, side="right") - 1
                inside = (at >= 0) & (fresh <= ends[np.maximum(at, 0)])
                duplicates += int(inside.sum())
                fresh = fresh[~inside]
            p["duplicates"] += duplicates
            if len(fresh):
                cut = np.flatnonzero(np.diff(fresh) != 1) + 1
                firsts = fresh[np.concatenate([[0], cut])]
                lasts = fresh[np.concatenate([cut - 1, [len(fresh) - 1]])]
                runs = np.stack([firsts, lasts], axis=1).tolist()
                places = np.searchsorted(starts, firsts, side="left").tolist()
                p["ranges"] = _with_runs(ranges, places, runs)
                self._runs.setdefault(producer, []).extend(runs)
                if producer in self._seen:
                    self._seen[producer] += len(fresh)
        self._changed.update(self._batch)
        self._batch = {}
        self._dead = {}
        self._fresh = 0

    def changes(self) -> dict[str, Any]:
        """The producers and offsets changed since the last call (JSON-ready copies): per
        producer changed, the runs of sequences its ranges took in since (state.py's
        `replay` puts them in, as `merge` did) and its counts; a commit journals these,
        not every producer's ranges."""
        producers = {k: {"runs": self._runs.get(k, []), "duplicates": p["duplicates"],
                         "dead_letters": p["dead_letters"]}
                     for k in sorted(self._changed) if (p := self.producers.get(k)) is not None}
        offsets = {k: list(self.offsets[k]) for k in sorted(self._moved) if k in self.offsets}
        self._changed = set()
        self._moved = set()
        self._runs = {}
        return {"producers": producers, "offsets": offsets}

    def stored_whole(self) -> None:
        """The certificate was stored whole (no journal): nothing changed since then."""
        self._changed, self._moved, self._runs = set(), set(), {}

    def seen(self, producer: str) -> int:
        """How many distinct sequences of `producer` were seen (kept up by `merge`)."""
        count = self._seen.get(producer)
        if count is None:
            count = self._seen[producer] = sum(
                b - a + 1 for a, b in self.producers[producer]["ranges"])
        return count

    def covered(self, topic: str, partition: int, offset: int) -> None:
        key = f"{topic}[{partition}]"
        self._moved.add(key)
        span = self.offsets.get(key)
        if span is None:
            self.offsets[key] = [offset, offset + 1]
        else:
            span[0] = min(span[0], offset)
            span[1] = max(span[1], offset + 1)

    def summary(self, skipped: dict[str, int]) -> dict[str, Any]:
        skipped = dict(skipped)
        late = skipped.pop(LATE_CAUTION, 0)
        producers = {}
        for pid, p in sorted(self.producers.items()):
            ranges = p["ranges"]
            seen = self.seen(pid)
            top = ranges[-1][1] if ranges else -1
            producers[pid] = {"sequences_seen": seen, "first_seq": ranges[0][0] if ranges else None,
                              "last_seq": top, "gaps": top + 1 - seen,
                              "duplicates": p["duplicates"], "dead_letters": p["dead_letters"]}
        other = {**self.other, "gaps": 0, "duplicates": 0}
        if len(producers) > MAX_PRODUCERS:  # several shards' (Iceberg): the rest folded
            ranked = sorted(producers, key=lambda k: (
                -(producers[k]["gaps"] + producers[k]["duplicates"]), k))
            for pid in ranked[MAX_PRODUCERS:]:
                p = producers.pop(pid)
                other["records"] += p["sequences_seen"] + p["duplicates"]
                for k in ("gaps", "duplicates", "dead_letters"):
                    other[k] += p[k]
        listed = [*producers.values(), other]
        return {
            "producers": producers,
            "other_producers": {k: saturated(v) for k, v in other.items()},
            "gaps": saturated(sum(p["gaps"] for p in listed)),
            "duplicates": saturated(sum(p["duplicates"] for p in listed)),
            "dead_letters": saturated(sum(p["dead_letters"] for p in listed)),
            "kafka_offsets": dict(sorted(self.offsets.items())),
            "episodes_exported": self.exported, "steps_exported": self.exported_steps,
            "episodes_tagged_caution": self.tagged_caution,
            "episodes_without_terminal_observation": self.without_terminal_observation,
            "episodes_abandoned_exported": self.abandoned_exported,
            # a caution advisory read after its session's episodes were written: untagged
            "episodes_exported_before_their_caution_advisory": late,
            "episodes_skipped": dict(sorted(skipped.items())),
        }


def _with_runs(ranges: list[list[int]], places: list[int],
               runs: list[list[int]]) -> list[list[int]]:
    """Sorted, disjoint `ranges` with sorted `runs` put in, each run in a gap between two
    ranges (`places`: the index of the first range after it): joined to a range it
    touches, else a range of its own. The ranges between two runs are copied by slicing,
    not looked at."""
    out: list[list[int]] = []
    done = 0  # ranges[:done] are in `out`
    for (a, b), at in zip(runs, places, strict=True):
        at = max(at, done)
        out.extend(ranges[done:at])
        done = at
        if out and out[-1][1] + 1 == a:
            out[-1] = [out[-1][0], b]
        else:
            out.append([a, b])
        if at < len(ranges) and b + 1 == ranges[at][0]:
            out[-1] = [out[-1][0], ranges[at][1]]
            done = at + 1
    out.extend(ranges[done:])
    return out


def with_runs(ranges: list[list[int]], runs: list[list[int]]) -> list[list[int]]:
    """`ranges` (sorted, disjoint, none touching) with `runs` (disjoint from them and from
    each other, in any order) in: the ranges `merge` made of them, run by run."""
    out: list[list[int]] = []
    for a, b in sorted([*ranges, *runs]):
        if out and out[-1][1] + 1 == a:
            out[-1] = [out[-1][0], b]
        else:
            out.append([a, b])
    return out


def header_sequence(headers: dict[str, bytes]) -> tuple[str, int] | None:
    """(producer, sequence) of a record's delivery headers, either version; None without
    them or with a sequence the delivery check calls invalid (`parse_sequence`: negative,
    past a BIGINT, not ASCII digits), which no range counts."""
    stamp = h.delivery_stamp(headers)  # either version of the contract's headers
    if stamp is None:
        return None
    _, producer, seq = stamp
    try:
        return producer.decode("utf-8", "replace"), h.parse_sequence(seq)
    except ValueError:
        return None
