"""Lines over layers or over pruning: probing curves with their baselines, a pruning curve, a value per layer.

Layers are hidden states (0 = the embeddings, l+1 the output of layer l), as probing and
geometry report them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter

from bertscope.figures.layout import new_figure, plain, titled

Values = Sequence[float] | np.ndarray  # one number per layer or per point
LAYER_AXIS = "layer (0 = embeddings)"
# Baselines are dashed, each kind in its own dash pattern, in the colour of their task
DASHES = {"majority": (0, (5, 3)), "random_init": (0, (1.5, 1.5)), "control": (0, (6, 2, 1.5, 2))}
BASELINE_NAMES = {"majority": "majority class", "random_init": "random-init model", "control": "control task"}


@dataclass(frozen=True)
class ProbeCurve:
    """One task's score per hidden-state layer, its best layer and its baselines.

    A baseline is a number (the majority class: one line across) or one per layer (the same
    probe on a randomly initialised model, or on a control task).
    """

    task: str
    values: Values
    best: int | None = None
    baselines: Mapping[str, float | Values] = field(default_factory=dict)


COMPRESSION = "compression (uniform / online bits)"  # the description length's axis (Voita & Titov 2020)


def probe_curves(
    curves: Sequence[ProbeCurve],
    metric: str,
    *,
    title: str | None = None,
    note: str | None = None,
    compression: Sequence[ProbeCurve] | None = None,
) -> Figure:
    """One line per task (`metric` against the layer), its baselines dashed, its best layer starred.

    `compression`: the same tasks' compression per layer (uniform over online codelength) in a second panel under
    the first, on the same layers, so that a figure of a run with description lengths shows the score beside them.
    """
    if not curves:
        raise ValueError("no probing curve to draw")
    if compression is None:
        figure = new_figure(6.4, 3.8)
        ax = figure.add_subplot()
        _probe_panel(ax, curves, metric)
        figure.legend(loc="outside right upper", fontsize=8, frameon=False)
        titled(figure, title, note, ax)
        return figure
    figure = new_figure(6.8, 6.2)
    top, bottom = figure.subplots(2, 1, sharex=True)
    for ax, panel, label in ((top, curves, metric), (bottom, compression, COMPRESSION)):
        _probe_panel(ax, panel, label)
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    top.set_xlabel("")
    titled(figure, title, note, top)
    return figure


def _probe_panel(ax: Axes, curves: Sequence[ProbeCurve], metric: str) -> None:
    """`curves` on `ax`: a line per task in its colour, its baselines dashed in the same colour, its best layer starred."""
    many = len(curves) > 1
    starred = False
    for number, curve in enumerate(curves):
        colour = f"C{number % 10}"
        values = np.asarray(curve.values, dtype=float)
        layers = np.arange(len(values))
        ax.plot(layers, values, marker="o", markersize=4, color=colour, linewidth=1.8, label=plain(curve.task))
        for name, baseline in curve.baselines.items():
            shown = BASELINE_NAMES.get(name, name.replace("_", " "))
            ys = np.asarray(baseline, dtype=float)
            ys = np.full(len(values), float(ys)) if ys.ndim == 0 else ys  # one number: a line across
            label = f"{curve.task}: {shown}" if many else shown
            ax.plot(np.arange(len(ys)), ys, linestyle=DASHES.get(name, "--"), color=colour, linewidth=1.2, alpha=0.8, label=plain(label))
        if curve.best is not None and 0 <= curve.best < len(values):
            ax.plot(
                [curve.best],
                [values[curve.best]],
                marker="*",
                markersize=14,
                color=colour,
                markeredgecolor="black",
                linestyle="none",
                label=None if starred else "best layer",
                zorder=5,
            )
            starred = True
    _integer_layers(ax)
    ax.set_xlabel(LAYER_AXIS)
    ax.set_ylabel(plain(metric.replace("_", " ")))
    ax.grid(alpha=0.3)


def pruning_curve(
    fractions: Values,
    values: Values,
    *,
    metric: str,
    prunable: int,
    max_drop: float,
    heads: Sequence[int] | None = None,
    title: str | None = "pruning curve",
    note: str | None = None,
) -> Figure:
    """`metric` against the share of heads pruned (least important first), the largest drop allowed as a dashed line,
    and the prunable point (the last before the metric falls further) starred."""
    x, y = np.asarray(fractions, dtype=float), np.asarray(values, dtype=float)
    figure = new_figure(6.0, 3.8)
    ax = figure.add_subplot()
    ax.plot(x, y, marker="o", markersize=4, color="C0", linewidth=1.8, label=plain(metric.replace("_", " ")))
    threshold = y[0] - max_drop
    ax.axhline(threshold, linestyle="--", color="#d62728", linewidth=1.0, label=f"largest drop allowed ({max_drop:g})")
    count = f", {heads[prunable]} heads" if heads is not None else ""
    ax.plot(
        [x[prunable]],
        [y[prunable]],
        marker="*",
        markersize=15,
        color="C1",
        markeredgecolor="black",
        linestyle="none",
        label=f"prunable: {x[prunable]:.0%}{count}",
        zorder=5,
    )
    ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_xlabel("heads pruned (share of all heads, least important first)")
    ax.set_ylabel(plain(metric.replace("_", " ")))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    titled(figure, title, note, ax)
    return figure


def layer_curve(
    values: Values,
    label: str,
    *,
    title: str | None = None,
    note: str | None = None,
    xlabel: str = LAYER_AXIS,
) -> Figure:
    """One value per layer (the intrinsic dimension, say) as a line with a marker per layer."""
    y = np.asarray(values, dtype=float)
    figure = new_figure(5.2, 3.4)
    ax = figure.add_subplot()
    ax.plot(np.arange(len(y)), y, marker="o", markersize=5, color="C0", linewidth=1.8)
    _integer_layers(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(plain(label))
    ax.grid(alpha=0.3)
    titled(figure, title, note, ax)
    return figure


def _integer_layers(ax: Axes) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
