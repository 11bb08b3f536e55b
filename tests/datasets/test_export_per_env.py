"""A stream of several envs: one Minari dataset per env (`{env}` in the id) or a one-line
refusal, every env in Parquet and Iceberg, and every skip named on screen."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest
from click.testing import CliRunner

from rlmesh_stream.infra.cli import main
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.datasets.rollouts import exportable, run_cartpole, run_pendulum, run_simulator

pytestmark = pytest.mark.stack


def _cli(config: StreamConfig, *args: str) -> tuple[int, str]:
    run = CliRunner().invoke(main, [
        "export", "trajectories", "--bootstrap", config.bootstrap, "--registry-url",
        config.registry_url, "--topic-prefix", config.topic_prefix, "--from-beginning",
        "--until-end", "--quiet", *args])
    return run.exit_code, run.output


def _load(out: Path, dataset_id: str):
    import minari

    os.environ["MINARI_DATASETS_PATH"] = str(out)
    return minari.load_dataset(dataset_id)


def test_an_env_template_writes_one_minari_dataset_per_env(make_hooks, stream_config, tmp_path):
    sim = run_simulator(make_hooks)
    run_cartpole(make_hooks, [5, 6])
    out = tmp_path / "ds"

    code, output = _cli(stream_config, "--out", str(out), "--format", "minari",
                        "--dataset-id", "rlmesh/{env}-v0")

    assert code == 0, output
    cartpole = _load(out, "rlmesh/CartPole-v1-v0")
    simulated = _load(out, "rlmesh/sim_CartPole-v1-v0")
    assert cartpole.total_episodes == 2
    assert simulated.total_episodes == exportable(sim)
    assert cartpole.recover_environment().spec.id == "CartPole-v1"
    metas = list(simulated.storage.get_episode_metadata(range(simulated.total_episodes)))
    assert {m["env_id"] for m in metas} == {"sim/CartPole-v1"}
    assert "space_mismatch" not in output
    assert "load it: MINARI_DATASETS_PATH" in output and "rlmesh/sim_CartPole-v1-v0" in output


def test_several_envs_without_an_env_template_are_refused_in_one_line(
    make_hooks, stream_config, tmp_path,
):
    run_simulator(make_hooks)
    run_cartpole(make_hooks, [7, 8])

    code, output = _cli(stream_config, "--out", str(tmp_path / "ds"), "--format", "minari",
                        "--dataset-id", "rlmesh/mixed-v0")

    assert code != 0
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert re.fullmatch(
        r"Error: the stream holds 2 envs \(CartPole-v1: 2 episodes, sim/CartPole-v1: \d+ "
        r"episodes\) and a Minari dataset holds one: pass --env-id ENV, or a --dataset-id "
        r"with \{env\} for one dataset per env \(e\.g\. rlmesh/\{env\}-v0\)", lines[0]), lines


def test_one_env_picked_with_env_id_goes_into_a_plain_dataset_id(
    make_hooks, stream_config, tmp_path,
):
    run_simulator(make_hooks)
    run_cartpole(make_hooks, [9])

    code, output = _cli(stream_config, "--out", str(tmp_path / "ds"), "--format", "minari",
                        "--dataset-id", "rlmesh/cartpole-v0", "--env-id", "CartPole-v1")

    assert code == 0, output
    assert _load(tmp_path / "ds", "rlmesh/cartpole-v0").total_episodes == 1


def test_parquet_step_rows_name_their_env_and_every_env_is_held(
    make_hooks, stream_config, tmp_path,
):
    sim = run_simulator(make_hooks)
    run_cartpole(make_hooks, [10, 11])

    code, output = _cli(stream_config, "--out", str(tmp_path / "pq"), "--format", "parquet")

    assert code == 0, output
    steps = pads.dataset(tmp_path / "pq" / "steps", partitioning="hive").to_table()
    episodes = pads.dataset(tmp_path / "pq" / "episodes", partitioning="hive").to_table()
    assert sorted(set(steps.column("env_id").to_pylist())) == ["CartPole-v1", "sim/CartPole-v1"]
    assert episodes.num_rows == 2 + exportable(sim)
    # the column alone, without the hive partition, keeps each row's env
    plain = pads.dataset(tmp_path / "pq" / "steps").to_table()
    assert plain.column("env_id").to_pylist().count("CartPole-v1") == sum(
        n for env, n in zip(episodes.column("env_id").to_pylist(),
                            episodes.column("steps").to_pylist(), strict=True)
        if env == "CartPole-v1")


def test_iceberg_holds_envs_whose_spaces_differ_only_in_bounds(
    make_hooks, stream_config, tmp_path,
):
    sim = run_simulator(make_hooks)
    run_cartpole(make_hooks, [12, 13])
    catalog = f"sqlite:///{tmp_path / 'cat.db'}"

    code, output = _cli(stream_config, "--format", "iceberg", "--catalog", catalog,
                        "--table", "rl.mixed")

    assert code == 0, output
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("rlmesh", uri=catalog, warehouse=f"file://{tmp_path / 'warehouse'}")
    episodes = cat.load_table("rl.mixed_episodes").scan().to_arrow()
    steps = cat.load_table("rl.mixed_steps").scan().to_arrow()
    assert episodes.num_rows == 2 + exportable(sim)
    assert sorted(set(steps.column("env_id").to_pylist())) == ["CartPole-v1", "sim/CartPole-v1"]
    assert steps.num_rows == sum(episodes.column("steps").to_pylist())
    assert "space_mismatch" not in output


def _iceberg(catalog: str, warehouse: Path) -> dict[str, Any]:
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("rlmesh", uri=catalog, warehouse=warehouse.as_uri())
    return {f"{ns}.{name}": cat.load_table(f"{ns}.{name}").scan().to_arrow()
            for ns, name in cat.list_tables("rl")}


def test_iceberg_gives_an_env_of_other_column_types_a_steps_table_of_its_own(
    make_hooks, stream_config, tmp_path,
):
    cartpole = run_cartpole(make_hooks, [16, 17])
    pendulum = run_pendulum(make_hooks, [18])
    catalog = f"sqlite:///{tmp_path / 'cat.db'}"

    code, output = _cli(stream_config, "--format", "iceberg", "--catalog", catalog,
                        "--table", "rl.envs")
    rerun, again = _cli(stream_config, "--format", "iceberg", "--catalog", catalog,
                        "--table", "rl.envs")

    assert code == 0, output
    assert rerun == 0, again
    tables = _iceberg(catalog, tmp_path / "warehouse")
    assert sorted(tables) == ["rl.envs_episodes", "rl.envs_steps", "rl.envs_steps_pendulum_v1"]
    episodes = tables["rl.envs_episodes"]
    assert sorted(episodes.column("env_id").to_pylist()) == ["CartPole-v1"] * 2 + ["Pendulum-v1"]
    for name, env, run in (("rl.envs_steps", "CartPole-v1", cartpole),
                           ("rl.envs_steps_pendulum_v1", "Pendulum-v1", pendulum)):
        steps = tables[name]
        assert set(steps.column("env_id").to_pylist()) == {env}
        assert steps.num_rows == sum(e.steps for e in run.episodes)  # once: the rerun added none
    assert str(tables["rl.envs_steps"].schema.field("action").type) == "int64"
    assert str(tables["rl.envs_steps_pendulum_v1"].schema.field("action").type).startswith(
        "list<")
    assert "space_mismatch" not in output
    assert "steps of CartPole-v1 in rl.envs_steps" in output.splitlines()
    assert ("steps of Pendulum-v1 in rl.envs_steps_pendulum_v1 (observation/action columns of "
            "other types than rl.envs_steps')") in output.splitlines()


def test_an_env_of_other_column_types_arriving_later_gets_its_own_steps_table(
    make_hooks, stream_config, tmp_path,
):
    run_cartpole(make_hooks, [19])
    catalog = f"sqlite:///{tmp_path / 'cat.db'}"
    first, output = _cli(stream_config, "--format", "iceberg", "--catalog", catalog,
                         "--table", "rl.later")
    assert first == 0, output
    pendulum = run_pendulum(make_hooks, [20])

    code, output = _cli(stream_config, "--format", "iceberg", "--catalog", catalog,
                        "--table", "rl.later")

    assert code == 0, output
    tables = _iceberg(catalog, tmp_path / "warehouse")
    assert tables["rl.later_episodes"].num_rows == 2
    assert set(tables["rl.later_steps"].column("env_id").to_pylist()) == {"CartPole-v1"}
    assert tables["rl.later_steps_pendulum_v1"].num_rows == pendulum.episodes[0].steps


def test_skipped_episodes_are_named_on_screen_with_what_keeps_them(
    make_hooks, stream_config, tmp_path,
):
    run_cartpole(make_hooks, [14, 15], wrapped=False)

    code, output = _cli(stream_config, "--out", str(tmp_path / "ds"), "--format", "minari",
                        "--dataset-id", "rlmesh/unwrapped-v0")

    assert code == 0, output
    assert ("skipped 2 episodes (no_terminal_observation): published without their terminal "
            "observation (Minari needs T+1): wrap the env with bridge.wrap(env) in the "
            "producer; --format parquet keeps them as they are") in output.splitlines()
