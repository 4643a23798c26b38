"""A 2-D projection (PCA) as a scatter, one distinct colour and marker per label (van Aken et al. 2019).

Past MAX_LABELS labels the rarest are folded into one grey "other", drawn underneath, so
that every colour in the legend names one label.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from bertscope.figures.layout import new_figure, plain, titled

# Twelve colours told apart at a glance (after Sasha Trubetskoy's list of distinct colours), none of them grey
PALETTE = (
    "#e6194b",
    "#4363d8",
    "#3cb44b",
    "#f58231",
    "#911eb4",
    "#42d4f4",
    "#f032e6",
    "#9a6324",
    "#469990",
    "#800000",
    "#000075",
    "#808000",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*")  # a second cue, for print in grey and colour-blind readers
OTHER = "#b0b0b0"
MAX_LABELS = len(PALETTE)


def label_groups(labels: Sequence[str], limit: int = MAX_LABELS) -> list[tuple[str, np.ndarray]]:
    """(label, row indices) per label, most frequent first (ties by name); past `limit` labels the rest are "other"."""
    counts = Counter(labels)
    names = sorted(counts, key=lambda name: (-counts[name], name))
    shown = names if len(names) <= limit else names[:limit]
    array = np.asarray(labels, dtype=object)
    groups = [(name or "(none)", np.flatnonzero(array == name)) for name in shown]
    if len(shown) < len(names):
        groups.append(("other", np.flatnonzero(~np.isin(array, shown))))
    return groups


def pca_scatter(
    points: np.ndarray,
    labels: Sequence[str] | None = None,
    *,
    explained: Sequence[float] | None = None,
    title: str | None = None,
    legend_title: str | None = None,
    note: str | None = None,
) -> Figure:
    """Points `[n, 2]` on their first two principal components, coloured by `labels`.

    `explained`: the share of variance of PC1 and PC2, written on the axes ("PC1 (31.2% variance)").
    """
    points = np.asarray(points, dtype=float)
    if labels is not None and len(labels) != len(points):
        raise ValueError(f"{len(labels)} labels do not match {len(points)} points")
    figure = new_figure(6.8, 5.0)
    ax = figure.add_subplot()
    size = float(np.clip(5000 / max(len(points), 1), 5, 28))
    rasterized = len(points) > 1000  # thousands of dots as one image inside the SVG/PDF; the text stays text
    groups = label_groups(labels) if labels is not None else [("", np.arange(len(points)))]
    folded = len(groups) > MAX_LABELS  # the last group is the rarest labels, folded into "other"
    handles = {}
    for number in ([MAX_LABELS] if folded else []) + list(range(len(groups) - folded)):  # "other" first, beneath the rest
        name, rows = groups[number]
        other = folded and number == MAX_LABELS
        handles[number] = ax.scatter(
            points[rows, 0],
            points[rows, 1],
            s=size,
            c=OTHER if other else PALETTE[number],
            marker="o" if other else MARKERS[number],
            alpha=0.45 if other else 0.75,
            linewidths=0,
            label=plain(name),
            rasterized=rasterized,
        )
    pcs = [f"PC{i + 1}" if explained is None else f"PC{i + 1} ({100 * explained[i]:.1f}% variance)" for i in range(2)]
    ax.set_xlabel(pcs[0])
    ax.set_ylabel(pcs[1])
    if labels is not None:
        legend = figure.legend(
            handles=[handles[number] for number in sorted(handles)],  # most frequent first, "other" last
            loc="outside right upper",
            fontsize=8,
            frameon=False,
            markerscale=max(1.0, 30 / size) ** 0.5,
            title=plain(legend_title) if legend_title else None,
        )
        for handle in legend.legend_handles:
            if handle is not None:
                handle.set_alpha(1.0)
    titled(figure, title, note, ax)
    return figure
