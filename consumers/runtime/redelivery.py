"""Re-delivered records, dropped before a builder or an exporter sees them.

A producer may deliver a record twice: a spool replayed after a crash, an acknowledgement
lost and the record sent again. Both copies carry the same producer id and sequence number
(`rlmesh.ps`), under the same key, so in the same partition. The first copy in the
partition is the record; a later one with a (producer, sequence) seen before in it is a
duplicate, and only the delivery check (`delivery_producers`) and the export's certificate
see it: they count it.

What "seen before" needs is kept per partition and per producer (`Seen`): the highest
sequence read (`high`) and the newest `WINDOW` sequences read (`recent`). A producer's
records reach a partition in sequence order (one librdkafka queue per partition, the spool
replayed in order), so a sequence above `high` is new. At or below it, a sequence in
`recent` is a duplicate; any other is a first delivery that came late (a record that went
back to the spool while others of its partition went on, a wrongly keyed session's records
landing among another's) and is kept, even older than the window: losing a record is worse
than counting a re-delivery older than `WINDOW` sequences twice.

The state moves with the offsets it is consistent with: it is as of the partition's next
offset (`until`), stored in the sink in the transaction that stores that offset (the table
`delivery_marks`, per builder; an export's state files), and loaded with the offsets at
every assignment and rewind. Offsets below `until` read again (an export reads the records
of its open episodes again) are decided as they were: `dropped` keeps the duplicates'
offsets until no builder reads below them. A partition keeps at most `MAX_PRODUCERS`
producers (the least recently read one is forgotten first): a fleet restarting its hooks
brings new producer ids for ever, and a duplicate of a forgotten producer's record is not
recognised.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from typing import Any

from rlmesh_stream.consumers.runtime.records import TP, Record
from rlmesh_stream.consumers.tables import DELIVERY_MARKS
from rlmesh_stream.schemas.contract import headers as h

# The sequences a producer's mark keeps below its highest: late first deliveries within
# them are told from duplicates. 32 is more than a partition's records in flight from one
# producer (linger.ms 20 at the hook's rate); a few hundred bytes a mark.
WINDOW = 32
MAX_PRODUCERS = 4096  # per partition


def stamp_of(headers: dict[str, bytes]) -> tuple[str, int] | None:
    """(producer id, sequence) of a record's delivery headers; None without valid ones (a
    record with none, or an invalid sequence, is never a duplicate: nothing identifies it)."""
    packed = headers.get(h.PRODUCER_SEQUENCE)
    if packed is not None:  # the hook's own header, read without the general parser
        producer, sep, seq = packed.rpartition(h.SEPARATOR)
        if sep and seq.isdigit() and len(seq) < 19:  # below 10**18: a valid sequence
            return producer.decode("utf-8", "replace"), int(seq)
    stamp = h.delivery_stamp(headers)
    if stamp is None:
        return None
    try:
        return stamp[1].decode("utf-8", "replace"), h.parse_sequence(stamp[2])
    except ValueError:
        return None


class Seen:
    """One partition's producers: what identifies a re-delivered record in it."""

    __slots__ = ("dropped", "forgotten", "marks", "touched", "until")

    def __init__(self, until: int = -1) -> None:
        self.until = until  # the next offset not decided yet (-1: none decided)
        self.dropped: set[int] = set()  # offsets below `until` decided to be duplicates
        # producer id -> [high, last offset read, recent (ascending)]
        self.marks: dict[str, list[Any]] = {}
        self.touched: set[str] = set()  # producers changed since the state was last stored
        self.forgotten: set[str] = set()  # producers evicted since then

    def duplicate(self, offset: int, stamp: tuple[str, int] | None) -> bool:
        """Whether the record at `offset` is a re-delivery (decided once per offset)."""
        if offset < self.until:
            return offset in self.dropped
        self.until = offset + 1
        if stamp is None:
            return False
        producer, seq = stamp
        mark = self.marks.get(producer)
        if mark is None:
            if len(self.marks) >= MAX_PRODUCERS:
                self._forget_oldest()
            self.marks[producer] = [seq, offset, [seq]]
            self.forgotten.discard(producer)
            self.touched.add(producer)
            return False
        high, _, recent = mark
        if seq > high:  # the usual case: in order, appended
            mark[0], mark[1] = seq, offset
            recent.append(seq)
            if len(recent) > WINDOW:
                del recent[0]
            self.touched.add(producer)
            return False
        at = bisect_left(recent, seq)
        if at < len(recent) and recent[at] == seq:
            self.dropped.add(offset)
            return True
        # Not among the sequences held: a first delivery that came late, kept even when it
        # is older than the window (records of a wrongly keyed session, a spool replayed
        # after newer records): losing a record is worse than counting a very late
        # re-delivery twice, and the delivery check still counts it.
        mark[1] = offset
        insort(recent, seq)
        if len(recent) > WINDOW:
            del recent[0]
        self.touched.add(producer)
        return False

    def _forget_oldest(self) -> None:
        oldest = min(self.marks, key=lambda p: self.marks[p][1])
        del self.marks[oldest]
        self.touched.discard(oldest)
        self.forgotten.add(oldest)

    # -- as stored -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"until": self.until, "dropped": sorted(self.dropped),
                "producers": {p: [m[0], m[1], _pack(m[0], m[2])]
                              for p, m in self.marks.items()}}

    @classmethod
    def from_json(cls, data: Any) -> Seen:
        """A state `to_json` wrote; ValueError (or KeyError, TypeError) when it is not one."""
        seen = cls(int(data["until"]))
        seen.dropped = {int(o) for o in data["dropped"]}
        for producer, (high, last, recent) in data["producers"].items():
            seen.marks[str(producer)] = [int(high), int(last), _unpack(int(high), recent)]
        return seen

    def rows(self, builder: str, key: TP) -> list[dict[str, Any]]:
        """The `delivery_marks` rows of the producers changed since the last call."""
        rows = [{"builder": builder, "topic": key[0], "partition_id": key[1],
                 "producer_id": p, "high_seq": m[0], "last_offset": m[1],
                 "recent": _pack(m[0], m[2]), "forgotten": False}
                for p in sorted(self.touched) if (m := self.marks.get(p)) is not None]
        rows += [{"builder": builder, "topic": key[0], "partition_id": key[1],
                  "producer_id": p, "high_seq": -1, "last_offset": -1, "recent": "",
                  "forgotten": True} for p in sorted(self.forgotten)]
        return rows

    def same_as(self, other: Seen) -> bool:
        return (self.until == other.until and self.dropped == other.dropped
                and self.marks == other.marks)


def _pack(high: int, recent: list[int]) -> str:
    """The window as distances below `high`, in decimal: a few bytes a sequence."""
    return ",".join(str(high - s) for s in recent)


def _unpack(high: int, text: str) -> list[int]:
    return sorted(high - int(d) for d in text.split(",") if d) if text else []


class Redelivery:
    """The `Seen` state of every held partition, per builder that drops duplicates.

    Builders of one process whose stored states of a partition are alike (the usual case:
    they were stored by the same checkpoints) share one `Seen`, so each record is decided
    once, whichever of them asks."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)  # the builders that drop duplicates
        self.states: dict[str, dict[TP, Seen]] = {name: {} for name in self.names}
        self.dropped = 0  # duplicates dropped since the process started (per builder)
        # states made for partitions with nothing stored, by where they start: builders
        # starting a partition at one offset share one
        self._fresh: dict[tuple[TP, int], Seen] = {}

    def load(self, sink: Any, stored: dict[str, dict[TP, int]]) -> None:
        """Every builder's stored state, as the sink has it now; `stored` its offsets (a
        state is as of its builder's stored offset: a partition without one starts empty)."""
        loader = getattr(sink, "load_seen", None)
        shared: dict[TP, list[Seen]] = {}
        for name in self.names:
            loaded: dict[TP, Seen] = loader(name) if loader is not None else _load_rows(
                sink, name, stored[name])
            states: dict[TP, Seen] = {}
            for key, seen in loaded.items():
                alike = next((s for s in shared.get(key, ()) if s.same_as(seen)), None)
                if alike is None:
                    shared.setdefault(key, []).append(seen)
                    alike = seen
                states[key] = alike
            self.states[name] = states
        self._fresh = {}


    def keep(self, name: str, records: list[Record], stored: dict[TP, int]) -> list[Record]:
        """`records` (a builder's share of a cut, in offset order per partition) without the
        re-delivered ones; a partition's state starts at the builder's stored offset."""
        states = self.states[name]
        kept: list[Record] | None = None
        run: TP | None = None
        seen: Seen | None = None
        for i, record in enumerate(records):
            key = (record.topic, record.partition)
            if key != run or seen is None:
                run = key
                seen = states.get(key)
                if seen is None:
                    start = stored.get(key, -1)
                    seen = self._fresh.get((key, start))
                    if seen is None:
                        seen = self._fresh[(key, start)] = Seen(start)
                    states[key] = seen
            if seen.duplicate(record.offset, stamp_of(record.headers)):
                if kept is None:
                    kept = records[:i]
                self.dropped += 1
            elif kept is not None:
                kept.append(record)
        return records if kept is None else kept

    def rows(self, name: str) -> list[dict[str, Any]]:
        """`delivery_marks` rows of what changed in the builder's states; a state shared
        by builders is marked stored once every builder sharing it took its rows."""
        rows: list[dict[str, Any]] = []
        for key, seen in sorted(self.states[name].items()):
            rows += seen.rows(name, key)
        return rows

    def stored(self) -> None:
        """Every builder took its rows of the cut: the states' changes are in the batch."""
        for states in self.states.values():
            for seen in states.values():
                seen.touched.clear()
                seen.forgotten.clear()
                seen.dropped.clear()  # table builders never read below their stored offset

    def snapshot(self, name: str) -> dict[TP, dict[str, Any]]:
        """The builder's states as JSON values, for a sink that stores them whole (an
        export): it forgets the decisions below where it reads again, which only it knows
        (the first offsets of its open episodes)."""
        return {key: seen.to_json() for key, seen in self.states[name].items()}


def _load_rows(sink: Any, name: str, stored: dict[TP, int]) -> dict[TP, Seen]:
    """A table sink's `delivery_marks` of `name`, as of its stored offsets."""
    rows = sink.query(
        "SELECT topic, partition_id, producer_id, high_seq, last_offset, recent "
        f"FROM {DELIVERY_MARKS.name} WHERE builder = %s", (name,))
    states: dict[TP, Seen] = {}
    for topic, partition, producer, high, last, recent in rows:
        key = (str(topic), int(partition))
        if key not in stored or int(last) >= stored[key]:
            # no offset stored, or one below the mark's record (moved back by
            # --reset-recreated): the mark is not of the records read from there
            continue
        seen = states.get(key)
        if seen is None:
            seen = states[key] = Seen(stored[key])
        seen.marks[str(producer)] = [int(high), int(last), _unpack(int(high), str(recent))]
    for key, offset in stored.items():
        states.setdefault(key, Seen(offset))
    return states
