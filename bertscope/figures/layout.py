"""What every figure shares: a Figure without pyplot, token tick labels that stay legible, colour bars, cell marks.

Imported only when a figure is drawn (it imports matplotlib). Figures are built on
`matplotlib.figure.Figure` directly: no pyplot, so no global figure list, no GUI backend, and
nothing kept alive after the caller drops the figure. Such a figure has no display in a
notebook of its own (IPython's is registered by `%matplotlib inline`, for pyplot's), so each
is a `ShownFigure`, which draws itself as PNG when a cell ends with it.
"""

from __future__ import annotations

import io
from collections.abc import Collection, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colorbar import Colorbar
from matplotlib.colors import Colormap
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

LARGEST_LABEL = 9.0  # points: tick labels of short inputs
SMALLEST_LABEL = 5.0  # points: the smallest token label, still legible on paper
LABEL_PITCH = 1.3  # a label needs this many times its font size along the axis
TOKEN_AXIS_INCHES = 9.0  # a token axis grows to this at the largest labels, then its labels shrink
MAX_TOKENS = 100  # the tokens a figure labels, each one: 100 labels of SMALLEST_LABEL take TOKEN_AXIS_INCHES
MAX_INCHES = 13.0  # the longest side of a figure (but a token heatmap's, which grows with its tokens)
ANNOTATE_CELLS = 160  # grids with at most this many cells write each value in its cell
MISSING = "#d9d9d9"  # cells with no value (NaN): out of a local head's reach, a relation never seen


class ShownFigure(Figure):
    """A matplotlib Figure that a notebook shows as it is: a cell whose last line is `result.figure()` displays the
    picture (image/png), with no `%matplotlib inline` first; everything else (`savefig`, axes) is matplotlib's own."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", bbox_inches="tight")
        return buffer.getvalue()


def new_figure(width: float, height: float, largest: float | None = MAX_INCHES) -> Figure:
    """An empty figure of `width` × `height` inches (each at most `largest`; None: as given), laid out so labels,
    titles and colour bars are never cut."""
    if largest is not None:
        width, height = min(width, largest), min(height, largest)
    return ShownFigure(figsize=(width, height), layout="constrained")


def plain(text: str) -> str:
    """`text` shown as written: a `$` would otherwise start matplotlib's mathtext (a token `$5` pairs with the next `$`)."""
    return text.replace("$", r"\$")


def token_label_size(count: int) -> float:
    """The font size (points) of `count` token labels: the largest while they fit TOKEN_AXIS_INCHES, then smaller,
    never under SMALLEST_LABEL (a figure shows at most MAX_TOKENS tokens)."""
    return min(LARGEST_LABEL, max(SMALLEST_LABEL, TOKEN_AXIS_INCHES * 72.0 / (max(count, 1) * LABEL_PITCH)))


def token_axis_inches(count: int, size: float) -> float:
    """How long an axis of `count` labels of `size` points must be for no two to overlap."""
    return count * size * LABEL_PITCH / 72.0


def label_inches(labels: Sequence[str], size: float) -> float:
    """About how far the longest of `labels` reaches from its axis at `size` points (room the figure leaves for it)."""
    return max((len(label) for label in labels), default=1) * size * 0.62 / 72.0 + 0.1


def token_ticks(ax: Axes, axis: str, labels: Sequence[str], size: float, bold: Collection[int] = ()) -> None:
    """Tick every one of `labels` (one per cell) along `axis` ("x", rotated, or "y") at `size` points: each cell named."""
    positions = list(range(len(labels)))
    shown = [plain(label) for label in labels]
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
