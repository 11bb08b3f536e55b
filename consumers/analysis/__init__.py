"""What is built from the consumers' tables: reports, the join with training logs, plots, tail.

The analysis side only reads the tables the ingestion side (`consumers.runtime`, the
builders and sinks) writes, and refers to them through `consumers.tables`' own
definitions. Nothing here writes a consumer-owned table.
"""
