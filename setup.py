"""Declares the one C extension; everything else about the distribution is in pyproject.toml.

The packages are found under `rlmesh_stream/`, a committed folder of links to the
repository's top-level folders (`rlmesh_stream/schemas -> ../schemas`, ...): the design
fixes those folders at the top, and the links give the one `rlmesh_stream` namespace a real
place on disk, so the wheel, the editable install, mypy, import-graph tools and an IDE's
go-to-definition all see the same package without a generated tree.
"""

from setuptools import Extension, setup

setup(
    # The packed projection's reader in C (schemas/codec/avro_native.py). Optional: without a
    # C compiler the install still succeeds and consumers read with the Python reader.
    ext_modules=[Extension("rlmesh_stream.schemas.codec._avro_project",
                           ["schemas/codec/_avro_project.c"], optional=True)],
)
