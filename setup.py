"""Calls setuptools; everything about the distribution is in pyproject.toml (pure Python:
the C projection reader was dropped, docs/benchmarks.md, "Tried and not kept").

The packages are found under `rlmesh_stream/`, a committed folder of links to the
repository's top-level folders (`rlmesh_stream/schemas -> ../schemas`, ...): the design
fixes those folders at the top, and the links give the one `rlmesh_stream` namespace a real
place on disk, so the wheel, the editable install, mypy, import-graph tools and an IDE's
go-to-definition all see the same package without a generated tree.
"""

from setuptools import setup

setup()
