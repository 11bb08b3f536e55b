"""The items a projection is made of: a field path, a constant, the extra argument, or a
conversion of a field. The consumers' builders declare their columns with them
(`consumers/builders/projection.py`) and the generated reader compiles them
(`avro_fastread.compile_projection`).

Why a module of their own: declaring a builder's columns must not import the reader
generator (and the schema walk, the contract's schema files, ...: ~17 ms), which a
consumer needs only once it has a record to decode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Const:
    """A projection item: this value, whatever the payload holds."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Arg:
    """A projection item: the projection's extra argument (e.g. the record timestamp)."""


class Call:
    """A projection item: `fn(value at path)` (a conversion, e.g. MetaMap -> JSON text)."""

    __slots__ = ("fn", "path")

    def __init__(self, fn: Callable[[Any], Any], path: str) -> None:
        self.fn, self.path = fn, path


Item = str | Const | Arg | Call
"""A projection item; a str is a dotted field path (`route.env_id`)."""
