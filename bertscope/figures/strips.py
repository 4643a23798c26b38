"""An attribution as a strip: the input's tokens in a row, each shaded by its score, with a colour bar naming what is explained.

Signed scores (gradient × input, integrated gradients) shade on ColorBrewer's PuOr, orange
for tokens that raise the explained score and purple for those that lower it, centred on 0;
unsigned ones (saliency, rollout) on orange alone. As in the terminal, the scale is the
largest magnitude among the real tokens, so a large score on [CLS] or [SEP] does not wash
out the words: those cells are clamped, and the colour bar's arrows say so.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from bertscope.figures.layout import colormap, colour_bar, new_figure, plain, titled

LINE = 9.0  # inches of tokens on a line before the strip wraps
CHARACTER = 0.085  # inches a character of a 9-point token takes (generous: DejaVu Sans averages less)
PAD = 0.16  # inches of shading either side of a token's text
ROW = 0.62  # inches from one line of tokens to the next


def attribution_strip(
    tokens: Sequence[str],
    scores: np.ndarray,
    *,
    label: str,
    special: Sequence[bool] | np.ndarray | None = None,
    signed: bool | None = None,
    title: str | None = None,
    note: str | None = None,
) -> Figure:
    """Scores `[T]` over `tokens`: each token on a cell shaded by its score, the score under it, `label` (the method and
    what it explains) on the colour bar. Long inputs wrap onto further lines.

    `special`: tokens left out of the scale ([CLS], [SEP]). `signed`: a diverging scale
    (default: when any score is negative).
    """
    scores = np.asarray(scores, dtype=float)
    if scores.shape != (len(tokens),):
        raise ValueError(f"{len(tokens)} tokens do not match scores of shape {scores.shape}")
    real = ~np.asarray(special, dtype=bool) if special is not None else np.ones(len(tokens), dtype=bool)
    considered = np.abs(scores[real] if real.any() else scores)
    scale = float(considered.max()) if considered.size and considered.max() > 0 else 1.0
    signed = bool((scores < 0).any()) if signed is None else signed
    norm = Normalize(-scale if signed else 0.0, scale)
    cmap = colormap("PuOr_r" if signed else "Oranges")
    places = cells(tokens)
    lines = max(line for _, line, _ in places) + 1
    width = max(x + w for x, _, w in places) if places else 1.0
    figure = new_figure(max(width, 4.0) + 0.3, 1.7 + ROW * lines)
    ax = figure.add_subplot()
    for (x, line, w), token, score in zip(places, tokens, scores):
        red, green, blue, _ = cmap(norm(score))
        ax.add_patch(Rectangle((x, line * ROW), w - 0.04, ROW - 0.08, facecolor=(red, green, blue), edgecolor="none"))
        dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
        colour = "white" if dark else "black"
        ax.text(x + w / 2, line * ROW + 0.24, plain(token), ha="center", va="center", fontsize=9, color=colour)
        value = f"{score:.2f}".replace("-0.00", "0.00")
        ax.text(x + w / 2, line * ROW + 0.45, value, ha="center", va="center", fontsize=6, color=colour, alpha=0.8)
    ax.set_xlim(0, max(width, 4.0))
    ax.set_ylim(lines * ROW, 0)
    ax.set_axis_off()
    clamped = bool((scores > norm.vmax).any() or (scores < norm.vmin).any())
    extend = ("both" if signed else "max") if clamped else "neither"
    mappable = ScalarMappable(norm=norm, cmap=cmap)
    colour_bar(figure, mappable, ax, label, orientation="horizontal", location="bottom", shrink=0.6, aspect=35, extend=extend)
    titled(figure, title, note, ax)
    return figure


def cells(tokens: Sequence[str], line: float = LINE) -> list[tuple[float, int, float]]:
    """(x in inches, line number, width in inches) of each token's cell, wrapping at `line` inches."""
    places = []
    x, row = 0.0, 0
    for token in tokens:
        width = max(0.3, CHARACTER * len(token) + 2 * PAD)
        if x > 0 and x + width > line:
            x, row = 0.0, row + 1
        places.append((x, row, width))
        x += width
    return places
