"""Fill-in guesses and cloze scores as Rich tables (no torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.bar import Bar
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # analyses.mlm imports torch; only its result types are named here
    from bertscope.analyses.mlm_results import ClozeResult, FillResult


def fill_report(result: FillResult, model: str, layer_guesses: int = 3) -> Group:
    """Per [MASK]: the top guesses (before → after a head mask), then the top guesses read off each layer."""
    masked = len(result.mask) > 0
    title = f"{model}" + (f" · heads off {result.mask.spec()} ({result.ablation})" if masked else "")
    parts: list[RenderableType] = [Text(title, style="dim")]
    for blank in result.blanks:
        parts.append(Text(f"[MASK] at token {blank.position}", style="bold"))
        table = Table(box=None, padding=(0, 1))
        table.add_column("#", justify="right", style="dim")
        if masked:
            table.add_column("unmasked")
            table.add_column("p", justify="right")
        table.add_column("masked" if masked else "token")
        table.add_column("p", justify="right")
        table.add_column("", width=20, no_wrap=True)
        for rank, (token, probability) in enumerate(zip(blank.predictions.tokens, blank.predictions.probabilities)):
            before: list[str] = []
            if blank.unmasked is not None:  # there exactly when heads are masked (the columns above)
                before = [blank.unmasked.tokens[rank], f"{blank.unmasked.probabilities[rank]:.4f}"]
            table.add_row(str(rank + 1), *before, token, f"{probability:.4f}", Bar(1.0, 0.0, probability, width=20, color="magenta"))
        parts.append(table)
        if blank.layers:
            layers = Table(
                box=None,
                padding=(0, 1),
                title="read off each layer (the MLM head on its hidden state)",
                title_justify="left",
                title_style="dim",
            )
            layers.add_column("layer", justify="right", style="dim")
            layers.add_column(f"top {layer_guesses}")
            for layer, guesses in enumerate(blank.layers):
                name = "0 (embeddings)" if layer == 0 else str(layer)
                shown = "  ".join(f"{t} {p:.3f}" for t, p in zip(guesses.tokens[:layer_guesses], guesses.probabilities))
                layers.add_row(name, shown)
            parts.append(layers)
    return Group(*parts)


def cloze_report(result: ClozeResult, model: str, source: str) -> Group:
    table = Table(box=None, padding=(0, 1))
    table.add_column("layer", justify="right", style="dim")
    table.add_column("P@1", justify="right")
    table.add_column("", width=20, no_wrap=True)
    table.add_column("P@10", justify="right")
    table.add_column("", width=20, no_wrap=True)
    p1, p10 = result.precision[1], result.precision[10]
    for layer in range(len(p1)):
        table.add_row(
            "0 (embeddings)" if layer == 0 else str(layer),
            f"{p1[layer]:.3f}",
            Bar(1.0, 0.0, float(p1[layer]), width=20, color="magenta"),
            f"{p10[layer]:.3f}",
            Bar(1.0, 0.0, float(p10[layer]), width=20, color="cyan"),
        )
    return Group(
        Text.assemble(("cloze", "bold"), f" · {model} · {source} · {result.queries} queries"),
        table,
        Text(f"output: P@1 {p1[-1]:.3f}, P@10 {p10[-1]:.3f}; layer l+1 is the MLM head on the output of layer l", style="dim"),
    )
