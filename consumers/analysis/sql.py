"""Quoting for the SQL the analysis side writes: identifiers and string literals.

Shared by the join and its PostgreSQL copy path (which would otherwise import each
other), and usable by any report that builds SQL from names it did not write itself.
"""

from __future__ import annotations


def q(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def sql_str(text: str) -> str:
    """`text` for inside a single-quoted SQL string literal."""
    return text.replace("'", "''")
