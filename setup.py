"""Maps the repository's top-level folders into the one `rlmesh_stream` namespace.

`schemas/` installs as `rlmesh_stream.schemas`, `producer/` as `rlmesh_stream.producer`,
and so on; `rlmesh_stream` itself is a namespace package with no folder of its own, so
the wheel (and an editable install) puts no other top-level module into site-packages.
Everything else about the distribution is in pyproject.toml; this file exists only
because the list of sub-packages is derived from the folders rather than written out,
and because the one C extension is declared here.
"""

from setuptools import Extension, find_packages, setup

NAMESPACE = "rlmesh_stream"
FOLDERS = ("schemas", "producer", "consumers", "infra")

setup(
    packages=[f"{NAMESPACE}.{name}" for name in
              find_packages(include=[p for f in FOLDERS for p in (f, f"{f}.*")])],
    package_dir={f"{NAMESPACE}.{folder}": folder for folder in FOLDERS},
    package_data={
        f"{NAMESPACE}.schemas": ["avro/*.avsc", "proto/**/*.proto", "_pb/**/*.pyi",
                                 "_avro_project.pyi"],
        f"{NAMESPACE}.infra": ["*.xml", "*.yaml", "*.yml", "*.properties"],
    },
    # The packed projection's reader in C (schemas/avro_native.py). Optional: without a
    # C compiler the install still succeeds and consumers read with the Python reader.
    ext_modules=[Extension(f"{NAMESPACE}.schemas._avro_project", ["schemas/_avro_project.c"],
                           optional=True)],
)
