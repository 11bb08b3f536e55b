"""Consumer processes that turn the event topics into tables (DuckDB or PostgreSQL).

`runtime` is the exactly-once consumer loop every builder shares, `builders` the
event -> row reducers, `sinks` the stores, `tables` the table contract.
This package never imports `producer`.
"""
