"""Types of the C extension built from _avro_project.c (see avro_native.py)."""

from collections.abc import Callable
from typing import Any

class Projector:
    def __init__(self, steps: list[tuple[int, int, bool, Any, Any]],
                 derived: list[tuple[int, int, Any]], items: list[tuple[int, int, Any]],
                 slots: int, start: int, refused: Callable[[Exception], Any],
                 trailing: Callable[[int], Any], malformed: type[Exception],
                 read_long: Callable[[bytes, int], tuple[int, int]]) -> None: ...
    def __call__(self, value: bytes | memoryview, arg: Any, /) -> tuple[Any, ...]: ...
