"""The codecs: event dataclasses <-> bytes on the wire, and leaf bytes <-> values.

`wire` (the Confluent framing), `serde` (the serializer and decoder both sides use),
the Avro writer and readers (`avro_writer`, `avro_reader`, the generated
`avro_fastread`), `proto_codec`, `avro_protos` (protobuf leaves inside
Avro), and `leaves` (observation and action bytes -> typed values, runtime-events.md §7).
"""
