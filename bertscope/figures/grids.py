"""Layer × head grids: a per-head metric on a colour bar, or each head's attention pattern class.

Layers run down (layer 0 at the top, as the explorer's grid), heads across. A metric is
drawn on a sequential colour map, or on a diverging one centred on 0 where it is signed
(patching effects); heads switched off or pruned carry a ×, and small grids write each value
in its cell.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm, ListedColormap, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from bertscope.figures.layout import (
    ANNOTATE_CELLS,
    annotate_cells,
    colormap,
    colour_bar,
    mark_cells,
    new_figure,
    number_ticks,
    outline_cell,
    plain,
    titled,
)
from bertscope.figures.pattern_marks import PATTERN_LETTERS, PATTERN_MARKS

CELL = 0.4  # inches a head's cell takes
PATTERN_COLOURS = {name: mark.colour for name, mark in PATTERN_MARKS.items()}
PATTERN_NAMES = {"off": "off (switched off; not in the shares)"}  # a class the legend explains beyond its name


@dataclass(frozen=True)
class Grid:
    """One panel of `head_grids`: values `[L, H]`, its title, and a head to box (the best one)."""

    values: np.ndarray
    title: str = ""
    highlight: tuple[int, int] | None = None


@dataclass(frozen=True)
class GridAxes:
    """What a grid's rows and columns are: layers and heads, or named columns (`columns`, with `xlabel`)."""

    columns: tuple[str, ...] | None = None
    xlabel: str = "head"
    ylabel: str = "layer"


HEADS = GridAxes()


class GridOptions(TypedDict, total=False):
    """How `head_grids` draws (its keywords), which `head_grid` passes on."""

    title: str | None
    note: str | None
    masked: Collection[tuple[int, int]]
    signed: bool
    vmin: float | None
    vmax: float | None
    axes: GridAxes
    annotate: bool | None


def head_grid(values: np.ndarray, label: str, *, highlight: tuple[int, int] | None = None, **options: Unpack[GridOptions]) -> Figure:
    """A per-head metric `[L, H]` with `label` (the metric and its unit) on the colour bar.

    `masked`: (layer, head) pairs marked ×. `signed`: a diverging map centred on 0, its limit
    the largest magnitude (or `vmax`). `highlight`: a head boxed in red. `axes`: what the rows
    and columns are, where the columns are not heads. `annotate`: write the values (default:
    when the grid has at most ANNOTATE_CELLS cells).
    """
    return head_grids([Grid(np.asarray(values, dtype=float), "", highlight)], label, **options)


def head_grids(
    panels: Sequence[Grid],
    label: str,
    *,
    title: str | None = None,
    note: str | None = None,
    masked: Collection[tuple[int, int]] = (),
    signed: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
    axes: GridAxes = HEADS,
    annotate: bool | None = None,
    per_row: int = 2,
) -> Figure:
    """Several grids of one metric side by side (one relation each, say), sharing one colour scale and bar."""
    if not panels:
        raise ValueError("no grid to draw")
    arrays = [np.asarray(panel.values, dtype=float) for panel in panels]
    layers, heads = arrays[0].shape
    finite = np.concatenate([array[np.isfinite(array)] for array in arrays])
    norm = _norm(finite, signed, vmin, vmax)
    across = min(len(panels), per_row)
    down = -(-len(panels) // across)
    figure = new_figure(across * (1.0 + CELL * heads) + 1.3, max(down * (0.9 + CELL * layers) + 0.8, 3.4))  # room for the bar's label
    subplots = figure.subplots(down, across, squeeze=False)
    cmap = colormap("RdBu_r" if signed else "viridis")
    write = annotate if annotate is not None else layers * heads <= ANNOTATE_CELLS and len(panels) <= 4
    image = None
    for index, ax in enumerate(subplots.flat):
        if index >= len(panels):
            ax.set_axis_off()
            continue
        values, panel = arrays[index], panels[index]
        image = ax.imshow(values, cmap=cmap, norm=norm)
        _label_axes(ax, layers, heads, axes)
        if write:
            annotate_cells(ax, values, image, skip=masked)
        mark_cells(ax, masked, image, values)
        if panel.highlight is not None:
            outline_cell(ax, *panel.highlight)
        if panel.title:
            ax.set_title(plain(panel.title), fontsize=9.5)
    assert image is not None  # there is at least one panel
    colour_bar(figure, image, list(subplots.flat), label, shrink=0.9 if down > 1 else 1.0)
    titled(figure, title, note)
    return figure


def pattern_classes(
    dominant: np.ndarray,
    classes: Sequence[str],
    *,
    shares: np.ndarray | None = None,
    title: str | None = "dominant attention pattern per head",
    note: str | None = None,
) -> Figure:
    """Each head's pattern class (Kovaleva et al. 2019) as a coloured cell with its letter, and a legend of the classes.

    `dominant` `[L, H]` indexes `classes`; `shares` `[L, H, C]`, when given, writes the letter in
    lower case where the class holds under half of the head's sentences. A head of class "off"
    (switched off in the passes) is a white cell marked ×.
    """
    dominant = np.asarray(dominant, dtype=int)
    layers, heads = dominant.shape
    colours = [PATTERN_COLOURS.get(name, f"C{i}") for i, name in enumerate(classes)]
    figure = new_figure(3.2 + CELL * heads, max(1.4 + CELL * layers, 2.4))
    ax = figure.add_subplot()
    cmap = ListedColormap(colours)
    ax.imshow(dominant, cmap=cmap, norm=BoundaryNorm(np.arange(len(classes) + 1) - 0.5, len(classes)))
    _label_axes(ax, layers, heads, HEADS)
    weak = False
    for (layer, head), index in np.ndenumerate(dominant):
        letter = PATTERN_LETTERS.get(classes[index], classes[index][:2].upper())
        if shares is not None and float(np.max(shares[layer, head])) < 0.5 and classes[index] != "off":
            letter, weak = letter.lower(), True
        ax.text(head, layer, letter, ha="center", va="center", fontsize=7 if len(letter) > 1 else 8)
    legend = [f"{PATTERN_LETTERS.get(name, '?')}  {PATTERN_NAMES.get(name, name)}" for name in classes]
    handles = [Patch(facecolor=colour, edgecolor="#555555", linewidth=0.5, label=label) for label, colour in zip(legend, colours)]
    figure.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    lower = "lower case: the class of under half the head's sentences"
    titled(figure, title, "; ".join(part for part in (note, lower if weak else None) if part) or None, ax)
    return figure


def _norm(finite: np.ndarray, signed: bool, vmin: float | None, vmax: float | None) -> Normalize:
    """Signed: symmetric about 0 to the largest magnitude; else the values' range, or the limits given."""
    if signed:
        limit = vmax if vmax is not None else float(np.abs(finite).max()) if finite.size else 1.0
        return Normalize(-(limit or 1.0), limit or 1.0)
    low = vmin if vmin is not None else float(finite.min()) if finite.size else 0.0
    high = vmax if vmax is not None else float(finite.max()) if finite.size else 1.0
    return Normalize(low, high if high > low else low + 1.0)


def _label_axes(ax: Axes, layers: int, heads: int, axes: GridAxes) -> None:
    number_ticks(ax, "x", heads, axes.columns)
    number_ticks(ax, "y", layers)
    ax.set_xlabel(axes.xlabel)
    ax.set_ylabel(axes.ylabel)
    ax.tick_params(length=0)
