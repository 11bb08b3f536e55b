"""Consumer processes that turn the event topics into tables (DuckDB or PostgreSQL).

`runtime` is the exactly-once consumer loop every builder shares, `builders` the
event -> row reducers, `sinks` the stores (and `sinks.url`, the one reader of a
`--sink` URL), `tables` the table contract. `analysis` is what is read from the
tables (reports, join, plots, tail). This package never imports `producer`.
"""
