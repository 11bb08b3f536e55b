"""Consumer processes that turn the event topics into tables (DuckDB or PostgreSQL).

`consumers.runtime` is the exactly-once consumer loop every builder shares,
`consumers.builders` the event -> row reducers, `consumers.sinks` the stores,
`consumers.tables` the table contract. This package never imports `producer`.
"""
