"""The eval-vs-training plot: what it draws from the per-checkpoint aggregate."""

from __future__ import annotations

from pathlib import Path

from rlmesh_stream.consumers.analysis.plots import plot_checkpoints, reward_band

ROWS = [
    {"checkpoint": "c1", "step": 100, "metric": 0.9, "success_rate": 0.25,
     "mean_reward": 10.0, "std_reward": 2.0},
    {"checkpoint": "c2", "step": 200, "metric": 0.4, "success_rate": 0.75,
     "mean_reward": 30.0, "std_reward": None},  # one episode: no spread
]


def test_writes_a_png_and_an_svg_next_to_the_prefix(tmp_path: Path) -> None:
    paths = plot_checkpoints(ROWS, tmp_path / "out" / "plot", metric_name="loss")
    assert paths == [tmp_path / "out" / "plot.png", tmp_path / "out" / "plot.svg"]
    assert paths[0].read_bytes().startswith(b"\x89PNG")


def test_the_svg_labels_every_axis_and_names_each_checkpoint(tmp_path: Path) -> None:
    svg = plot_checkpoints(ROWS, tmp_path / "plot", metric_name="lr")[1].read_text()
    for text in ("training step", "success rate (%)", "mean episode reward", "lr", "c1", "c2"):
        assert f">{text}</text>" in svg, text


def test_an_env_without_success_says_so_and_draws_no_success_panel(tmp_path: Path) -> None:
    rows = [dict(r, success_rate=None) for r in ROWS]
    svg = plot_checkpoints(rows, tmp_path / "plot", metric_name="loss")[1].read_text()
    assert ">the env reported no success</text>" in svg
    assert ">success rate (%)</text>" not in svg
    assert 'id="axis-success"' not in svg
    assert 'id="axis-reward"' in svg


def test_the_reward_band_stays_within_the_rewards_observed() -> None:
    capped = {"mean_reward": 190.0, "std_reward": 20.0, "min_reward": 150.0,
              "max_reward": 200.0}
    lower, upper = reward_band([capped, ROWS[0]])
    assert (lower, upper) == ([170.0, 8.0], [200.0, 12.0])
