"""The schema registry: registering our schemas, looking writer schemas up, compatibility.

`client` (the Confluent client, errors mapped to the contract's), `http` (writer schemas
by id over plain HTTP, what a consumer needs), `registrar` (schema ids, registered on first
use), `schema_defs` and `proto_defs` (each event's registry form), `compat` (which fields
make our schema unable to read what the registry holds).
"""
