"""Eval-against-training plots: success rate and reward per checkpoint over training steps.

Two panels share the training-step axis: success rate on top, mean reward
(with a +/- one standard deviation band) below. The chosen training metric
(e.g. loss) is drawn on a second y axis in both, so a reader sees at a glance
whether evaluation improved where the training metric did.

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
    (checkpoint, step, metric, success_rate, mean_reward, std_reward), ordered
    by step. Rows without a step cannot be placed on the axis and are skipped.
    """
    points = [r for r in rows if r.get("step") is not None]
    steps = [float(r["step"]) for r in points]
    success = [_num(r.get("success_rate")) * 100 for r in points]
    reward = [_num(r.get("mean_reward")) for r in points]
    spread = [0.0 if r.get("std_reward") is None else float(r["std_reward"]) for r in points]
    metric = [_num(r.get("metric")) for r in points]

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6.5), dpi=110,
                                      constrained_layout=True)
    fig.suptitle(title, fontsize=13, fontweight="bold")

    top.set_gid("axis-success")
    if any(not math.isnan(s) for s in success):
        top.plot(steps, success, "o-", color=EVAL_COLOR, lw=2, label="success rate")
    else:
        top.text(0.5, 0.5, "the env reported no success", transform=top.transAxes,
                 ha="center", va="center", color=METRIC_COLOR)
    top.set_ylabel("success rate (%)", color=EVAL_COLOR)
    top.set_ylim(-5, 112)  # headroom for the checkpoint labels above 100%
    top.set_yticks([0, 20, 40, 60, 80, 100])
    if len(points) <= 12:
        for x, y, r in zip(steps, success, points, strict=True):
            if not math.isnan(y):
                top.annotate(str(r["checkpoint"]), (x, y), textcoords="offset points",
                             xytext=(0, 7), ha="center", fontsize=8, color="#57606a")

    bottom.set_gid("axis-reward")
    lower = [m - s for m, s in zip(reward, spread, strict=True)]
    upper = [m + s for m, s in zip(reward, spread, strict=True)]
    bottom.fill_between(steps, lower, upper, color=REWARD_COLOR, alpha=0.15, lw=0,
                        label="± 1 std")
    bottom.plot(steps, reward, "s-", color=REWARD_COLOR, lw=2, label="mean reward")
    bottom.set_ylabel("mean episode reward", color=REWARD_COLOR)
    bottom.set_xlabel("training step")

    for ax, gid in ((top, "axis-metric-success"), (bottom, "axis-metric-reward")):
        _metric_axis(ax, steps, metric, metric_name, gid)
        ax.grid(True, alpha=0.3)
        ax.spines["top"].set_visible(False)

    handles, labels = [], []
    for ax in (top, bottom, *top.get_shared_x_axes().get_siblings(top)):
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
