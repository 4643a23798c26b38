"""Rich views of head importance and pruning curves (no torch): for the CLI and the explorer."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np
from rich.bar import Bar
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from bertscope.analyses.importance.results import HeadImportance, PruningCurve

SHADES = " ░▒▓█"


def importance_grid(importance: np.ndarray, pruned: Collection[tuple[int, int]] = frozenset()) -> Table:
    """Layers down, heads across; each cell the score as a percentage of the largest, shaded light to dark.

    Percentages keep 12 heads within 80 columns; the exact values are in --json and --csv.
    """
    num_layers, num_heads = importance.shape
    table = Table(box=None, padding=(0, 1), show_edge=False)
    table.add_column("L\\H", justify="right", style="dim")
    for head in range(num_heads):
        table.add_column(str(head), justify="right")
    high = float(np.abs(importance).max()) or 1.0
    for layer in range(num_layers):
        cells = []
        for head in range(num_heads):
            if (layer, head) in pruned:
                cells.append(Text("  ×", style="dim"))
                continue
            value = float(importance[layer, head])
            shade = SHADES[int(round(max(value, 0.0) / high * (len(SHADES) - 1)))]
            cells.append(Text(f"{shade}{100 * value / high:3.0f}", style="bold" if value >= 0.5 * high else ""))
        table.add_row(str(layer), *cells)
    return table


def importance_report(result: HeadImportance, model: str, source: str, top: int = 8) -> Group:
    order = result.order()
    fmt = "{:.3g}"
    least = ", ".join(f"{layer}:{head}" for layer, head in order[:top])
    most = ", ".join(f"{layer}:{head}" for layer, head in reversed(order[-top:]))
    parts: list[RenderableType] = [
        Text.assemble((f"head importance · {result.objective}", "bold"), f" · {result.method} ({result.ablation}) · {model} · {source}"),
        Text(
            f"{result.counted} · baseline loss {fmt.format(result.baseline_loss)}, {result.metric} "
            f"{fmt.format(result.baseline_metric)}" + (" · scores ℓ2-normalised per layer" if result.normalized else ""),
            style="dim",
        ),
        importance_grid(result.importance, result.pruned),
        Text(f"cells: % of the most important head ({float(np.abs(result.importance).max()):.4g}); × pruned", style="dim"),
        Text(f"most important: {most}"),
        Text(f"least important: {least}"),
    ]
    if result.layers is not None:
        layers = Table(box=None, padding=(0, 1), title="leave one layer out (Kovaleva et al.): loss change", title_justify="left")
        layers.add_column("layer", justify="right", style="dim")
        layers.add_column("", width=24)
        layers.add_column("Δ loss", justify="right")
        high = max(float(np.abs(result.layers).max()), 1e-12)
        for layer, delta in enumerate(result.layers):
            layers.add_row(str(layer), Bar(high, 0, max(float(delta), 0.0), width=24, color="magenta"), f"{delta:+.4g}")
        parts.append(layers)
    parts.extend(raising_lines(result))
    for note in result.notes:
        parts.append(Text(note, style="dim"))
    return Group(*parts)


def raising_lines(result: HeadImportance, top: int = 12) -> list[Text]:
    """Kovaleva et al.'s §6: the heads and layers whose removal alone raises the metric, the largest rise first."""
    changes = result.metric_changes
    if changes is None:
        return []
    lines = []
    heads = changes.raising_heads(result.pruned)
    if heads:
        shown = " ".join(f"{layer}:{head} ({change:+.3g})" for layer, head, change in heads[:top])
        more = f" … and {len(heads) - top} more" if len(heads) > top else ""
        lines.append(Text(f"switching off these heads raises {result.metric}: {shown}{more}"))
    layers = changes.raising_layers()
    if layers:
        shown = " ".join(f"{layer} ({change:+.3g})" for layer, change in layers)
        lines.append(Text(f"switching off these layers raises {result.metric}: {shown}"))
    if not heads and not layers:
        lines.append(Text(f"switching off no single head or layer raises {result.metric}", style="dim"))
    return lines


def curve_chart(curve: PruningCurve, width: int = 30) -> Table:
    """The metric at each pruning step as a bar, with the drop from the unpruned model; `*` marks the prunable point."""
    best = curve.prunable()
    metrics = [p.metric for p in curve.points]
    finite = [m for m in metrics if m == m]
    low = min(0.0, min(finite)) if finite else 0.0
    high = max(finite) if finite else 1.0
    table = Table(box=None, padding=(0, 1))
    table.add_column("pruned", justify="right")
    table.add_column("heads", justify="right", style="dim")
    table.add_column(Text(curve.metric, no_wrap=False), width=width, no_wrap=True)  # the bars never wrap; a long name does
    table.add_column("", justify="right")
    table.add_column("drop", justify="right")
    table.add_column("loss", justify="right", style="dim")
    for point, drop in zip(curve.points, curve.drops()):
        mark = " *" if point is best else ""
        over = drop > curve.max_drop + 1e-12
        table.add_row(
            f"{point.fraction:.0%}{mark}",
            str(point.heads_pruned),
            Bar(high - low or 1.0, 0, max(point.metric - low, 0.0), width=width, color="red" if over else "green"),
            f"{point.metric:.4f}",
            Text(f"{drop:+.4f}", style="red" if over else ""),
            f"{point.loss:.4g}",
        )
    return table


def curve_report(curve: PruningCurve, model: str, source: str) -> Group:
    best = curve.prunable()
    how = "importance re-estimated at every step" if curve.reestimate else "one ranking for all steps"
    return Group(
        Text.assemble((f"pruning curve · {curve.objective}", "bold"), f" · {curve.method} ({curve.ablation}) · {model} · {source}"),
        Text(f"least important heads removed first; {how}", style="dim"),
        curve_chart(curve),
        Text(
            f"largest fraction within a drop of {curve.max_drop:g} in {curve.metric}: {best.fraction:.0%} "
            f"({best.heads_pruned} heads: {best.mask or 'none'})"
        ),
    )
