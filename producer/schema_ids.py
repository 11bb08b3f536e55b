"""Schema ids: learnt from the registry once, with back-off while it is unreachable or refuses.

`SchemaIdResolver` asks the registry (through a `SchemaIds` registrar, built
on first use) for every enabled event type's schema id and stores its
wire-format prefix on the event type's `Slot`, so the hot path frames a
payload with one concatenation. Until every id is known, events of a type
without one are held unframed. While the registry is unreachable or
refuses us the resolver says so once (at WARNING, or ERROR for a refusal,
never with a password) and tells the drainer how long to wait before the
next attempt: 0.2 s, growing to 5 s.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from rlmesh_stream.producer.config import ProducerSettings
from rlmesh_stream.producer.encoding import SchemaIds, frame_prefix, make_registrar
from rlmesh_stream.producer.publisher import Slot
from rlmesh_stream.schemas.connection import access
from rlmesh_stream.schemas.contract.topics import EventType

log = logging.getLogger("rlmesh_stream.producer.hooks")

BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class SchemaIdResolver:
    """Every enabled event type's schema id, framed into its slot's prefix."""

    def __init__(self, settings: ProducerSettings, slots: Sequence[Slot],
                 registrar: SchemaIds | None, held_where: Callable[[int], str]) -> None:
        self.settings = settings
        self.registrar = registrar
        self.ready = threading.Event()  # set once every enabled type's id is known
        self.prefixes: dict[EventType, bytes] = {}
        self._slots = {slot.et: slot for slot in slots}
        self._disabled = settings.disabled_events
        self._held_where = held_where
        self._attempt = 0
        self._unreachable_logged = False
        self._refused_logged = False

    def resolve(self) -> bool:
        """One attempt at every missing id; True once all are known (then `ready` is set)."""
        current: EventType | None = None
        try:
            if self.registrar is None:
                self.registrar = make_registrar(self.settings.stream, self.settings.format)
            for et in EventType:
                if et not in self.prefixes and et not in self._disabled:
                    current = et
                    schema_id = self.registrar.schema_id(et)
                    self.prefixes[et] = frame_prefix(schema_id, self.settings.format)
                    self._slots[et].prefix = self.prefixes[et]
        except Exception as exc:
            self._attempt += 1
            self._say_why(exc, current)
            return False
        if self._unreachable_logged or self._refused_logged:
            log.warning("rlmesh-stream: schema registry answers again; publishing held events")
            self._unreachable_logged = False
            self._refused_logged = False
        self._attempt = 0
        self.ready.set()
        return True

    def backoff(self) -> float:
        """How long to wait before the next attempt after a failed one."""
        return BACKOFF_S[min(max(self._attempt - 1, 0), len(BACKOFF_S) - 1)]

    def _say_why(self, exc: Exception, current: EventType | None) -> None:
        refused = access.registry_refusal(exc)
        if refused is not None:
            if not self._refused_logged:
                self._refused_logged = True
                log.error("rlmesh-stream: %s", self._refused_message(refused, current))
            return
        if not self._unreachable_logged:
            self._unreachable_logged = True
            log.warning(
                "rlmesh-stream: schema registry at %s is unreachable (%s); events are "
                "held (%s) and published when it answers",
                access.redact_url(self.settings.stream.registry_url),
                access.redact_secrets(str(exc), self.settings.stream.registry_url),
                self._held_where(self.settings.held_max_events))

    def _refused_message(self, refused: Any, et: EventType | None) -> str:
        """The registry answered 401/403: who was refused what, and what to do (no password)."""
        subject_of = getattr(self.registrar, "subject", None)  # a SchemaRegistrar's
        if et is None:
            request = "the request"
        elif callable(subject_of):
            request = f"the request to register the {et.value} schema (subject {subject_of(et)})"
        else:
            request = f"the request to register the {et.value} schema"
        return (f"{access.registry_access_message(self.settings.stream, refused, request)}; "
                f"events are held ({self._held_where(self.settings.held_max_events)}) and "
                f"published once it accepts them")
