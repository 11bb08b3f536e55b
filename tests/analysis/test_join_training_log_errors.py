"""Bad training-log input to `rlmesh-stream join`: one `Error:` line, exit 1, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rlmesh_stream.consumers.analysis.join_cli import join
from tests.analysis.analysis_stores import episode, insert, make_store
from tests.analysis.analysis_training_logs import LOSS, write_mlflow, write_tensorboard


@pytest.fixture
def sink(tmp_path: Path) -> str:
    path = tmp_path / "store.duckdb"
    con = make_store(path)
    insert(con, "episodes", [episode("s", 1, model_component_id="ckpt-1000")])
    con.close()
    return f"duckdb://{path}"


def refused(sink: str, *args: str) -> str:
    """Run the join expecting a refusal; the one error line."""
    result: Result = CliRunner().invoke(join, ["--sink", sink, *args])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def event_file(tmp_path: Path) -> Path:
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    (path,) = (logdir / "ppo_1").glob("events.out.tfevents.*")
    return path


def test_an_empty_log_directory(sink: str, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    line = refused(sink, "--log", str(tmp_path / "empty"), "--checkpoint-step", r"ckpt-(\d+)")
    assert "no TensorBoard event files (events.out.tfevents.*) under" in line


def test_a_truncated_event_file(sink: str, tmp_path: Path) -> None:
    path = event_file(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    line = refused(sink, "--log", str(path.parent), "--checkpoint-step", r"ckpt-(\d+)",
                   "--metric", LOSS)
    assert f"{path} is truncated or corrupt" in line
    assert f"of {len(data) - 7} (a file still being written ends mid-record" in line


def test_a_corrupt_event_file(sink: str, tmp_path: Path) -> None:
    path = event_file(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: a record's checksum fails
    path.write_bytes(bytes(data))
    line = refused(sink, "--log", str(path), "--checkpoint-step", r"ckpt-(\d+)",
                   "--metric", LOSS)
    assert "is truncated or corrupt: its records end at byte" in line


def test_an_unknown_tag_for_metric_lists_the_tags(sink: str, tmp_path: Path) -> None:
    path = event_file(tmp_path)
    line = refused(sink, "--log", str(path), "--checkpoint-step", r"ckpt-(\d+)",
                   "--metric", "train/value_loss")
    assert "has no metric column 'train/value_loss' (--metric); its columns are: run, step, " \
           "time, train/loss, rollout/ep_rew_mean" in line


def test_a_step_indexed_log_without_checkpoint_step_says_to_pass_it(sink: str,
                                                                   tmp_path: Path) -> None:
    line = refused(sink, "--log", str(event_file(tmp_path)), "--metric", LOSS)
    assert "has no checkpoint column 'checkpoint'" in line
    assert "pass --checkpoint-step REGEX" in line


def test_an_unknown_mlflow_run(sink: str, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    write_mlflow(uri, "exp", ["ppo_1"])
    line = refused(sink, "--mlflow-run", "0123456789abcdef", "--mlflow-tracking-uri", uri,
                   "--checkpoint-step", r"ckpt-(\d+)", "--metric", LOSS)
    assert f"no MLflow run '0123456789abcdef' at {uri}" in line


def test_a_checkpoint_regex_without_a_group(sink: str, tmp_path: Path) -> None:
    line = refused(sink, "--log", str(event_file(tmp_path)), "--checkpoint-step", r"ckpt-\d+",
                   "--metric", LOSS)
    assert r"--checkpoint-step 'ckpt-\d+' has no group" in line


def test_an_invalid_checkpoint_regex(sink: str, tmp_path: Path) -> None:
    line = refused(sink, "--log", str(event_file(tmp_path)), "--checkpoint-step", "ckpt-(\\d+",
                   "--metric", LOSS)
    assert "is not a regular expression" in line


def test_a_file_store_mlflow_refuses_to_open(sink: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    uri = (tmp_path / "mlruns").as_uri()
    line = refused(sink, "--mlflow-run", "0123456789abcdef", "--mlflow-tracking-uri", uri,
                   "--checkpoint-step", r"ckpt-(\d+)", "--metric", LOSS)
    assert f"MLflow tracking store {uri}: " in line
    assert "MLFLOW_ALLOW_FILE_STORE" in line


@pytest.mark.timeout(60)
def test_an_unreachable_tracking_server_fails_in_seconds(sink: str) -> None:
    # MLflow's own default (7 retries, doubling backoff) would wait minutes
    line = refused(sink, "--mlflow-run", "0123456789abcdef", "--mlflow-tracking-uri",
                   "http://127.0.0.1:1", "--checkpoint-step", r"ckpt-(\d+)", "--metric", LOSS)
    assert line.startswith("Error: MLflow tracking store http://127.0.0.1:1: ")
    assert "Connection refused" in line


@pytest.mark.parametrize("args", [[], ["--log", ".", "--mlflow-run", "abc"]])
def test_the_log_is_either_a_path_or_mlflow_runs(sink: str, args: list[str]) -> None:
    result = CliRunner().invoke(join, ["--sink", sink, *args])
    assert result.exit_code == 2
    assert "give the training log as --log PATH or --mlflow-run RUN_ID" in result.stderr


def test_checkpoint_step_is_refused_with_an_asof_join(sink: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(join, ["--sink", sink, "--log", str(event_file(tmp_path)),
                                       "--by", "asof", "--checkpoint-step", r"ckpt-(\d+)"])
    assert result.exit_code == 2
    assert "--checkpoint-step applies to --by key" in result.stderr


def _mlflow_args(uri: str) -> list[str]:
    return ["--mlflow-run", "0123456789abcdef", "--mlflow-tracking-uri", uri,
            "--checkpoint-step", r"ckpt-(\d+)", "--metric", LOSS]


def test_a_sqlite_tracking_uri_naming_a_file_that_is_no_database(sink: str,
                                                                  tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("not a database\n")
    line = refused(sink, *_mlflow_args(f"sqlite:///{path}"))
    assert f"{path} is not an SQLite database" in line
    assert path.read_text() == "not a database\n"


def test_a_mistyped_sqlite_tracking_path_creates_no_store(sink: str, tmp_path: Path) -> None:
    path = tmp_path / "mlfow" / "mlflow.db"
    line = refused(sink, *_mlflow_args(f"sqlite:///{path}"))
    assert f"{path} does not exist" in line
    assert not path.parent.exists()


def test_an_sqlite_database_that_is_not_an_mlflow_store_is_left_as_it_was(
        sink: str, tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "mine.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE notes (a TEXT)")
    line = refused(sink, *_mlflow_args(f"sqlite:///{path}"))
    assert "not an MLflow tracking store" in line
    with sqlite3.connect(path) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master")]
    assert tables == ["notes"]


def test_a_malformed_jsonl_log_is_one_line_naming_the_file(sink: str, tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text('{"step": 1, "checkpoint": "ckpt-1000"}\n{"step": 2, "checkpoint": \n')
    line = refused(sink, "--log", str(path))
    assert f"cannot read training log {path} as jsonl" in line
    assert "Malformed JSON" in line


def test_a_parquet_log_that_is_not_parquet_is_one_line_naming_the_file(sink: str,
                                                                       tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    path.write_bytes(b"PAR1 but nothing else")
    line = refused(sink, "--log", str(path))
    assert f"cannot read training log {path} as parquet" in line


@pytest.mark.parametrize("claimed", [2**40, 2**64 - 1], ids=["2^40", "2^64-1"])
def test_an_event_record_claiming_more_bytes_than_the_file_holds(sink: str, tmp_path: Path,
                                                                 claimed: int) -> None:
    import struct

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    path = event_file(tmp_path)
    good = path.read_bytes()
    header = struct.pack("<Q", claimed)  # a valid header CRC: only the length lies
    path.write_bytes(good + header + struct.pack("<I", masked_crc32c(header)) + b"data")
    line = refused(sink, "--log", str(path), "--checkpoint-step", r"ckpt-(\d+)",
                   "--metric", LOSS)
    assert f"{path} is truncated or corrupt: its records end at byte {len(good)}" in line
    assert f"claims {claimed} bytes" in line
