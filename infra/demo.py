"""`rlmesh-stream demo`: the whole pipeline on real rollouts, in one command.

A newcomer should see it work before reading code. The demo:

1. finds the stack (or starts the local one, when the default address is idle);
2. creates a fresh set of topics under a demo prefix (so runs never mix);
3. evaluates four "checkpoints" of a CartPole policy with the rlmesh SDK
   (`rlmesh.run` on Gymnasium's CartPole-v1, a real native rollout loop), each
   run published by `KafkaRuntimeHooks` through the rlmesh bridge;
4. consumes every topic into a DuckDB store with all the builders;
5. prints the episode, advisory, delivery and telemetry reports, and writes
   the HTML advisory report;
6. joins the episodes with a training log and plots eval against training,
   and writes the eval curve back into the log's TensorBoard directory.

Honesty about step 6: nothing is trained here. The four checkpoints are
hand-written policies of increasing skill, and the demo writes a stand-in
training log (a TensorBoard event file, written with tensorboardX as a trainer
would: `train/loss`, made up, at each checkpoint's step and wall-clock time)
so the join has something to join. Everything else is real: the rollouts, the
events, Kafka, the registry, the consumers and the tables.
"""

from __future__ import annotations

import shutil
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from rlmesh_stream.schemas.connection.config import DEFAULT_BOOTSTRAP, StreamConfig

ENV_ID = "CartPole-v1"
MAX_STEPS = 200
CONCURRENT_SESSIONS = 2  # rlmesh sessions per checkpoint, run at the same time
SIM_ENV_ID = "sim/fleet-v1"
SIM_SESSIONS = 6
SIM_LANE_DRIVEN = 2  # plus this many lane-driven sessions over one shared endpoint
# The rollouts start only once the hook holds every schema id: a just-started registry can
# take seconds to answer, and CartPole publishes ~1 000 events a second meanwhile.
SCHEMA_WAIT_S = 60.0
"""An episode that balances the pole this long is a success (the env's time limit)."""


@dataclass(frozen=True)
class Checkpoint:
    name: str
    step: int
    loss: float  # stand-in training metric (see the module docstring)
    describe: str


CHECKPOINTS = (
    Checkpoint("ckpt-0000", 0, 0.69, "random actions"),
    Checkpoint("ckpt-1000", 1000, 0.52, "push toward the pole's lean"),
    Checkpoint("ckpt-2000", 2000, 0.31, "push toward the pole's angular velocity"),
    Checkpoint("ckpt-3000", 3000, 0.12, "lean and angular velocity combined"),
)


def _policy(name: str, seed: int) -> Callable[[Any], Any]:
    """The hand-written CartPole policy standing in for each checkpoint."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def act(obs: Any) -> Any:
        o = np.asarray(obs, dtype=np.float64)
        if name == "ckpt-0000":
            return np.asarray(int(rng.integers(2)))
        if name == "ckpt-1000":
            return np.asarray(int(o[2] > 0))
        if name == "ckpt-2000":
            return np.asarray(int(o[3] > 0))
        return np.asarray(int(3 * o[2] + o[3] > 0))

    return act


def _make_env() -> Any:
    """CartPole with the task outcome in its final info, as rlmesh reads it (`is_success`)."""
    import gymnasium as gym

    class SuccessInfo(gym.Wrapper):  # type: ignore[misc]
        def step(self, action: Any) -> Any:
            obs, reward, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                info = {**info, "is_success": bool(truncated and not terminated)}
            return obs, reward, terminated, truncated, info

    return SuccessInfo(gym.make(ENV_ID, max_episode_steps=MAX_STEPS))


# --------------------------------------------------------------------------- steps


def _reachable(bootstrap: str, timeout: float = 2.0) -> bool:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _ensure_stack(config: StreamConfig, start: bool, say: Callable[[str], None]
                  ) -> StreamConfig:
    if _reachable(config.bootstrap):
        return config
    if not start or config.bootstrap != DEFAULT_BOOTSTRAP:
        raise click.ClickException(
            f"no Kafka at {config.bootstrap}. Start the local stack with "
            "`rlmesh-stream infra up`, or point --bootstrap/--registry-url at yours.")
    from rlmesh_stream.infra.stack import LocalStack

    say("no stack running: starting the local one (stop it with `rlmesh-stream infra down`)")
    stack = LocalStack()
    stack.up(log=say)
    return StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                 registry_url=stack.registry_url,
                                 topic_prefix=config.topic_prefix)


def _register_schemas(config: StreamConfig) -> Any:
    """Register every event type's schema before anything is published; the registrar,
    ids cached, is the hook's (it registers nothing again)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from rlmesh_stream.schemas.contract.errors import RegistryUnavailableError
    from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar

    registrar = SchemaRegistrar(SchemaRegistryClient(config.registry_config()),
                                topic_prefix=config.topic_prefix)
    try:
        registrar.register_all()
    except RegistryUnavailableError as exc:
        raise click.ClickException(str(exc)) from exc
    return registrar


def _rollouts(config: StreamConfig, registrar: Any, episodes: int, manifest_path: Path,
              spool_dir: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Evaluate each checkpoint with the rlmesh SDK, then add a simulated fleet.

    Everything goes through one `KafkaRuntimeHooks`. The simulated fleet brings
    what real CartPole runs never show (relay advisories, failed sessions, vector
    lanes, NEXT_STEP autoresets); its manifest is written to `manifest_path`.
    Returns the stand-in training log: one row per checkpoint, timed at the
    moment its evaluation began (so an as-of join lands on the same rows).
    """
    import datetime as dt

    import rlmesh
    import rlmesh.numpy as rn

    # Submodules, not the package: a `tests/producer` directory on sys.path (pytest)
    # would otherwise shadow the package `__init__` with a namespace package.
    from rlmesh_stream.producer.bridge import rlmesh_bridge
    from rlmesh_stream.producer.hooks import KafkaRuntimeHooks

    log_rows: list[dict[str, Any]] = []
    # A spool, as a fleet machine would have: a Kafka or registry hiccup spills to disk,
    # never drops an event.
    hooks = KafkaRuntimeHooks(config=config, registrar=registrar, spool_dir=spool_dir,
                              startup_wait_s=SCHEMA_WAIT_S)
    if not hooks.schemas_ready:
        hooks.close(1.0)
        raise click.ClickException(
            f"the schema registry at {config.registry_url} gave no schema ids within "
            f"{SCHEMA_WAIT_S:.0f} s; see `rlmesh-stream infra logs`")
    try:
        for i, ck in enumerate(CHECKPOINTS):
            log_rows.append({"step": ck.step, "time": dt.datetime.now(dt.UTC).isoformat(),
                             "checkpoint": ck.name, "loss": ck.loss})

            def session(j: int, ck: Checkpoint = ck, i: int = i) -> list[int]:
                bridge = rlmesh_bridge(hooks, env_id=ENV_ID, model_component_id=ck.name,
                                       env_component_id="gymnasium-cartpole")
                seeds = list(range(j * episodes, (j + 1) * episodes))
                result = rlmesh.run(rn.Model(_policy(ck.name, seed=10 * i + j)),
                                    bridge.wrap(_make_env()),
                                    episodes=episodes, seeds=seeds, hooks=bridge)
                return [e.steps for e in result.episodes]

            # Concurrent sessions share the one hooks instance, as a fleet process does.
            with ThreadPoolExecutor(CONCURRENT_SESSIONS) as pool:
                steps = list(pool.map(session, range(CONCURRENT_SESSIONS)))
            say(f"  {ck.name} ({ck.describe}): {CONCURRENT_SESSIONS} concurrent sessions, "
                f"steps per episode {steps}")
        _simulated_fleet(hooks, manifest_path, say)
    finally:
        stats = hooks.close()
    if stats.failed or stats.dropped:
        raise click.ClickException(f"the producer lost events: {stats}")
    say(f"  published {stats.delivered} events ({stats.delivered_bytes:,} bytes), "
        f"producer {stats.producer_id[:8]}")
    return log_rows


def _simulated_fleet(hooks: Any, manifest_path: Path, say: Callable[[str], None]) -> None:
    from rlmesh_stream.producer.simulator import simulate_fleet

    manifest = simulate_fleet(hooks, sessions=SIM_SESSIONS, lanes=2, episodes=3, seed=7,
                              env_id=SIM_ENV_ID, lane_driven=SIM_LANE_DRIVEN)
    manifest_path.write_text(manifest.to_json(), encoding="utf-8")
    failed = sum(s.status == "failed" for s in manifest.sessions)
    advisories = sum(len(s.advisories) for s in manifest.sessions)
    say(f"  simulated fleet ({SIM_ENV_ID}): {SIM_SESSIONS} sessions of 2 lanes and "
        f"{SIM_LANE_DRIVEN} lane-driven ones, "
        f"{len(manifest.episodes)} episodes, {failed} failed sessions, "
        f"{advisories} relay advisories (manifest: {manifest_path})")


def _consume(config: StreamConfig, sink_url: str, say: Callable[[str], None]) -> None:
    from rlmesh_stream.consumers.builders import make_builders
    from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
    from rlmesh_stream.consumers.sinks import open_sink

    sink = open_sink(sink_url)
    try:
        ConsumerRuntime(
            config, make_builders(["all"]), sink,
            RuntimeOptions(group_id=f"rlmesh-stream-demo-{uuid.uuid4().hex[:8]}",
                           from_beginning=True, until_end=True),
        ).run()
    finally:
        sink.close()


def _export_dataset(config: StreamConfig, out: Path, say: Callable[[str], None]) -> None:
    """The CartPole rollouts as a Minari dataset (`export trajectories --format minari`)."""
    try:
        from rlmesh_stream.consumers.datasets.episodes import Filters
        from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
    except ModuleNotFoundError as exc:
        say(f"  (no dataset: {exc.name} is missing; pip install 'rlmesh-stream[datasets]')")
        return
    from rlmesh_stream.consumers.runtime import RuntimeOptions

    dataset_id = "rlmesh/cartpole-demo-v0"
    root = (out / "datasets").resolve()
    shutil.rmtree(root, ignore_errors=True)  # each demo run is its own, like its store
    sink, _ = run_export(
        config, ExportOptions(root, "minari", dataset_id, Filters(env_ids=(ENV_ID,))),
        RuntimeOptions(group_id=f"rlmesh-stream-demo-export-{uuid.uuid4().hex[:8]}",
                       from_beginning=True, until_end=True))
    cert = sink.store.committed.certificate
    say(f"  Minari dataset {dataset_id}: {cert['episodes_exported']} episodes, "
        f"{cert['steps_exported']} steps (certificate: {cert['gaps']} gaps, "
        f"{cert['duplicates']} duplicates) under {root}")
    say(f"  load it: MINARI_DATASETS_PATH={root} python -c \"import minari; "
        f"print(minari.load_dataset('{dataset_id}'))\"")


def _reports(sink_url: str, out: Path, say: Callable[[str], None]) -> None:
    from rlmesh_stream.consumers.analysis.reports import (
        advisory_report,
        delivery_report,
        episode_report,
        open_store,
        render,
        telemetry_report,
    )

    with open_store(sink_url) as store:
        for report in (episode_report(store), advisory_report(store), delivery_report(store),
                       telemetry_report(store, ops=("model.predict", "env.step"),
                                        metrics=("rpc.total",))):
            say(render(report, "table"))
        html = out / "advisories.html"
        html.write_text(render(advisory_report(store), "html"), encoding="utf-8")
    say(f"  advisory report (HTML): {html}")


TB_RUN = "ppo_demo"
"""The stand-in training run's directory under `<out>/tensorboard`; its eval curve is
written next to it, in `ppo_demo_eval`."""


def _write_training_log(log_rows: list[dict[str, Any]], logdir: Path) -> Path:
    """The stand-in training log as a TensorBoard run, written by tensorboardX."""
    import datetime as dt
    import shutil

    from tensorboardX import SummaryWriter

    shutil.rmtree(logdir, ignore_errors=True)
    writer = SummaryWriter(logdir=str(logdir / TB_RUN))
    try:
        for row in log_rows:
            wall = dt.datetime.fromisoformat(row["time"]).timestamp()
            writer.add_scalar("train/loss", row["loss"], row["step"], walltime=wall)
    finally:
        writer.close()
    return logdir / TB_RUN


def _join(sink_url: str, log_path: Path, out: Path, say: Callable[[str], None]) -> None:
    from rlmesh_stream.consumers.analysis.join import (
        JoinSpec,
        LogColumns,
        aggregate,
        connect,
        run_join,
    )
    from rlmesh_stream.consumers.analysis.join_cli import checkpoint_report
    from rlmesh_stream.consumers.analysis.plots import plot_checkpoints
    from rlmesh_stream.consumers.analysis.reports import render
    from rlmesh_stream.consumers.analysis.training_logs import writeback

    spec = JoinSpec("key", log_path, LogColumns(metric="train/loss"),
                    checkpoint_step=r"ckpt-(\d+)")
    con = connect(sink_url)
    try:
        result = run_join(con, spec)
        rows = aggregate(con, spec, result)
    finally:
        con.close()
    say(f"  {result.summary()}")
    say(render(checkpoint_report(rows, spec, result), "table"))
    paths = plot_checkpoints(rows, out / "eval_vs_training", metric_name="train/loss",
                             title="CartPole-v1: evaluation vs training (demo)")
    say("  plot: " + ", ".join(str(p) for p in paths))
    eval_dir = log_path.parent / f"{TB_RUN}_eval"
    written = writeback.write_tensorboard(writeback.eval_points(rows), eval_dir)
    curve = writeback.read_tensorboard_eval(eval_dir)["eval/success_rate"]  # read back
    say(f"  eval curve written back ({written.points} points) to {eval_dir}: success rate "
        + ", ".join(f"{v:.0%} at step {step}" for step, v in curve))
    say(f"  see it next to the training loss: tensorboard --logdir {log_path.parent}")
    say("  while a run trains, `rlmesh-stream join --follow` writes each checkpoint's point as "
        "its evaluation completes (docs/training-logs.md)")


# --------------------------------------------------------------------------- the run

OUT_MARKER = ".rlmesh-demo"
"""The file that marks a folder as the demo's: a run replaces what an earlier one wrote
there (its store, its TensorBoard runs), so it writes only into a folder that is new,
empty or marked."""


def claim_out_dir(out_dir: Path) -> None:
    """Make `out_dir` the demo's, or refuse one holding files it did not write (the demo
    removes its earlier store and TensorBoard runs, which in a user's folder are theirs)."""
    if out_dir.is_dir() and not (out_dir / OUT_MARKER).exists() and any(out_dir.iterdir()):
        raise click.ClickException(f"--out {out_dir} holds files the demo did not write: "
                                   "name a new or empty folder (a demo run replaces what "
                                   "an earlier one wrote there)")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / OUT_MARKER).touch()
    except OSError as exc:
        raise click.ClickException(f"cannot write to --out {out_dir}: "
                                   f"{exc.strerror or exc}") from None


def run_demo(config: StreamConfig, episodes: int, out_dir: Path, start_stack: bool,
             say: Callable[[str], None]) -> None:
    """The demo's five steps (the module docstring), reported through `say`."""
    started = time.monotonic()
    claim_out_dir(out_dir)
    config = _ensure_stack(config, start_stack, say)
    prefix = f"demo-{uuid.uuid4().hex[:8]}.rlmesh.runtime"
    config = config.with_prefix(prefix)

    from rlmesh_stream.infra.topics import ensure_topics

    say(f"1/5 topics and schemas under {prefix} at {config.bootstrap}")
    ensure_topics(config, partitions=2, replication_factor=1)
    registrar = _register_schemas(config)

    say(f"2/5 rollouts: {len(CHECKPOINTS)} checkpoints x {CONCURRENT_SESSIONS} sessions x "
        f"{episodes} episodes of {ENV_ID} with rlmesh, published by KafkaRuntimeHooks")
    log_rows = _rollouts(config, registrar, episodes, out_dir / "simulated_fleet.json",
                         out_dir / "spool", say)
    log_path = _write_training_log(log_rows, out_dir / "tensorboard")

    store = (out_dir / "demo.duckdb").resolve()
    store.unlink(missing_ok=True)
    sink_url = f"duckdb://{store}"
    say(f"3/5 consuming every topic into {sink_url}")
    _consume(config, sink_url, say)
    _export_dataset(config, out_dir, say)

    say("4/5 reports")
    _reports(sink_url, out_dir, say)

    say(f"5/5 join with the TensorBoard training log {log_path} (a stand-in: the demo trains "
        "nothing) and write the eval curve back next to it")
    _join(sink_url, log_path, out_dir, say)

    say(f"done in {time.monotonic() - started:.1f} s. Next: "
        f"`rlmesh-stream tail episode_completed --topic-prefix {prefix} --from-beginning "
        f"--bootstrap {config.bootstrap} --registry-url {config.registry_url}`")
