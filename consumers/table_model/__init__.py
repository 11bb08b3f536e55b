"""The table model the consumers' tables are declared in, and what it renders to.

`columns` (Column, Table, View, Merge, Dialect: what a definition is made of), `merge`
(each merge rule in Python and in SQL), `ddl` (CREATE TABLE, upserts, views per dialect).
The definitions themselves are `consumers/tables.py`, which re-exports these names.
"""

from __future__ import annotations

from rlmesh_stream.consumers.table_model.columns import (
    Column,
    Dialect,
    Merge,
    Table,
    View,
    sql_type,
)
from rlmesh_stream.consumers.table_model.ddl import (
    add_column_sql,
    column_defs,
    create_table_sql,
    create_view_sql,
    merge_into_sql,
    upsert_sql,
)
from rlmesh_stream.consumers.table_model.merge import (
    MERGE_RULES,
    MergeRule,
    finish_row,
    merge_rows,
    merge_sql,
    merge_value,
    rank_sql,
    tuple_merger,
)

__all__ = [
    "MERGE_RULES",
    "Column",
    "Dialect",
    "Merge",
    "MergeRule",
    "Table",
    "View",
    "add_column_sql",
    "column_defs",
    "create_table_sql",
    "create_view_sql",
    "finish_row",
    "merge_into_sql",
    "merge_rows",
    "merge_sql",
    "merge_value",
    "rank_sql",
    "sql_type",
    "tuple_merger",
    "upsert_sql",
]
