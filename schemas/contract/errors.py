"""The errors of the event contract, so callers can tell what to do about each.

`ContractError`: the event itself is wrong (a bug upstream): never retry it.
`DecodeError` and its subclasses: a record cannot be read: dead-letter it.
`RegistryUnavailableError`: the registry cannot be reached right now: wait and
retry, never dead-letter, so it is deliberately *not* a `DecodeError`.
`RegistryProtocolError`: the registry URL leads to something else: fix the URL.
"""

from __future__ import annotations

from rlmesh_stream.schemas.errors import RlmeshStreamError


class ContractError(RlmeshStreamError, ValueError):
    """An event value the contract cannot carry faithfully (names event, field, value)."""

    def __init__(self, event: str, field: str, value: object, reason: str) -> None:
        shown = repr(value)
        if len(shown) > 200:
            shown = shown[:200] + "...(truncated)"
        super().__init__(f"{event}.{field} = {shown}: {reason}")
        self.event = event
        self.field = field
        self.value = value
        self.reason = reason


class DecodeError(RlmeshStreamError, ValueError):
    """A record value that cannot be decoded into an event."""


class BadMagicByteError(DecodeError):
    """The value does not start with the Confluent wire-format magic byte 0."""


class UnknownSchemaIdError(DecodeError):
    """The schema id in the header is not in the registry, or not one of our events."""


class CorruptPayloadError(DecodeError):
    """The payload does not decode with the schema its header names."""


class WrongEventTypeError(DecodeError):
    """A valid event of another type than the topic it was read from carries."""


class WrongKeyError(DecodeError):
    """A valid event whose record is not keyed by its session id, as the contract keys
    every event (`record_key`): it may sit in another partition than its session's."""


class RegistryUnavailableError(RlmeshStreamError, ConnectionError):
    """The schema registry could not be reached; retry later."""


class RegistryProtocolError(RlmeshStreamError, RuntimeError):
    """The server at the registry URL answers, but not as a Confluent-API schema registry
    (an HTML page, a 404 without a registry error code): the URL is wrong; never retried."""


class SubjectFormatError(RlmeshStreamError, ValueError):
    """The subject already holds schemas of the other wire format (a topic carries one)."""


class SchemaNotRegisteredError(RlmeshStreamError, LookupError):
    """Registration is off and the event's schema is not registered under its subject."""


__all__ = [
    "BadMagicByteError",
    "ContractError",
    "CorruptPayloadError",
    "DecodeError",
    "RegistryProtocolError",
    "RegistryUnavailableError",
    "SchemaNotRegisteredError",
    "SubjectFormatError",
    "UnknownSchemaIdError",
    "WrongEventTypeError",
]
