"""Geometry and model comparison as Rich renderables, shared by the CLI and the UI.

The PCA scatter is drawn by plotext (braille dots, one colour and marker per label) and
handed over as Rich Text; the CKA matrices use the attention heatmap renderer.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from rich.bar import Bar
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from bertscope.base.theming import Colormap
from bertscope.render.heatmap import AttentionHeatmap, Cells, Labels, Scale

if TYPE_CHECKING:
    from bertscope.analyses.geometry.results import ComparisonResult, GeometryResult

MAX_CLASSES = 7  # labels drawn in their own colour; the rest are "other"
COLOURS = ("red", "blue", "green", "orange", "magenta", "cyan", "yellow", "gray")
MARKERS = ("•", "+", "x", "o", "*", "#", "%", "·")
_PLOTEXT = threading.Lock()  # plotext keeps one global figure


def label_groups(labels: Sequence[str] | None, limit: int = MAX_CLASSES) -> list[tuple[str, np.ndarray]]:
    """(name, row indices) per label, most frequent first; beyond `limit` labels the rest are `other`."""
    if not labels:
        return []
    counts = Counter(labels)
    names = [name for name, _ in counts.most_common()]
    shown = names if len(names) <= limit + 1 else names[:limit]
    array = np.asarray(labels)
    groups = [(name or "(none)", np.flatnonzero(array == name)) for name in shown]
    if len(shown) < len(names):
        groups.append(("other", np.flatnonzero(~np.isin(array, shown))))
    return groups


def scatter(
    points: np.ndarray,
    labels: Sequence[str] | None,
    *,
    width: int,
    height: int,
    title: str = "",
    glyphs: bool = False,
) -> Text:
    """A terminal scatter of `[n, 2]` points, coloured (or, with `glyphs`, marked) by label."""
    import plotext

    width, height = max(width, 20), max(height, 8)
    groups = label_groups(labels) or [("", np.arange(len(points)))]
    with _PLOTEXT:
        plotext.clf()
        plotext.plotsize(width, height)
        plotext.theme("clear")
        for number, (name, rows) in enumerate(groups):
            if not len(rows):
                continue
            x, y = points[rows, 0].tolist(), points[rows, 1].tolist()
            marker = MARKERS[number % len(MARKERS)] if glyphs else "braille"
            color = None if glyphs else COLOURS[number % len(COLOURS)]
            plotext.scatter(x, y, label=name or None, marker=marker, color=color)
        if title:
            plotext.title(title)
        drawn = plotext.build()
    return Text.from_ansi(drawn, no_wrap=True)


def layer_summary(result: GeometryResult, title: str = "per layer (0 = embeddings)") -> Table:
    """One row per hidden-state layer: TwoNN dimension, overlap with the next layer, PCA variance, CKA with the previous."""
    table = Table(title=title, title_justify="left", box=None, padding=(0, 1))
    table.add_column("layer", justify="right", style="dim")
    table.add_column("TwoNN ID", justify="right")
    table.add_column("", width=12, no_wrap=True)
    table.add_column("overlap→next", justify="right")
    table.add_column("CKA←prev", justify="right")
    table.add_column("PC1+PC2", justify="right")
    highest = float(np.nanmax(result.intrinsic_dimension)) if np.isfinite(result.intrinsic_dimension).any() else 1.0
    for layer in range(result.num_layers):
        dimension = float(result.intrinsic_dimension[layer])
        overlap = f"{result.neighbourhood_overlap[layer]:.2f}" if layer < result.num_layers - 1 else ""
        previous = f"{result.cka[layer, layer - 1]:.3f}" if layer else ""
        table.add_row(
            str(layer),
            f"{dimension:.1f}",
            Bar(highest or 1.0, 0, dimension if np.isfinite(dimension) else 0, width=12, color="magenta"),
            overlap,
            previous,
            f"{result.explained[layer].sum():.1%}",
        )
    return table


def cka_heatmap(
    matrix: np.ndarray, colormap: Colormap, *, title: str, rows: str = "", cols: str = "", glyphs: bool | None = None
) -> AttentionHeatmap:
    """A CKA matrix on a 0-1 scale with layer numbers on both axes."""
    row_labels = [f"{rows}{i}" for i in range(matrix.shape[0])]
    col_labels = [f"{cols}{j}" for j in range(matrix.shape[1])]
    return AttentionHeatmap(
        np.nan_to_num(matrix),
        row_labels,
        col_labels,
        colormap,
        title=title,
        cells=Cells(glyphs=glyphs),
        labels=Labels(max(3, len(row_labels[-1]) + 1)),
    )


def geometry_report(
    result: GeometryResult,
    colormap: Colormap,
    *,
    layer: int,
    scatter_width: int = 72,
    scatter_height: int = 20,
    label: str | None = None,
    glyphs: bool = False,
) -> Group:
    """What `bertscope geometry` prints: the per-layer table, the CKA heatmap and one layer's scatter."""
    label = label if label is not None else next(iter(result.labels), None)
    explained = result.explained[layer]
    title = f"layer {layer}: PCA of {result.size:,} {result.unit}s (PC1 {explained[0]:.1%}, PC2 {explained[1]:.1%})"
    if label:
        title += f", by {label}"
    parts: list[RenderableType] = [
        layer_summary(result),
        Text(),
        cka_heatmap(result.cka, colormap, title="linear CKA, layer × layer", glyphs=glyphs),
        Text(),
        scatter(
            result.projection[layer],
            result.labels.get(label) if label else None,
            width=scatter_width,
            height=scatter_height,
            title=title,
            glyphs=glyphs,
        ),
    ]
    return Group(*parts)


def cosine_grid(cosine: np.ndarray, colormap: Colormap, glyphs: bool | None = None) -> AttentionHeatmap:
    """Heads (columns) by layers (rows) shaded by the cosine of their attention maps in A and B."""
    rows = [str(layer) for layer in range(cosine.shape[0])]
    cols = [str(head) for head in range(cosine.shape[1])]
    low = min(float(np.floor(np.nanmin(cosine) * 10) / 10), 0.9)  # a scale that shows differences near 1
    return AttentionHeatmap(
        cosine,
        rows,
        cols,
        colormap,
        title="attention cosine A·B per head (layer ↓, head →)",
        scale=Scale(vmin=max(low, 0.0), vmax=1.0),
        cells=Cells(glyphs=glyphs),
        labels=Labels(3),
    )


def comparison_report(result: ComparisonResult, colormap: Colormap, glyphs: bool | None = None, lowest: int = 8) -> Group:
    """What `bertscope compare` prints."""
    parts: list[RenderableType] = []
    if result.head_cosine is not None and result.head_cosine_std is not None:  # both, or neither (shapes differ)
        parts += [cosine_grid(result.head_cosine, colormap, glyphs), Text()]
        table = Table(title="most changed heads", title_justify="left", box=None, padding=(0, 1))
        for name in ("head", "cosine", "± sd"):
            table.add_column(name, justify="right")
        order = np.argsort(result.head_cosine, axis=None)[:lowest]
        for flat in order:
            layer, head = np.unravel_index(flat, result.head_cosine.shape)
            table.add_row(f"{layer}:{head}", f"{result.head_cosine[layer, head]:.3f}", f"{result.head_cosine_std[layer, head]:.3f}")
        parts += [table, Text()]
    matched = result.matched_cka()
    layers = Table(title="per layer (hidden states, 0 = embeddings)", title_justify="left", box=None, padding=(0, 1))
    layers.add_column("layer", justify="right", style="dim")
    layers.add_column("CKA(A_l, B_l)", justify="right")
    layers.add_column("", width=12, no_wrap=True)
    layers.add_column("head cosine (layer l−1)", justify="right")
    layer_cosine = result.layer_cosine()
    for layer in range(result.cka.shape[0]):
        value = float(matched[layer]) if matched is not None else float("nan")
        cosine = f"{layer_cosine[layer - 1]:.3f}" if layer_cosine is not None and layer >= 1 else ""
        layers.add_row(
            str(layer),
            f"{value:.3f}" if np.isfinite(value) else "–",
            Bar(1.0, 0, value if np.isfinite(value) else 0, width=12, color="magenta"),
            cosine,
        )
    parts += [
        layers,
        Text(),
        cka_heatmap(result.cka, colormap, title="linear CKA, A layers ↓ × B layers →", rows="A", cols="B", glyphs=glyphs),
    ]
    for probe in result.probes:
        table = Table(title=f"probe {probe.task} ({probe.metric})", title_justify="left", box=None, padding=(0, 1))
        for name in ("layer", "A", "B", "B − A"):
            table.add_column(name, justify="right")
        for entry in probe.as_json()["layers"]:
            difference = entry["difference"]
            style = "green" if difference is not None and difference > 0 else "red" if difference is not None and difference < 0 else ""
            table.add_row(str(entry["layer"]), _fmt(entry["a"]), _fmt(entry["b"]), Text(_fmt(difference, signed=True), style=style))
        parts += [Text(), table]
    return Group(*parts)


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.3f}" if signed else f"{value:.3f}"
