"""Rich views of activation patching (no torch): effects as numbers on a diverging colour scale.

An effect is a share of the clean-corrupt difference: 1 carries all of it, 0 none, and a
negative effect pushes the other way. Cells are red for positive and blue for negative,
paler towards 0, saturated at ±1; the number is always printed, so a terminal without
colour (NO_COLOR) loses the shading and nothing else.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from bertscope.analyses.patching_results import COMPONENTS, EFFECTS, PatchingResult
from bertscope.model.labels import token_labels

POSITIVE = (214, 39, 40)  # red
NEGATIVE = (31, 119, 180)  # blue


def effect_style(effect: float) -> Style:
    """Background from white (0) to red (+1) or blue (-1); dark text on pale cells, white on saturated ones."""
    if not np.isfinite(effect):
        return Style(dim=True)
    strength = min(abs(float(effect)), 1.0)
    r, g, b = POSITIVE if effect >= 0 else NEGATIVE
    mix = tuple(round(255 + (channel - 255) * strength) for channel in (r, g, b))
    return Style(bgcolor=f"rgb({mix[0]},{mix[1]},{mix[2]})", color="white" if strength > 0.55 else "black")


def effect_cell(effect: float, width: int = 5) -> Text:
    text = "  ·" if not np.isfinite(effect) else f"{effect:+.2f}"
    return Text(text.rjust(width), style=effect_style(effect))


def heads_grid(effects: np.ndarray) -> Table:
    """Layers down, heads across, each cell the head's effect."""
    table = Table(box=None, padding=(0, 0), show_edge=False, pad_edge=False)
    table.add_column("L\\H ", justify="right", style="dim")
    for head in range(effects.shape[1]):
        table.add_column(f"{head:>5} ", justify="right", no_wrap=True)
    for layer in range(effects.shape[0]):
        table.add_row(f"{layer} ", *(effect_cell(value) + " " for value in effects[layer]))
    return table


def layers_table(effects: np.ndarray) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False)
    table.add_column("layer", justify="right", style="dim")
    for component in COMPONENTS:
        table.add_column(component.replace("_", "-"), justify="right")
    for layer, row in enumerate(effects):
        table.add_row(str(layer), *(effect_cell(value, 7) for value in row))
    return table


def positions_grid(effects: np.ndarray, tokens: Sequence[str], differing: Collection[int] = ()) -> Table:
    """Tokens down, hidden-state layers across (0 = the embedding output): Meng et al.'s causal-tracing grid, turned."""
    table = Table(box=None, padding=(0, 0), show_edge=False, pad_edge=False)
    table.add_column("token", no_wrap=True, max_width=14)
    for layer in range(effects.shape[0]):
        table.add_column(f"{layer:>5} ", justify="right", no_wrap=True)
    for position, token in enumerate(token_labels(tokens)):
        label = Text(f"{position:>2} {token} ", style="bold" if position in differing else "dim")
        table.add_row(label, *(effect_cell(value) + " " for value in effects[:, position]))
    return table


def legend() -> Text:
    text = Text("effect: ")
    for value in (-1.0, -0.5, 0.0, 0.5, 1.0):
        text.append_text(effect_cell(value))
        text.append(" ")
    return text


def patching_report(result: PatchingResult, model: str) -> Group:
    """What was compared, the two metric values, then one view per sweep run."""
    clean, corrupt = token_labels(result.tokens), token_labels(result.corrupt_tokens)
    differing = ", ".join(f"{i}:{clean[i]}→{corrupt[i]}" for i in result.differing)
    parts: list[RenderableType] = [
        Text.assemble(("activation patching", "bold"), f" · {result.direction} · {model}"),
        Text(f"m = {result.metric_description}", style="dim"),
        Text(
            f"m(clean) = {result.clean_metric + 0.0:.4g}, m(corrupt) = {result.corrupt_metric + 0.0:.4g}; tokens that differ: {differing}"
        ),
        Text(f"effect = {EFFECTS[result.direction]}", style="dim"),
    ]
    if result.heads is not None:
        parts += [Text("\neach head's output, patched at every position", style="bold"), heads_grid(result.heads)]
    if result.layers is not None:
        parts += [Text("\neach layer's writes (before the residual sum and LayerNorm)", style="bold"), layers_table(result.layers)]
    if result.positions is not None:
        parts += [
            Text("\nthe residual stream: hidden state (0 = embeddings) × token", style="bold"),
            positions_grid(result.positions, result.tokens, set(result.differing)),
        ]
    parts.append(legend())
    return Group(*parts)
