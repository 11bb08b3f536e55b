"""A producer's env spec is data, never code: the Minari export takes it only when the
local Gymnasium registry would make it, drops it otherwise (the episode kept, counted),
and skips only the episode of a spec that is not a spec at all."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import rlmesh
from click.testing import CliRunner
from rlmesh.numpy import Model

from rlmesh_stream.infra.cli import main
from rlmesh_stream.producer.bridge import rlmesh_bridge

pytestmark = pytest.mark.stack

_CARTPOLE = json.loads(gym.make("CartPole-v1").spec.to_json())


class _Published:
    """An env spec as a hostile or broken producer publishes it: any text at all (the
    bridge sends `spec.to_json()` of what it is given)."""

    additional_wrappers = ()

    def __init__(self, text: str) -> None:
        self.text = text

    def to_json(self) -> str:
        return self.text


def _spec(**changes: Any) -> str:
    return json.dumps({**_CARTPOLE, **changes})


def _run(make_hooks, seed: int, spec: str | None = None, env_id: str = "CartPole-v1") -> None:
    hooks = make_hooks()
    bridge = rlmesh_bridge(hooks, env_id=env_id, model_component_id="m",
                           env_spec=_Published(spec) if spec is not None else None)
    env = gym.make("CartPole-v1")
    rlmesh.run(Model(lambda obs: np.int64(obs[2] > 0)), bridge.wrap(env), seeds=[seed],
               hooks=bridge)
    hooks.flush(15)


def _load(out: Path, dataset_id: str):
    import minari

    os.environ["MINARI_DATASETS_PATH"] = str(out)
    return minari.load_dataset(dataset_id)


@pytest.mark.parametrize("hostile", [
    {"entry_point": "os:system"},
    {"additional_wrappers": [{"name": "W", "entry_point": "os:system", "kwargs": {}}]},
], ids=["entry_point", "wrapper"])
def test_a_spec_that_would_run_code_is_dropped_and_the_dataset_still_loads(
    make_hooks, export, tmp_path, hostile,
):
    marker = tmp_path / "PWNED"
    command = {"command": f"touch {marker}"}
    if "entry_point" in hostile:
        spec = _spec(entry_point=hostile["entry_point"], kwargs=command)
    else:
        spec = _spec(additional_wrappers=[{**hostile["additional_wrappers"][0],
                                           "kwargs": command}])
    _run(make_hooks, 1, spec)

    sink = export(tmp_path / "ds", "minari", "rlmesh/hostile-v0")
    dataset = _load(tmp_path / "ds", "rlmesh/hostile-v0")
    env = dataset.recover_environment()

    assert not marker.exists()
    assert dataset.total_episodes == 1
    assert env.spec.entry_point == gym.spec("CartPole-v1").entry_point
    cert = sink.store.committed.certificate
    assert (cert["env_spec"], cert["env_specs_dropped"], cert["episodes_skipped"]) == (
        "registry default", {"env_spec:untrusted": 1}, {})


def test_a_spec_of_another_env_than_the_episodes_is_dropped(make_hooks, export, tmp_path):
    _run(make_hooks, 2, _spec(id="Acrobot-v1",
                              entry_point=gym.spec("Acrobot-v1").entry_point))

    sink = export(tmp_path / "ds", "minari", "rlmesh/otherid-v0")

    assert sink.store.committed.certificate["env_specs_dropped"] == {"env_spec:untrusted": 1}
    assert _load(tmp_path / "ds", "rlmesh/otherid-v0").env_spec.id == "CartPole-v1"


def test_a_kwarg_the_registered_env_does_not_take_drops_the_spec(make_hooks, export, tmp_path):
    _run(make_hooks, 3, _spec(kwargs={"command": "id"}))

    sink = export(tmp_path / "ds", "minari", "rlmesh/kwarg-v0")

    assert sink.store.committed.certificate["env_specs_dropped"] == {"env_spec:untrusted": 1}
    assert _load(tmp_path / "ds", "rlmesh/kwarg-v0").env_spec.kwargs == {}


def test_a_spec_the_registry_would_make_is_taken_with_gymnasiums_own_wrappers(
    make_hooks, export, tmp_path,
):
    from gymnasium.wrappers import TimeAwareObservation

    wrapped = TimeAwareObservation(gym.make("CartPole-v1", max_episode_steps=120,
                                            sutton_barto_reward=True))
    _run(make_hooks, 4, wrapped.spec.to_json())

    sink = export(tmp_path / "ds", "minari", "rlmesh/taken-v0")

    cert = sink.store.committed.certificate
    assert (cert["env_spec"], cert["env_specs_dropped"]) == ("producer", {})
    spec = _load(tmp_path / "ds", "rlmesh/taken-v0").env_spec
    assert (spec.max_episode_steps, spec.kwargs, [w.name for w in spec.additional_wrappers]) \
        == (120, {"sutton_barto_reward": True}, ["TimeAwareObservation"])


def test_trust_env_spec_takes_a_producers_spec_as_it_is(make_hooks, export, tmp_path):
    acrobot = gym.spec("Acrobot-v1").entry_point  # harmless, and not CartPole-v1's
    _run(make_hooks, 5, _spec(entry_point=acrobot))

    sink = export(tmp_path / "ds", "minari", "rlmesh/trusted-v0", trust_env_spec=True)

    assert sink.store.committed.certificate["env_spec"] == "producer"
    assert _load(tmp_path / "ds", "rlmesh/trusted-v0").env_spec.entry_point == acrobot


@pytest.mark.parametrize("broken", [
    "{not json",
    '{"id": "CartPole-v1"}',
    _spec(id="not an id!!"),
    _spec(max_episode_steps="forever"),
], ids=["not_json", "keys_missing", "bad_id", "wrong_type"])
def test_a_malformed_spec_skips_only_its_own_episode_counted(
    make_hooks, export, tmp_path, broken,
):
    _run(make_hooks, 6, broken)
    _run(make_hooks, 7, _spec(max_episode_steps=300))

    sink = export(tmp_path / "ds", "minari", "rlmesh/malformed-v0")

    cert = sink.store.committed.certificate
    assert (cert["episodes_exported"], cert["episodes_skipped"]) == (
        1, {"env_spec:malformed": 1})
    assert _load(tmp_path / "ds", "rlmesh/malformed-v0").env_spec.max_episode_steps == 300


def test_an_env_id_naming_a_module_imports_nothing(make_hooks, export, tmp_path):
    # gym.spec("this:X-v0") imports `this` (it prints the Zen of Python): a module name
    # the producer chose
    sys.modules.pop("this", None)
    _run(make_hooks, 8, env_id="this:CartPole-v1")

    sink = export(tmp_path / "ds", "minari", "rlmesh/modname-v0")

    assert "this" not in sys.modules
    assert sink.store.committed.certificate["env_spec"] == "none"


def test_the_cli_says_on_screen_that_a_spec_was_dropped(make_hooks, stream_config, tmp_path):
    _run(make_hooks, 9, _spec(entry_point="os:system", kwargs={"command": "true"}))
    out = tmp_path / "ds"

    run = CliRunner().invoke(main, [
        "export", "trajectories", "--bootstrap", stream_config.bootstrap,
        "--registry-url", stream_config.registry_url, "--topic-prefix",
        stream_config.topic_prefix, "--out", str(out), "--format", "minari",
        "--dataset-id", "rlmesh/screen-v0", "--from-beginning", "--until-end", "--quiet"])

    assert run.exit_code == 0, run.output
    summary = json.loads(run.stdout.splitlines()[0])
    assert summary["env_specs_dropped"] == {"env_spec:untrusted": 1}
    assert "warning: 1 episode(s) kept without their producer's env spec " \
           "(env_spec:untrusted)" in run.stderr
    assert "entry point 'os:system' is not CartPole-v1's" in run.stderr
