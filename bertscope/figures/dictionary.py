"""A sparse autoencoder's figures: how training went (running FVU, L0 and dead share per epoch) and how its features
fire (the spread of their densities, and one feature's activations).

Imported only when a figure is drawn (it imports matplotlib); plain arrays in, a `Figure` out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter

from bertscope.figures.layout import new_figure, titled

EPOCH_AXIS = "epoch"


def training_curves(
    epochs: Sequence[float],
    fvu: Sequence[float],
    l0: Sequence[float],
    dead: Sequence[float],
    *,
    k: int,
    held_out: tuple[float, float, float] | None = None,
    dead_after: int | None = None,
    title: str | None = None,
    note: str | None = None,
) -> Figure:
    """Three panels over the epochs: the running FVU, L0 and dead share on the training tokens (dead: silent for
    `dead_after` tokens); `held_out` (FVU, L0, and the share never firing on the held-out sentences after training)
    as a star at the last epoch of each; k as a dotted line."""
    figure = new_figure(6.4, 6.0)
    axes = figure.subplots(3, 1, sharex=True)
    x = np.asarray(epochs, dtype=float)
    silent = f"dead (training: silent {dead_after:,} tokens;\nheld out: never fired)" if dead_after else "dead share"
    panels = (("FVU", fvu), ("L0 (features firing a token)", l0), (silent, dead))
    for number, (ax, (label, values)) in enumerate(zip(axes, panels, strict=True)):
        ax.plot(x, np.asarray(values, dtype=float), marker="o", markersize=4, color="C0", linewidth=1.8, label="training (running)")
        if held_out is not None and len(x):
            star = {"marker": "*", "markersize": 13, "color": "C1", "markeredgecolor": "black", "linestyle": "none"}
            ax.plot([x[-1]], [held_out[number]], label="held out", **star)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3)
    axes[1].axhline(k, linestyle=":", color="grey", linewidth=1.2, label=f"k = {k}")
    axes[2].yaxis.set_major_formatter(PercentFormatter(1.0))
    axes[2].set_ylim(bottom=0)
    axes[0].legend(fontsize=8, frameon=False)
    axes[1].legend(fontsize=8, frameon=False)
    axes[-1].set_xlabel(EPOCH_AXIS)
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    titled(figure, title, note)
    return figure


def feature_activations(
    density: np.ndarray,
    bin_edges: np.ndarray,
    counts: np.ndarray,
    *,
    feature: int,
    label: str | None = None,
    title: str | None = None,
    note: str | None = None,
) -> Figure:
    """Two panels: how the features' densities spread (a histogram of log10 density over the features that fired,
    those that never did counted in the legend), and feature `feature`'s activations (`counts` per bin of
    `bin_edges`, log-spaced), its density marked on the first."""
    figure = new_figure(6.4, 6.0)
    spread, one = figure.subplots(2, 1)
    fired = density[density > 0]
    if len(fired):
        logs = np.log10(fired)
        spread.hist(logs, bins=min(40, max(len(fired) // 4, 5)), color="C0", label=f"{len(fired):,} features that fired")
        if density[feature] > 0:
            spread.axvline(np.log10(density[feature]), color="C1", linewidth=1.5, label=f"feature {feature}")
    spread.plot([], [], linestyle="none", label=f"{int((density == 0).sum()):,} never fired")
    spread.set_xlabel("density (log10 of the share of tokens a feature fires on)")
    spread.set_ylabel("features")
    spread.legend(fontsize=8, frameon=False)
    spread.grid(alpha=0.3)
    widths = np.diff(bin_edges)
    one.bar(bin_edges[:-1], counts, width=widths, align="edge", color="C1", edgecolor="white", linewidth=0.3)
    one.set_xscale("log")
    filled = np.flatnonzero(counts)
    if len(filled):  # the bins the feature's activations fall in, with one either side
        one.set_xlim(bin_edges[max(filled[0] - 1, 0)], bin_edges[min(filled[-1] + 2, len(bin_edges) - 1)])
    one.set_xlabel("activation")
    one.set_ylabel("tokens")
    named = f" · {label}" if label else ""
    one.set_title(f"feature {feature}: {int(counts.sum()):,} firings{named}", fontsize=9)
    one.grid(alpha=0.3)
    titled(figure, title, note)
    return figure
