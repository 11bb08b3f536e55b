"""`rlmesh-stream export trajectories`: what a user types that is wrong gets one Error line."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rlmesh_stream.consumers.datasets.manifest import ManifestStore
from rlmesh_stream.infra.cli import main
from tests.loopback import closed_port


def _export(*args: str) -> tuple[int, str]:
    # no Kafka listens here: a run reaching it gives up after 1 s, not the default 15
    result = CliRunner().invoke(main, ["export", "trajectories", "--quiet",
                                       "--connect-timeout", "1", *args])
    return result.exit_code, result.output


def test_a_dataset_id_without_a_version_is_refused(tmp_path: Path) -> None:
    code, output = _export("--out", str(tmp_path), "--format", "minari",
                           "--dataset-id", "cartpole")

    assert code != 0
    assert output.strip().splitlines() == [
        "Error: dataset id 'cartpole' is not [NAMESPACE/]NAME-vN "
        "(for example rlmesh/cartpole-v0, or rlmesh/{env}-v0 for one dataset per env)"]


def test_a_directory_holding_another_format_is_refused_not_overwritten(tmp_path: Path) -> None:
    ManifestStore(tmp_path, fmt="parquet", dataset_id="rlmesh/a-v0").commit(
        offsets={}, writer={}, certificate={}, changes={}, whole=dict)

    code, output = _export("--out", str(tmp_path), "--format", "minari",
                           "--dataset-id", "rlmesh/a-v0")

    assert code != 0
    assert output.strip() == f"Error: {tmp_path} holds a parquet dataset, not minari"


def test_a_directory_another_export_is_writing_is_refused(tmp_path: Path) -> None:
    running = ManifestStore(tmp_path, fmt="parquet", dataset_id="rlmesh/a-v0")

    code, output = _export("--out", str(tmp_path), "--format", "parquet",
                           "--dataset-id", "rlmesh/a-v0")
    running.close()

    assert code != 0
    assert output.strip() == f"Error: {tmp_path} is being exported into by another process"


def test_an_unknown_format_is_refused_by_name(tmp_path: Path) -> None:
    code, output = _export("--out", str(tmp_path), "--format", "hdf5")

    assert code != 0
    assert "Invalid value for '--format'" in output


def test_an_unreachable_kafka_is_one_line_like_consume_says_it(tmp_path: Path) -> None:
    port = closed_port()
    code, output = _export("--out", str(tmp_path), "--format", "parquet", "--until-end",
                           "--bootstrap", f"127.0.0.1:{port}")

    assert code == 1
    (line,) = output.strip().splitlines()
    assert line.startswith(f"Error: cannot reach Kafka at 127.0.0.1:{port}"), line


def test_a_directory_format_without_out_is_refused_by_name(tmp_path: Path) -> None:
    code, output = _export("--format", "parquet")

    assert code != 0
    assert "--format parquet needs --out DIR" in output


def test_iceberg_without_catalog_and_table_is_refused_by_name() -> None:
    code, output = _export("--format", "iceberg", "--table", "rl.x")

    assert code != 0
    assert "--format iceberg needs --catalog URI and --table NAMESPACE.NAME" in output


def test_an_iceberg_table_without_namespace_is_refused_in_one_line(tmp_path: Path) -> None:
    code, output = _export("--format", "iceberg", "--catalog",
                           f"sqlite:///{tmp_path}/c.db", "--table", "trajectories")

    assert code != 0
    assert output.strip() == "Error: --table 'trajectories' is not NAMESPACE.NAME"
