"""Eval-against-training plots: success rate and reward per checkpoint over training steps.

Two panels share the training-step axis: success rate on top, mean reward
(with a +/- one standard deviation band, clipped to the rewards observed: a
capped return such as CartPole's 200 is never shown exceeded) below. When the env
reported no success there is no success panel, only a note. The chosen training
metric (e.g. loss) is drawn on a second y axis in each panel, so a reader sees at
a glance whether evaluation improved where the training metric did.

Matplotlib runs on the non-interactive Agg backend: the CLI runs headless.
Every axes carries an SVG id (`gid`), so tests and scripts can find them in
the SVG output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

EVAL_COLOR = "#1f6feb"
REWARD_COLOR = "#2da44e"
METRIC_COLOR = "#8c959f"


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def plot_checkpoints(rows: Sequence[dict[str, Any]], out_prefix: Path, *,
                     metric_name: str | None, title: str = "Evaluation vs training"
                     ) -> list[Path]:
    """Write `<out_prefix>.png` and `<out_prefix>.svg`; returns both paths.

    `rows` are the per-checkpoint aggregates of `rlmesh_stream.consumers.analysis.join.aggregate`
    (checkpoint, step, metric, success_rate, mean_reward, std_reward, and the
    min_reward / max_reward the band is clipped to), ordered by step. Rows without
    a step cannot be placed on the axis and are skipped.
    """
    points = [r for r in rows if r.get("step") is not None]
    steps = [float(r["step"]) for r in points]
    success = [_num(r.get("success_rate")) * 100 for r in points]
    reward = [_num(r.get("mean_reward")) for r in points]
    metric = [_num(r.get("metric")) for r in points]

    has_success = any(not math.isnan(s) for s in success)
    panels: list[Axes]
    if has_success:
        fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6.5), dpi=110,
                                          constrained_layout=True)
        panels = [top, bottom]
        _success_panel(top, steps, success, points)
    else:
        fig, bottom = plt.subplots(1, 1, figsize=(9, 4), dpi=110, constrained_layout=True)
        panels = [bottom]
        bottom.set_title("the env reported no success", fontsize=9, color=METRIC_COLOR)
    fig.suptitle(title, fontsize=13, fontweight="bold")

    bottom.set_gid("axis-reward")
    lower, upper = reward_band(points)
    bottom.fill_between(steps, lower, upper, color=REWARD_COLOR, alpha=0.15, lw=0,
                        label="± 1 std (within the rewards seen)")
    bottom.plot(steps, reward, "s-", color=REWARD_COLOR, lw=2, label="mean reward")
    bottom.set_ylabel("mean episode reward", color=REWARD_COLOR)
    bottom.set_xlabel("training step")

    gids = {id(bottom): "axis-metric-reward"}
    if has_success:
        gids[id(panels[0])] = "axis-metric-success"
    for ax in panels:
        _metric_axis(ax, steps, metric, metric_name, gids[id(ax)])
        ax.grid(True, alpha=0.3)
        ax.spines["top"].set_visible(False)

    handles, labels = [], []
    for ax in (*panels, *panels[0].get_shared_x_axes().get_siblings(panels[0])):
        h, lab = ax.get_legend_handles_labels()
        for hh, ll in zip(h, lab, strict=True):
            if ll not in labels:
                handles.append(hh)
                labels.append(ll)
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=9,
               frameon=False)

    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = [out_prefix.with_suffix(".png"), out_prefix.with_suffix(".svg")]
    # SVG text stays <text> (searchable, selectable) rather than glyph outlines.
    with plt.rc_context({"svg.fonttype": "none"}):
        for path in paths:
            fig.savefig(path)
    plt.close(fig)
    return paths


def reward_band(points: Sequence[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Each checkpoint's mean reward +/- one standard deviation, clipped to the lowest and
    highest reward its episodes returned (when known): a return capped at 200 with a
    spread of 20 gives a band up to 200, not 220."""
    lower, upper = [], []
    for r in points:
        mean = _num(r.get("mean_reward"))
        spread = 0.0 if r.get("std_reward") is None else float(r["std_reward"])
        low, high = _num(r.get("min_reward")), _num(r.get("max_reward"))
        lower.append(mean - spread if math.isnan(low) else max(mean - spread, low))
        upper.append(mean + spread if math.isnan(high) else min(mean + spread, high))
    return lower, upper


def _success_panel(ax: Axes, steps: list[float], success: list[float],
                   points: list[dict[str, Any]]) -> None:
    ax.set_gid("axis-success")
    ax.plot(steps, success, "o-", color=EVAL_COLOR, lw=2, label="success rate")
    ax.set_ylabel("success rate (%)", color=EVAL_COLOR)
    ax.set_ylim(-5, 112)  # headroom for the checkpoint labels above 100%
    ax.set_yticks([0, 20, 40, 60, 80, 100])
    if len(points) <= 12:
        for x, y, r in zip(steps, success, points, strict=True):
            if not math.isnan(y):
                ax.annotate(str(r["checkpoint"]), (x, y), textcoords="offset points",
                            xytext=(0, 7), ha="center", fontsize=8, color="#57606a")


def _metric_axis(ax: Axes, steps: list[float], metric: list[float], name: str | None,
                 gid: str) -> None:
    """The training metric on a second y axis sharing the panel's x axis."""
    twin = ax.twinx()
    twin.set_gid(gid)
    label = name or "training metric"
    if name and any(not math.isnan(m) for m in metric):
        twin.plot(steps, metric, "--", color=METRIC_COLOR, lw=1.5, marker=".",
                  label=f"{label} (right axis)")
    twin.set_ylabel(label, color=METRIC_COLOR)
    twin.spines["top"].set_visible(False)
