"""SQL and reader schemas for other engines (Flink SQL, Spark), generated from the contract.

`reader` prunes each event's Avro schema to what an engine's type system can declare
(recursive and multi-branch-union fields are left out, each with its reason);
`flink` renders a `CREATE TABLE` per topic over that reader schema, `spark` a
reader schema and read snippet per topic. Nothing here is written by hand per
topic, so the DDL cannot drift from the `.avsc` files.
"""
