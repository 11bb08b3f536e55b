"""The merge rules, twice: in Python (to pre-merge one batch's rows) and in SQL (to merge
the batch into the table).

Why both in one file: an `INSERT ... ON CONFLICT DO UPDATE` may not touch one row twice,
so a batch is merged in Python first with the same rule the SQL then applies; any arrival
order of a session's events, across topics and batches, yields the same row only if the
two twins agree, so each rule's twins sit side by side (`MergeRule`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rlmesh_stream.consumers.table_model.columns import Column, Merge, Table


@dataclass(frozen=True)
class MergeRule:
    """One merge rule, twice: in Python over values, in SQL over expressions.

    Both take (old, new, wins): the stored and the incoming value, and whether the
    incoming row outranks the stored one (RANK: on the column itself; FOLLOWS: on the
    status column it follows; unused otherwise).
    """

    python: Callable[[Any, Any, bool], Any]
    sql: Callable[[str, str, str], str]


def _coalesce(first: Any, second: Any) -> Any:
    return first if first is not None else second


def _new_if(better: Callable[[Any, Any], bool], op: str) -> MergeRule:
    """The incoming value when the stored one is NULL or it is `better` (MIN, MAX)."""
    return MergeRule(
        lambda old, new, _: new if old is None or (new is not None and better(new, old))
        else old,
        lambda old, new, _: (f"CASE WHEN {old} IS NULL OR ({new} IS NOT NULL AND "
                             f"{new} {op} {old}) THEN {new} ELSE {old} END"))


MERGE_RULES: dict[Merge, MergeRule] = {
    Merge.FIRST: MergeRule(lambda old, new, _: _coalesce(old, new),
                           lambda old, new, _: f"COALESCE({old}, {new})"),
    Merge.LAST: MergeRule(lambda old, new, _: _coalesce(new, old),
                          lambda old, new, _: f"COALESCE({new}, {old})"),
    Merge.SUM: MergeRule(lambda old, new, _: (old or 0) + (new or 0),
                         lambda old, new, _: f"COALESCE({old}, 0) + COALESCE({new}, 0)"),
    Merge.MIN: _new_if(operator.lt, "<"),
    Merge.MAX: _new_if(operator.gt, ">"),
    Merge.RANK: MergeRule(lambda old, new, wins: new if wins else old,
                          lambda old, new, wins: f"CASE WHEN {wins} THEN {new} ELSE {old} END"),
    Merge.FOLLOWS: MergeRule(
        lambda old, new, wins: _coalesce(new, old) if wins else _coalesce(old, new),
        lambda old, new, wins: (f"CASE WHEN {wins} THEN COALESCE({new}, {old}) "
                                f"ELSE COALESCE({old}, {new}) END")),
    # DERIVED has no rule: it is recomputed from the merged row (`finish_row`, `merge_sql`)
}


def _ranking(table: Table, column: Column) -> Column | None:
    """The status column whose rank decides `column`'s merge (RANK, FOLLOWS), if any."""
    if column.merge is Merge.RANK:
        return column
    if column.merge is Merge.FOLLOWS:
        return table.column_by_name[column.follows]
    return None


def merge_value(column: Column, old: Any, new: Any, new_wins: bool = False) -> Any:
    """The Python twin of `merge_sql`: merge one column of two partial rows.

    `new_wins` is only read by Merge.FOLLOWS: whether the new row's status outranks.
    """
    if column.merge is Merge.DERIVED:
        return old  # recomputed by merge_rows
    if column.merge is Merge.RANK:
        new_wins = _rank(column, new) > _rank(column, old)
    return MERGE_RULES[column.merge].python(old, new, new_wins)


def _rank(column: Column, value: Any) -> int:
    return column.ranks.index(value) if value in column.ranks else -1


_MergeStep = tuple[Callable[[Any, Any, bool], Any], str | None, dict[Any, int]]


@dataclass(frozen=True)
class _MergePlan:
    """A table's merge rules worked out once (the batch hot path): per column its rule's
    Python twin and the status column (with its ranks) whose winner the rule reads."""

    steps: dict[str, _MergeStep]
    sums: tuple[str, ...]  # SUM columns: the only rule that changes a value for a NULL


def _keep_old(old: Any, new: Any, wins: bool) -> Any:
    return old  # DERIVED: recomputed by finish_row


def _merge_plan(table: Table) -> _MergePlan:
    plan: _MergePlan | None = table.__dict__.get("_merge_plan")
    if plan is None:
        steps: dict[str, _MergeStep] = {}
        for c in table.columns:
            status = _ranking(table, c)
            rule = _keep_old if c.merge is Merge.DERIVED else MERGE_RULES[c.merge].python
            ranks: dict[Any, int] = {}
            for i, v in enumerate(status.ranks if status is not None else ()):
                ranks.setdefault(v, i)  # as tuple.index: the first place
            steps[c.name] = (rule, None if status is None else status.name, ranks)
        sums = tuple(c.name for c in table.columns if c.merge is Merge.SUM)
        plan = _MergePlan(steps, sums)
        object.__setattr__(table, "_merge_plan", plan)  # a cache on the frozen table
    return plan


def merge_rows(table: Table, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Merge two partial rows of the same key, exactly as the SQL upsert does.

    A column absent from either row merges as NULL. Every rule but SUM keeps the
    stored value for an incoming NULL, so only the new row's non-NULL values (and
    the SUM columns) are merged: a partial row costs what it holds.
    """
    plan = _merge_plan(table)
    steps = plan.steps
    old_get, new_get = old.get, new.get
    merged = {c: old_get(c) for c in table.column_names}
    for name, value in new.items():
        if value is None:
            continue
        step = steps.get(name)
        if step is None:
            continue  # not a column of the table
        rule, status, ranks = step
        wins = status is not None and (
            ranks.get(new_get(status), -1) > ranks.get(old_get(status), -1))
        merged[name] = rule(old_get(name), value, wins)
    for name in plan.sums:
        if new_get(name) is None:
            merged[name] = steps[name][0](old_get(name), None, False)
    return finish_row(table, merged)


def tuple_merger(table: Table) -> Callable[[tuple[Any, ...], tuple[Any, ...]], tuple[Any, ...]]:
    """`merge_rows` for packed rows (every column, in the table's order), generated once
    per table from the same rules: FIRST and LAST inline, the others call their rule."""
    merge: Any = table.__dict__.get("_tuple_merger")
    if merge is not None:
        return merge  # type: ignore[no-any-return]
    if table.has_derived:
        raise ValueError(f"{table.name}: packed rows do not support derived columns")
    index = {name: i for i, name in enumerate(table.column_names)}
    ns: dict[str, Any] = {}
    wins: dict[str, str] = {}
    lines, exprs = [], []
    for i, c in enumerate(table.columns):
        if c.merge is Merge.FIRST:
            exprs.append(f"o[{i}] if o[{i}] is not None else n[{i}]")
            continue
        if c.merge is Merge.LAST:
            exprs.append(f"n[{i}] if n[{i}] is not None else o[{i}]")
            continue
        status = _ranking(table, c)
        flag = "False"
        if status is not None:
            if status.name not in wins:
                s = index[status.name]
                ranks: dict[Any, int] = {}
                for r, v in enumerate(status.ranks):
                    ranks.setdefault(v, r)  # as tuple.index: the first place
                ns[f"R{s}"] = ranks.get
                wins[status.name] = f"w{s}"
                lines.append(f"w{s} = R{s}(n[{s}], -1) > R{s}(o[{s}], -1)")
            flag = wins[status.name]
        ns[f"M{i}"] = MERGE_RULES[c.merge].python
        exprs.append(f"M{i}(o[{i}], n[{i}], {flag})")
    body = "".join(f"    {line}\n" for line in lines)
    source = f"def merge(o, n):\n{body}    return ({', '.join(exprs)},)\n"
    exec(compile(source, f"<merge {table.name}>", "exec"), ns)
    merge = ns["merge"]
    object.__setattr__(table, "_tuple_merger", merge)  # a cache on the frozen table
    return merge  # type: ignore[no-any-return]


def finish_row(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """Fill the derived columns of a (merged) row."""
    if not table.has_derived:
        return row
    for c in table.columns:
        if c.merge is Merge.DERIVED and c.derive is not None:
            row[c.name] = c.derive(row)
    return row


def merge_sql(table: Table, column: Column) -> str:
    """SQL for `SET column = ...` in `ON CONFLICT DO UPDATE`: stored is `t.c`, new `excluded.c`."""
    t, n = table.name, "excluded"
    if column.merge is Merge.DERIVED:
        # derive_sql names merged columns as {col}; substitute their merge expressions
        exprs = {other.name: f"({merge_sql(table, other)})" for other in table.columns
                 if other.merge is not Merge.DERIVED}
        return column.derive_sql.format(**exprs)
    status = _ranking(table, column)
    wins = "" if status is None else (
        f"{rank_sql(status, f'{n}.{status.name}')} > {rank_sql(status, f'{t}.{status.name}')}")
    return MERGE_RULES[column.merge].sql(f"{t}.{column.name}", f"{n}.{column.name}", wins)


def rank_sql(column: Column, expr: str) -> str:
    whens = " ".join(f"WHEN '{v}' THEN {i}" for i, v in enumerate(column.ranks))
    return f"(CASE {expr} {whens} ELSE -1 END)"
