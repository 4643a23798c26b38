"""Rich views of attention pattern statistics, for `bertscope patterns` and the overview screen.

Takes plain arrays (no torch): the dominant pattern of each head as a letter grid, the
per-layer attention to [CLS], [SEP] and punctuation as bars (Clark et al., Fig. 1), and the
per-layer pattern shares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from rich.bar import Bar
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from bertscope.figures.pattern_marks import PATTERN_LETTERS, PATTERN_MARKS

if TYPE_CHECKING:
    from bertscope.analyses.attention.patterns_results import PatternResult

PATTERN_STYLES = {name: mark.style for name, mark in PATTERN_MARKS.items()}
OFF_LEGEND = "switched off in these passes, of no pattern and left out of the shares"


def pattern_grid(dominant: np.ndarray, patterns: tuple[str, ...], shares: np.ndarray | None = None) -> Table:
    """Layers as rows, heads as columns; each cell the letter of the head's dominant pattern."""
    num_layers, num_heads = dominant.shape
    table = Table(box=None, padding=(0, 1), show_edge=False)
    table.add_column("layer", justify="right", style="dim")
    for head in range(num_heads):
        table.add_column(str(head), justify="center", header_style="dim")
    for layer in range(num_layers):
        cells = []
        for head in range(num_heads):
            name = patterns[dominant[layer, head]]
            letter = PATTERN_LETTERS[name]
            if shares is not None and shares[layer, head].max() < 0.5 and name != "off":
                letter = letter.lower()  # no class holds half the sentences
            cells.append(Text(letter, style=PATTERN_STYLES[name]))
        table.add_row(str(layer), *cells)
    return table


def pattern_legend(patterns: tuple[str, ...]) -> Text:
    legend = Text(style="dim")
    for name in patterns:
        legend.append(PATTERN_LETTERS[name], style=PATTERN_STYLES[name])
        legend.append(f" {name}{f' ({OFF_LEGEND})' if name == 'off' else ''}  ")
    legend.append("(lower case: the class of under half the sentences)")
    return legend


def layer_bars(values: dict[str, np.ndarray], title: str, scale: float = 1.0, width: int = 14) -> Table:
    """One row per layer, one bar per named per-layer value, like Clark et al.'s Fig. 1."""
    table = Table(box=None, padding=(0, 1), title=title, title_justify="left")
    table.add_column("layer", justify="right", style="dim", min_width=5, no_wrap=True)
    for name in values:
        table.add_column(name, width=width, no_wrap=True)
        table.add_column("", justify="right", min_width=4, no_wrap=True)
    num_layers = len(next(iter(values.values())))
    for layer in range(num_layers):
        row: list[RenderableType] = [str(layer)]
        for series in values.values():
            row += [Bar(scale, 0, float(series[layer]), width=width, color="magenta"), f"{series[layer]:.2f}"]
        table.add_row(*row)
    return table


def layer_pattern_table(layer_shares: np.ndarray, patterns: tuple[str, ...], short: bool = False, off: bool = False) -> Table:
    """Per layer, the share of (head, sentence) maps in each pattern class (`short`: letters as headers); `off`: some
    heads were switched off, and are left out (the title says so, in the width of the short table)."""
    title = "pattern shares per layer"
    if off:
        title = "shares per layer, heads off out" if short else f"{title}, heads off left out"
    table = Table(box=None, padding=(0, 1), title=title, title_justify="left")
    table.add_column("layer", justify="right", style="dim")
    for name in patterns:
        table.add_column(PATTERN_LETTERS[name] if short else name, justify="right", style=PATTERN_STYLES[name])
    for layer, shares in enumerate(layer_shares):
        table.add_row(str(layer), *(f"{share:.0%}" for share in shares))
    return table


SHARE_LABELS = {"cls": "[CLS]", "sep": "[SEP]", "punct": "punct", "self": "self", "prev": "prev", "next": "next"}


def weight_norm_table(result: PatternResult) -> Table:
    """Per layer, each share of weight beside the same share of value-weighted norm (Kobayashi et al. 2020)."""
    table = Table(box=None, padding=(0, 1), title="share of weight │ share of norm, per layer", title_justify="left")
    table.add_column("layer", justify="right", style="dim")
    for label in SHARE_LABELS.values():
        table.add_column(f"{label:>4} │", justify="right", no_wrap=True)
    for layer in range(result.pattern_shares.shape[0]):
        cells = [
            Text.assemble(
                f"{result.layer_statistics(name)[layer]:.2f}",
                ("│", "dim"),
                (f"{result.layer_statistics('norm_' + name)[layer]:.2f}", "bold"),
            )
            for name in SHARE_LABELS
        ]
        table.add_row(str(layer), *cells)
    return table


def weight_norm_grid(result: PatternResult, name: str) -> Table:
    """Per head, one share of weight │ of norm in percent: heads that look at a token but move little from it stand out."""
    weights, norms = result.statistics[name], result.statistics[f"norm_{name}"]
    num_layers, num_heads = weights.shape
    table = Table(
        box=None,
        padding=(0, 1, 0, 0),
        show_edge=False,
        title=f"share to {SHARE_LABELS[name]} per head, % of weight │ % of norm",
        title_justify="left",
    )
    table.add_column("layer", justify="right", style="dim")
    for head in range(num_heads):
        table.add_column(f"{head:>2}", justify="left", header_style="dim", no_wrap=True)
    for layer in range(num_layers):
        cells = [
            Text.assemble(_percent(weights[layer, head]).rjust(2), ("│", "dim"), (_percent(norms[layer, head]).ljust(2), "bold"))
            for head in range(num_heads)
        ]
        table.add_row(str(layer), *cells)
    return table


def _percent(share: float) -> str:
    """Two characters at most, so twelve heads fit 80 columns: 100% reads 99."""
    return f"{min(round(float(share) * 100), 99)}"


def norms_report(result: PatternResult) -> Group:
    """The value-weighted view (Kobayashi et al. 2020): shares of weight beside shares of norm."""
    from bertscope.analyses.attention.patterns_results import NORM_DEFINITION

    return Group(
        Text(f"value-weighted norms: {NORM_DEFINITION}", style="dim"),
        weight_norm_table(result),
        Text(),
        weight_norm_grid(result, "sep"),
        Text(),
        weight_norm_grid(result, "punct"),
    )


def patterns_report(result: PatternResult, patterns: tuple[str, ...]) -> Group:
    """Everything a person wants from one run, top to bottom (and the norms beside the weights, when computed).

    `patterns` are the pattern classes (PATTERNS); heads switched off are of one more, off (CLASSES)."""
    from bertscope.analyses.attention.patterns_results import OFF

    off = bool(result.off.any())
    classes = (*patterns, OFF)
    parts: list[RenderableType] = [
        Text("dominant pattern per head", style="bold"),
        pattern_grid(result.dominant, classes, result.pattern_shares),
        pattern_legend(classes if off else patterns),
        Text(),
        layer_pattern_table(result.layer_pattern_shares(), patterns, off=off),
        Text(),
        layer_bars(
            {name: result.layer_statistics(name) for name in ("cls", "sep", "punct")},
            "mean attention per layer to [CLS], [SEP] and punctuation",
        ),
    ]
    if result.has_norms:
        parts += [Text(), norms_report(result)]
    return Group(*parts)
