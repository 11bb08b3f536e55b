"""Builders whose rows are projections of one event: one row per record, column by column.

Why: most builders turn a record into one partial row whose columns are the event's
fields (a route flattened, a constant status, the record timestamp). Declared as a
`Projection`, the same row is produced two ways: from a decoded event (any writer
schema), or straight from the Avro bytes by a decoder generated for it
(`schemas.avro_fastread.compile_projection`), which builds no event dataclass, no
`Record` payload and no dict. Such a row is a tuple in the table's column order (a
"packed" row) and is merged with `table_model.tuple_merger`, the tuple twin of `merge_rows`.
In a packed row a TIMESTAMPTZ column holds whole milliseconds since the epoch (an int:
Arrow stages those ~10x faster than aware datetimes); the sinks convert.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rlmesh_stream.consumers.table_model import Table
from rlmesh_stream.schemas.codec.projection_items import Arg, Call, Const, Item
from rlmesh_stream.schemas.contract.topics import EventType

TIMESTAMP = Arg()
"""A column holding the record timestamp: ms since the epoch in a packed row, an aware UTC
datetime in a row dict."""

Source = str | Const | Arg | Call
"""Where a column's value comes from: a dotted event field path (`route.env_id`), a
constant, the record timestamp (`TIMESTAMP`), or a conversion of a field (`Call`)."""


@dataclass(frozen=True)
class Projection:
    """One event type's row of `table`: column -> source; columns not named are NULL."""

    table: Table
    columns: Mapping[str, Source]
    items: tuple[Item, ...] = field(init=False, repr=False, compare=False)
    _getters: tuple[Callable[[Any, Any], Any], ...] = field(
        init=False, repr=False, compare=False)
    # the primary key of a packed row (a tuple)
    key_of: Callable[[tuple[Any, ...]], tuple[Any, ...]] = field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown = set(self.columns) - set(self.table.column_names)
        if unknown:
            raise ValueError(f"{self.table.name} has no column {sorted(unknown)[0]!r}")
        for c in self.table.columns:  # packed timestamps are the record's, as ints
            source = self.columns.get(c.name)
            if (c.type == "TIMESTAMPTZ") != (source is TIMESTAMP) and source is not None:
                raise ValueError(f"{self.table.name}.{c.name}: TIMESTAMPTZ columns, and only "
                                 "they, take the record TIMESTAMP")
        items = tuple(self.columns.get(c, Const(None)) for c in self.table.column_names)
        object.__setattr__(self, "items", items)
        object.__setattr__(self, "_getters", tuple(_getter(i) for i in items))
        key = [self.table.column_names.index(k) for k in self.table.primary_key]
        object.__setattr__(self, "key_of", operator.itemgetter(*key) if len(key) > 1
                           else lambda values: (values[key[0]],))

    def pack(self, event: Any, timestamp_ms: int) -> tuple[Any, ...]:
        """The packed row of a decoded event (the generated decoder's result, by hand)."""
        return tuple([get(event, timestamp_ms) for get in self._getters])

    def row(self, event: Any, timestamp: datetime) -> dict[str, Any]:
        """The partial row as a dict of the columns the projection names."""
        names = self.table.column_names
        values = [get(event, timestamp) for get in self._getters]
        return {names[i]: values[i] for i, c in enumerate(names) if c in self.columns}


def packer_of(items: tuple[Item, ...]) -> Callable[[Any, Any], tuple[Any, ...]]:
    """`(event, arg) -> values`: what the generated reader of `items` returns from a payload,
    taken from a decoded event instead (a record decoded whole: another writer schema)."""
    getters = tuple(_getter(i) for i in items)

    def pack(event: Any, arg: Any) -> tuple[Any, ...]:
        return tuple([get(event, arg) for get in getters])

    return pack


def _getter(item: Item) -> Callable[[Any, Any], Any]:
    if isinstance(item, str):
        get = _path_getter(item)
        return lambda event, _: get(event)
    if isinstance(item, Const):
        value = item.value
        return lambda *_: value
    if isinstance(item, Call):
        fn, get = item.fn, _path_getter(item.path)
        return lambda event, _: fn(get(event))
    return lambda _, timestamp: timestamp


def _path_getter(path: str) -> Callable[[Any], Any]:
    """`event.a.b`, None when a record on the way is None (an optional record)."""
    if "." not in path:
        return operator.attrgetter(path)
    names = path.split(".")

    def get(value: Any) -> Any:
        for name in names:
            if value is None:
                return None
            value = getattr(value, name)
        return value

    return get


Projections = Mapping[EventType, Projection]
