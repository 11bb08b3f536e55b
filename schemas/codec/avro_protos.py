"""Avro mirror of a protobuf leaf -> the protobuf message, for both Avro readers.

Some event fields are protobuf messages on the producer side (a `SpaceSpec`);
their Avro schema mirrors the message (same field names, each oneof a union), so
a decoded Avro dict converts back field by field. fastavro's resolving reader
(`avro_reader`) and the generated fast reader (`avro_fastread`) both use this.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor
from google.protobuf.message import Message

from rlmesh_stream.schemas.contract import events
from rlmesh_stream.schemas.contract.errors import CorruptPayloadError


def space_spec_from_avro(data: dict[str, Any]) -> Message:
    """A `SpaceSpec` from its decoded Avro record."""
    return proto_from_avro(events.SpaceSpec, data)


def proto_from_avro(cls: type[Message], data: dict[str, Any]) -> Message:
    """Build a protobuf message from its Avro mirror (same field names, oneofs as unions)."""
    msg = cls()
    desc = msg.DESCRIPTOR
    oneof_names = {o.name for o in desc.oneofs}
    for key, value in data.items():
        if key in oneof_names:
            if value is None:
                continue
            _set_oneof(msg, desc.oneofs_by_name[key], value)
            continue
        fd = desc.fields_by_name[key]
        _set_field(msg, fd, value)
    return msg


def _set_oneof(msg: Message, oneof: descriptor.OneofDescriptor, value: Any) -> None:
    if type(value) is tuple:
        name, body = value
        for fd in oneof.fields:
            if fd.message_type is not None and fd.message_type.full_name == name:
                sub = getattr(msg, fd.name)
                sub.CopyFrom(proto_from_avro(_msg_class(fd), body))
                sub.SetInParent()  # an empty member is still the member that is set
                return
        raise CorruptPayloadError(f"no member of oneof {oneof.full_name} has type {name}")
    for fd in oneof.fields:  # a scalar branch (BoxSpec.unbounded)
        if fd.message_type is None:
            setattr(msg, fd.name, value)
            return
    raise CorruptPayloadError(f"no scalar member in oneof {oneof.full_name}")


def _msg_class(fd: descriptor.FieldDescriptor) -> type[Message]:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(fd.message_type)


def _set_field(msg: Message, fd: descriptor.FieldDescriptor, value: Any) -> None:
    repeated = fd.is_repeated
    if fd.message_type is not None:
        cls = _msg_class(fd)
        if repeated:
            getattr(msg, fd.name).extend(proto_from_avro(cls, v) for v in value)
        elif value is not None:
            sub = getattr(msg, fd.name)
            sub.CopyFrom(proto_from_avro(cls, value))
            sub.SetInParent()
    elif fd.enum_type is not None:
        setattr(msg, fd.name, fd.enum_type.values_by_name[value].number)
    elif repeated:
        getattr(msg, fd.name).extend(value)
    else:
        setattr(msg, fd.name, value)
