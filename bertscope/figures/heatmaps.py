"""Matrices with labelled axes: an attention map (tokens × tokens), CKA (layer × layer), the residual-stream map.

Each function takes plain arrays and labels and returns a `matplotlib.figure.Figure`; rows
are drawn top to bottom as the matrix holds them (row 0 at the top), except CKA, whose
layers rise from the lower left corner as in Kornblith et al. 2019.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure

from bertscope.figures.layout import (
    ANNOTATE_CELLS,
    MAX_TOKENS,
    annotate_cells,
    colormap,
    colour_bar,
    label_inches,
    new_figure,
    number_ticks,
    titled,
    token_axis_inches,
    token_label_size,
    token_ticks,
)

QUANTITIES = {
    "weight": "attention weight α",
    "norm": "value-weighted norm ‖α f(x)‖",
}
"""What the cells of an attention map hold, as the colour bar names it (Kobayashi et al. 2020 for the norms)."""
SCALES = {
    "max": "",
    "fixed": "",
    "row": " ÷ its row's largest",
    "log": " (log scale)",
}
"""The colour scales of `bertscope attention --scale`, and what each adds to the colour bar's label."""
LOG_DECADES = 3  # the log scale spans this many decades below the largest value
SMALLEST_MAP = 1.8  # inches: the side of a short input's map
CUT_REST = "the CSV has every token"  # where a figure cut at MAX_TOKENS says the rest is


def cut_note(shown: int, length: int, rest: str) -> str | None:
    """What a figure of the first `shown` of `length` tokens says of the others, or None when it shows them all."""
    return f"the first {shown} of {length} tokens shown (the most a figure labels legibly); {rest}" if shown < length else None


def attention_heatmap(
    matrix: np.ndarray,
    tokens: Sequence[str],
    *,
    layer: int | None = None,
    head: int | None = None,
    heads: int | None = None,
    quantity: str = "weight",
    scale: str = "max",
    title: str | None = None,
    note: str | None = None,
    key_tokens: Sequence[str] | None = None,
    rest: str = CUT_REST,
) -> Figure:
    """One attention map `[T, T]`: rows the query ("from") tokens, columns the key ("to") tokens, every one labelled.

    `quantity` is "weight" (α) or "norm" (‖α f(x)‖); `scale` one of SCALES ("max": 0 to the
    map's largest, "fixed": 0 to 1, "row": each row over its largest, "log": three decades).
    The title is "layer L · head H", or with `heads` (and no head) "layer L · mean of H heads";
    `title` replaces it. `note` goes under the figure (a head switched off, a local window).
    NaN cells (beyond a local head's reach) are light grey. The figure grows with the input,
    its labels shrinking to SMALLEST_LABEL; past MAX_TOKENS it shows the first MAX_TOKENS
    rows and columns (on the whole map's colour scale) and says so, and where the rest is (`rest`).
    """
    matrix = np.asarray(matrix, dtype=float)
    key_tokens = tokens if key_tokens is None else key_tokens
    if matrix.shape != (len(tokens), len(key_tokens)):
        raise ValueError(f"{len(tokens)}×{len(key_tokens)} token labels do not match an attention map of shape {matrix.shape}")
    if quantity not in QUANTITIES or scale not in SCALES:
        raise ValueError(f"quantity must be one of {', '.join(QUANTITIES)} and scale one of {', '.join(SCALES)}")
    rows, columns = matrix.shape
    if scale == "row":
        with np.errstate(invalid="ignore", divide="ignore"):
            matrix = matrix / np.nanmax(matrix, axis=1, keepdims=True)
    largest = float(np.nanmax(matrix)) if np.isfinite(matrix).any() else 1.0
    norm: Normalize
    lowest = 0.0
    if scale == "log":
        top = largest if largest > 0 else 1.0
        lowest = top / 10**LOG_DECADES
        norm = LogNorm(vmin=lowest, vmax=top, clip=True)
    else:
        norm = Normalize(0.0, 1.0 if scale in ("fixed", "row") or largest <= 0 else largest)
    shown_rows, shown_columns = min(rows, MAX_TOKENS), min(columns, MAX_TOKENS)
    row_labels, column_labels = list(tokens)[:shown_rows], list(key_tokens)[:shown_columns]
    size = token_label_size(max(shown_rows, shown_columns))
    cell = max(token_axis_inches(1, size), SMALLEST_MAP / max(shown_rows, shown_columns))
    figure = new_figure(
        shown_columns * cell + label_inches(row_labels, size) + 1.9,  # the map, its labels, the axis label and the colour bar
        shown_rows * cell + label_inches(column_labels, size) + 1.2,  # the map, its labels, the axis label, title and note
        largest=None,
    )
    ax = figure.add_subplot()
    shown = np.where(np.isnan(matrix) | (matrix > 0), matrix, lowest) if scale == "log" else matrix  # log: zero is the lowest colour
    image = ax.imshow(shown[:shown_rows, :shown_columns], cmap=colormap("viridis"), norm=norm)
    token_ticks(ax, "y", row_labels, size)
    token_ticks(ax, "x", column_labels, size)
    ax.set_ylabel("from (query token)")
    ax.set_xlabel("to (key token)")
    colour_bar(figure, image, ax, QUANTITIES[quantity] + SCALES[scale], shrink=0.8)
    if title is None:
        where = f"layer {layer}" if layer is not None else ""
        who = f"head {head}" if head is not None else f"mean of {heads} heads" if heads is not None else ""
        title = " · ".join(part for part in (where, who) if part)
    cut = cut_note(min(shown_rows, shown_columns), max(rows, columns), rest)
    titled(figure, title, "; ".join(part for part in (note, cut) if part) or None, ax)
    return figure


def cka_matrix(
    matrix: np.ndarray,
    *,
    rows: str = "layer (0 = embeddings)",
    columns: str = "layer (0 = embeddings)",
    title: str | None = "linear CKA, layer × layer",
    label: str = "linear CKA",
    note: str | None = None,
) -> Figure:
    """CKA between hidden-state layers `[A, B]` on a 0–1 colour bar, layer 0 at the lower left; values written in small grids."""
    matrix = np.asarray(matrix, dtype=float)
    height, width = matrix.shape
    figure = new_figure(2.6 + 0.42 * width, 1.9 + 0.42 * height)
    ax = figure.add_subplot()
    image = ax.imshow(matrix, cmap=colormap("magma"), vmin=0.0, vmax=1.0, origin="lower")
    number_ticks(ax, "x", width)
    number_ticks(ax, "y", height)
    ax.set_xlabel(columns)
    ax.set_ylabel(rows)
    if matrix.size <= ANNOTATE_CELLS:
        annotate_cells(ax, matrix, image)
    colour_bar(figure, image, ax, label, shrink=0.85)
    titled(figure, title, note, ax)
    return figure


def residual_map(
    values: np.ndarray,
    tokens: Sequence[str],
    *,
    label: str = "effect",
    differing: Collection[int] = (),
    title: str | None = "patching the residual stream",
    note: str | None = None,
    rest: str = CUT_REST,
) -> Figure:
    """Effects `[L+1, T]` per hidden state and token as in Meng et al. 2022: tokens down, layers across (0 = embeddings).

    Signed values on a diverging scale centred on 0; the tokens in `differing` (where the two
    inputs differ) are bold and starred. Every token is labelled; past MAX_TOKENS the first
    MAX_TOKENS are drawn, and the note says so and where the rest is (`rest`).
    """
    values = np.asarray(values, dtype=float)
    layers, length = values.shape
    if length != len(tokens):
        raise ValueError(f"{len(tokens)} token labels do not match effects over {length} positions")
    finite = values[np.isfinite(values)]
    limit = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
    shown = min(length, MAX_TOKENS)
    labels = [f"{token}*" if position in differing else token for position, token in enumerate(tokens)][:shown]
    size = token_label_size(shown)
    figure = new_figure(
        2.4 + 0.34 * layers + label_inches(labels, size),
        1.6 + max(0.24 * shown, token_axis_inches(shown, size)),
        largest=None,
    )
    ax = figure.add_subplot()
    image = ax.imshow(values.T[:shown], cmap=colormap("RdBu_r"), vmin=-limit, vmax=limit, aspect="auto")
    token_ticks(ax, "y", labels, size, bold=set(differing))
    number_ticks(ax, "x", layers)
    ax.set_xlabel("hidden state (0 = embeddings)")
    ax.set_ylabel("token (* differs between the inputs)" if differing else "token")
    colour_bar(figure, image, ax, label, shrink=0.85)
    titled(figure, title, "; ".join(part for part in (note, cut_note(shown, length, rest)) if part) or None, ax)
    return figure
