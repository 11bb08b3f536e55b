"""The SQL a table definition renders to, per dialect: CREATE TABLE, the added-column
migration, the upsert (`INSERT ... ON CONFLICT` and DuckDB's `MERGE INTO`) and views.

Why apart from the merge rules: these statements only assemble the per-column merge
expressions (`merge.merge_sql`) into whole statements; a change to how a store creates or
upserts a table is made here, a change to what a merge means in `merge.py`.
"""

from __future__ import annotations

from dataclasses import replace

from rlmesh_stream.consumers.table_model.columns import (
    Column,
    Dialect,
    Merge,
    Table,
    View,
    sql_type,
)
from rlmesh_stream.consumers.table_model.merge import merge_sql


def column_defs(table: Table, dialect: Dialect) -> str:
    return ",\n  ".join(
        f"{c.name} {sql_type(c, dialect)}{'' if c.nullable else ' NOT NULL'}"
        for c in table.columns
    )


def create_table_sql(table: Table, dialect: Dialect) -> str:
    """The table, its key a PRIMARY KEY; in DuckDB only where ON CONFLICT names it.

    DuckDB upserts with `merge_into_sql`, which keeps keys unique by itself and, from
    DuckDB 1.4, joins by a scan rather than the key's index: the index (an ART) would
    only be maintained, at about a sixth of the sink's time. Its key columns are NOT NULL
    all the same.
    """
    if dialect is Dialect.DUCKDB and not table.conflict_target:
        keyed = Table(table.name, tuple(replace(c, nullable=False) if c.name in table.primary_key
                                        else c for c in table.columns), table.primary_key)
        return f"CREATE TABLE IF NOT EXISTS {table.name} (\n  {column_defs(keyed, dialect)}\n)"
    cols = column_defs(table, dialect)
    return (f"CREATE TABLE IF NOT EXISTS {table.name} (\n  {cols},\n"
            f"  PRIMARY KEY ({', '.join(table.primary_key)})\n)")


def add_column_sql(table: Table, column: Column, dialect: Dialect) -> str:
    """Migration: a column added to a table definition is added to an existing table."""
    return f"ALTER TABLE {table.name} ADD COLUMN {column.name} {sql_type(column, dialect)}"


def upsert_sql(table: Table, source: str) -> str:
    """Merge the staged rows of `source` (same columns) into `table`.

    Derived columns are computed by SQL on insert as on update, so a row's value
    never depends on whether its last batch inserted or updated it.
    """
    return (f"INSERT INTO {table.name} ({', '.join(table.column_names)})\n"
            f"SELECT {_insert_values(table)} FROM {source}\n"
            f"ON CONFLICT ({', '.join(table.primary_key)}) DO UPDATE SET\n  {_merge_sets(table)}")


def merge_into_sql(table: Table, source: str) -> str:
    """`upsert_sql` as a `MERGE INTO` (DuckDB >= 1.4): the same merge expressions (the
    staged row named `excluded`) and inserted values, so the same rows.

    DuckDB plans `ON CONFLICT DO UPDATE` as this MERGE over `SELECT DISTINCT ON (key)` of
    the source; a batch's keys are distinct already (one merged row per key), so the MERGE
    skips that aggregation, about a fifth of the statement (19.5 of ~100 ms for a
    20 000-row checkpoint).
    """
    t = table.name
    on = " AND ".join(f"{t}.{k} = excluded.{k}" for k in table.primary_key)
    return (f"MERGE INTO {t} USING {source} AS excluded ON ({on})\n"
            f"WHEN MATCHED THEN UPDATE SET\n  {_merge_sets(table)}\n"
            f"WHEN NOT MATCHED THEN INSERT ({', '.join(table.column_names)})\n"
            f"VALUES ({_insert_values(table, 'excluded.')})")


def _insert_values(table: Table, qualifier: str = "") -> str:
    """The values inserting a staged row: its columns, derived ones computed; a SELECT
    list (named) unqualified, a VALUES list with the staged relation's `qualifier`."""
    staged = {c.name: f"{qualifier}{c.name}" for c in table.columns}
    return ", ".join(
        staged[c.name] if c.merge is not Merge.DERIVED
        else c.derive_sql.format(**staged) + ("" if qualifier else f" AS {c.name}")
        for c in table.columns)


def _merge_sets(table: Table) -> str:
    """The SET list merging a staged row (`excluded`) into the stored one."""
    return ",\n  ".join(f"{c.name} = {merge_sql(table, c)}"
                         for c in table.columns if c.name not in table.primary_key)


def create_view_sql(view: View) -> str:
    return f"CREATE OR REPLACE VIEW {view.name} AS\n{view.sql}"
