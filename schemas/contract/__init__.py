"""The event contract itself: what an event is, where it goes, and what makes it valid.

The runtime's event types (`events`, `telemetry`), topic and subject naming (`topics`),
the record headers (`headers`), the value checks (`validate`), the contract's errors
(`errors`), and the schema files: `avro/*.avsc`, `proto/**/*.proto` and the protobuf
modules generated from them (`_pb`, by `generate`). `catalog` writes the topic catalog
from them. Every other part of `schemas` is derived from what is here.
"""
