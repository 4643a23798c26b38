"""What every figure shares: a Figure without pyplot, token tick labels that stay legible, colour bars, cell marks.

Imported only when a figure is drawn (it imports matplotlib). Figures are built on
`matplotlib.figure.Figure` directly: no pyplot, so no global figure list, no GUI backend, and
nothing kept alive after the caller drops the figure.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colorbar import Colorbar
from matplotlib.colors import Colormap
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

LARGEST_LABEL = 9.0  # points: tick labels of short inputs
SMALLEST_LABEL = 5.0  # points: below this a label is thinned out (every k-th) rather than shrunk
LABEL_PITCH = 1.3  # a label needs this many times its font size along the axis
MAX_INCHES = 13.0  # the longest side of a figure; past it labels shrink, then thin out
ANNOTATE_CELLS = 160  # grids with at most this many cells write each value in its cell
MISSING = "#d9d9d9"  # cells with no value (NaN): out of a local head's reach, a relation never seen


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of `width` × `height` inches (capped), laid out so labels, titles and colour bars are never cut."""
    return Figure(figsize=(min(width, MAX_INCHES), min(height, MAX_INCHES)), layout="constrained")


def plain(text: str) -> str:
    """`text` shown as written: a `$` would otherwise start matplotlib's mathtext (a token `$5` pairs with the next `$`)."""
    return text.replace("$", r"\$")


def tick_plan(count: int, inches: float) -> tuple[float, int]:
    """(font size in points, step k) so that `count` labels along `inches` do not overlap: shrink first, then show every k-th."""
    room = max(inches, 0.5) * 72.0
    size = min(LARGEST_LABEL, max(SMALLEST_LABEL, room / (max(count, 1) * LABEL_PITCH)))
    fits = max(1, int(room // (size * LABEL_PITCH)))
    return size, max(1, math.ceil(count / fits))


def token_ticks(ax: Axes, axis: str, labels: Sequence[str], inches: float, bold: Collection[int] = ()) -> None:
    """Tick `labels` (one per cell) along `axis` ("x", rotated, or "y"), shrunk or thinned to fit `inches`.

    With every k-th label shown, the ticks keep their true positions, so the labels still name their cells.
    """
    size, step = tick_plan(len(labels), inches)
    positions = list(range(0, len(labels), step))
    shown = [plain(labels[i]) for i in positions]
    if axis == "x":
        ax.set_xticks(positions, shown, rotation=90, fontsize=size)
        ticks = ax.get_xticklabels()
    else:
        ax.set_yticks(positions, shown, fontsize=size)
        ticks = ax.get_yticklabels()
    for label, position in zip(ticks, positions):
        if position in bold:
            label.set_fontweight("bold")


def number_ticks(ax: Axes, axis: str, count: int, labels: Sequence[str] | None = None) -> None:
    """Integer ticks 0..count-1 (layers, heads), every one while they fit, else every second or fifth."""
    step = 1 if count <= 16 else 2 if count <= 32 else 5
    positions = list(range(0, count, step))
    names = [str(i) for i in positions] if labels is None else [plain(labels[i]) for i in positions]
    (ax.set_xticks if axis == "x" else ax.set_yticks)(positions, names)


def colour_bar(figure: Figure, mappable: ScalarMappable, ax: Axes | Sequence[Axes], label: str, **options: object) -> Colorbar:
    """A colour bar beside `ax` whose label names the quantity (and its unit or scale)."""
    bar = figure.colorbar(mappable, ax=ax, **options)  # type: ignore[arg-type]  # matplotlib's stubs type **kwargs loosely
    bar.set_label(plain(label))
    return bar


def colormap(name: str) -> Colormap:
    """A named matplotlib colour map with missing values (NaN) drawn in light grey."""
    from matplotlib import colormaps

    return colormaps[name].with_extremes(bad=MISSING)


def titled(figure: Figure, title: str | None, note: str | None = None, ax: Axes | None = None) -> None:
    """The title, over `ax` where the figure has one plot (clear of a legend beside it) or over the figure; under the
    figure in small italics a note (a masked head, how many sentences)."""
    if title and ax is not None:
        ax.set_title(plain(title), fontsize=11)
    elif title:
        figure.suptitle(plain(title), fontsize=11)
    if note:
        figure.supxlabel(plain(note), fontsize=7.5, style="italic", wrap=True)


def annotate_cells(ax: Axes, values: np.ndarray, image: AxesImage, skip: Collection[tuple[int, int]] = ()) -> None:
    """Each cell's value written in it, dark on light cells and white on dark ones (cells in `skip` left blank)."""
    finite = values[np.isfinite(values)]
    largest = float(np.abs(finite).max()) if finite.size else 0.0
    form = "{:.2f}" if largest < 10 else "{:.1f}" if largest < 100 else "{:.0f}"
    size = 6.5 if values.shape[1] <= 12 else 5.5
    for (row, column), value in np.ndenumerate(values):
        if (row, column) in skip or not np.isfinite(value):
            continue
        red, green, blue, _ = image.cmap(image.norm(value))
        light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.55
        text = form.format(value).replace("-0.00", "0.00")
        ax.text(column, row, text, ha="center", va="center", fontsize=size, color="black" if light else "white")


def mark_cells(ax: Axes, cells: Collection[tuple[int, int]], image: AxesImage, values: np.ndarray, symbol: str = "×") -> None:
    """`symbol` over each (row, column) in `cells`: heads switched off or pruned."""
    for row, column in cells:
        if not (0 <= row < values.shape[0] and 0 <= column < values.shape[1]):
            continue
        value = values[row, column]
        red, green, blue, _ = image.cmap(image.norm(value)) if np.isfinite(value) else (1.0, 1.0, 1.0, 1.0)
        light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.55
        ax.text(column, row, symbol, ha="center", va="center", fontsize=10, fontweight="bold", color="black" if light else "white")


def outline_cell(ax: Axes, row: int, column: int, colour: str = "#d62728") -> None:
    """A box round one cell (the best head)."""
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor=colour, linewidth=2.0))
