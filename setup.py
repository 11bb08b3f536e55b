"""Maps the repository's top-level folders into the one `rlmesh_stream` namespace.

`schemas/` installs as `rlmesh_stream.schemas`, `producer/` as `rlmesh_stream.producer`,
and so on; `rlmesh_stream` itself is a namespace package with no folder of its own, so
the wheel (and an editable install) puts no other top-level module into site-packages.
Everything else about the distribution is in pyproject.toml; this file exists only
because the list of sub-packages is derived from the folders rather than written out.
"""

from setuptools import find_packages, setup

NAMESPACE = "rlmesh_stream"
FOLDERS = ("schemas", "producer", "consumers", "infra")

setup(
    packages=[f"{NAMESPACE}.{name}" for name in
              find_packages(include=[p for f in FOLDERS for p in (f, f"{f}.*")])],
    package_dir={f"{NAMESPACE}.{folder}": folder for folder in FOLDERS},
    package_data={
        f"{NAMESPACE}.schemas": ["avro/*.avsc", "proto/**/*.proto", "_pb/**/*.pyi"],
        f"{NAMESPACE}.infra": ["*.xml", "*.yaml", "*.yml", "*.properties"],
    },
)
