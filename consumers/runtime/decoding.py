"""The decoder cache: per topic, what reading its records takes (decode or not, read
headers or not, the projection its packed builder reads), and per value header (magic
byte and schema id) the generated reader of that projection, or None where the record is
decoded whole (another writer schema or format, another event type than the topic's).

The decoder and the readers the first batch needs are made on a thread while the group
is joined (`warm_up`); reading waits for that thread once (`wait_warm`)."""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from rlmesh_stream.consumers.builders import Builder
from rlmesh_stream.schemas.codec import wire
from rlmesh_stream.schemas.codec.projection_items import Item
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.errors import WrongEventTypeError, WrongKeyError
from rlmesh_stream.schemas.contract.topics import (
    EventType,
    event_type_of_topic,
    subject_name,
)

log = logging.getLogger(__name__)

# per topic: (event type, decode?, read headers?, the items its decoding builder reads
# packed (`Builder.packed_items`), must a record be keyed by its event's session id?)
Plan = tuple[EventType, bool, bool, tuple[Item, ...] | None, bool]


class Decoder(Protocol):
    def decode(self, value: bytes) -> Any: ...


class Decoders:
    """What each topic's records are read with, made once and cached."""

    def __init__(self, config: StreamConfig, builders: list[Builder], topics: list[str],
                 decoder: Decoder | None = None) -> None:
        self.config = config
        self._decoder = decoder
        prefix = config.topic_prefix
        builders_of = {t: [b for b in builders if t in b.topics_of(prefix)] for t in topics}
        self.event_type: dict[str, EventType] = {
            t: event_type_of_topic(t, prefix) for t in topics}
        # header-only builders (delivery checks) read headers, and every builder that
        # drops re-delivered records (told by their `rlmesh.ps`)
        self.plans: dict[str, Plan] = {
            t: (self.event_type[t], any(b.needs_decode for b in bs),
                any(not b.needs_decode or b.drops_duplicates for b in bs),
                self._packer(t, bs),
                any(b.checks_keys for b in bs))
            for t, bs in builders_of.items()}
        # per topic, per 5-byte value header (magic byte, schema id): the generated reader
        # of the topic's projection, or None (decode whole events)
        self.projectors: dict[str, dict[bytes, Any]] = {t: {} for t in topics}
        self.any_decode = any(plan[1] for plan in self.plans.values())
        self.warming = False  # `warm_up` runs on a thread of its own
        self.warmed = threading.Event()  # what the first batch needs is made

    def _packer(self, topic: str, builders: list[Builder]) -> tuple[Item, ...] | None:
        """The items the runtime reads straight from the payloads of `topic`: when its one
        decoding builder reads it packed (other builders read headers only)."""
        decoding = [b for b in builders if b.needs_decode]
        if len(decoding) != 1:
            return None
        items = decoding[0].packed_items(self.event_type[topic])
        if items is not None and decoding[0].checks_keys and items[0] != "session_id":
            raise ValueError(f"{decoding[0].name} checks keys: its packed items of {topic} "
                             "must name session_id first")
        return items

    def decoder(self) -> Decoder:
        if self._decoder is None:
            from rlmesh_stream.schemas.codec.serde import EventDecoder

            self._decoder = EventDecoder(registry_client(self.config))
        return self._decoder

    def projector(self, topic: str, value: bytes, items: tuple[Item, ...]) -> Any:
        """The generated reader of `items` for the schema id of `value` (cached per
        header), or None: the record is decoded whole (another writer schema or format,
        another event type than the topic's, or an id that does not resolve, whose error
        the whole decode then raises and handles)."""
        make = getattr(self.decoder(), "projector", None)
        if make is None:
            return None
        try:
            event_type, project = make(value, list(items))
        except Exception:  # the whole decode raises it again, and handles it
            return None
        if event_type is not self.event_type[topic]:
            project = None  # the whole decode names the wrong event type
        self.projectors[topic][value[:5]] = project
        return project

    # -- warm-up ---------------------------------------------------------------------

    def wait_warm(self) -> None:
        """Before the first record is read, while `warm_up` runs on another thread: the
        decoder is made there, one at a time."""
        if self.warming:
            self.warmed.wait()
            self.warming = False

    def warm_up(self) -> None:
        """The decoder (serde, fastavro) and the projections' generated readers, which the
        first batch waits for. Best effort: what fails here is done, and reported, where
        it is needed."""
        try:
            if self.any_decode:
                self.decoder()
                from rlmesh_stream.schemas.codec.avro_reader import warm_projection

                for topic, plan in self.plans.items():
                    if plan[3] is not None:
                        warm_projection(self.event_type[topic], list(plan[3]))
                self.warm_projectors()
        except Exception as exc:  # done again, and raised, where it is needed
            log.debug("warm-up failed: %s", exc)
        finally:
            self.warmed.set()

    def warm_projectors(self) -> None:
        """Each packed topic's reader for the schema id its producers most likely write
        with, its subject's latest: one GET and one compile a topic (~15 ms), otherwise
        paid when the topic's first record is read. A subject not registered yet is
        skipped; a registry that does not answer is left to the first record."""
        client = getattr(self.decoder(), "client", None)  # a decoder passed in: none
        if client is None:
            return
        from rlmesh_stream.schemas.registry import client as registry

        for topic, plan in self.plans.items():
            if plan[3] is None:
                continue
            try:
                latest = client.get_latest_version(subject_name(topic))
            except Exception as exc:
                if isinstance(exc, registry.registry_errors()) and registry.is_not_found(exc):
                    continue
                return
            if latest.schema_id is not None:
                self.projector(topic, wire.header(int(latest.schema_id)), plan[3])


def registry_client(config: StreamConfig) -> Any:
    """What fetches writer schemas: `registry_http.SchemaFetcher` (two GETs, no HTTP
    stack to import) unless a setting needs the confluent client."""
    from rlmesh_stream.schemas.registry.http import SUPPORTED, SchemaFetcher

    conf = config.registry_config()
    if set(conf) <= SUPPORTED:
        return SchemaFetcher(conf)
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient(conf)


def check_event_type(event: Any, expected: EventType, topic: str) -> None:
    """A valid event of another type than its topic's is a bad record, not a silent skip."""
    if type(event) is not expected.event_class:
        raise WrongEventTypeError(
            f"{topic} carries {expected.value} events, this record holds "
            f"{EventType.of(event).value}")


def check_key(event: Any, key: bytes | None) -> None:
    """For a builder that holds sessions per partition: a record keyed otherwise than by
    its session id (`record_key`) may sit in another partition than the rest of its
    session, where no member holds the session whole. It is a bad record, named, not an
    episode skipped as misaligned for no visible reason."""
    check_session_key(event.session_id, key)


def check_session_key(session_id: str, key: bytes | None) -> None:
    """`check_key` of an event by its session id (a packed row's first value): the key
    must be `record_key`'s, the id as UTF-8."""
    if key is not None and key == session_id.encode("utf-8"):
        return
    shown = "no key" if key is None else f"key {_shown(key)}"
    raise WrongKeyError(
        f"the record has {shown}, not its session id {_shown(session_id)}: every "
        "event of a session must be keyed by its session id, or the session is "
        "split over partitions that different members hold")


def _shown(value: bytes | str, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
