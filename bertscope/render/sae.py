"""Rich views of sparse autoencoders: what training reports, and a corpus's strongest features (no torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from bertscope.analyses.sae.results import FeatureContext, SAEFeatures, SAETraining

SHOWN_FEATURES = 20


def training_report(result: SAETraining, source: str) -> Group:
    """The SAE's shape and data, the held-out figures, and the running figures of each epoch."""
    held = [
        f"FVU {result.fvu:.3f}",
        f"L0 {result.l0:.1f}",
        f"dead {result.dead_share:.1%}",
        f"preserve {result.preserve:.4f}",
    ]
    if result.mlm_loss_recovered is not None:
        held.append(f"MLM loss recovered {result.mlm_loss_recovered:.1%}")
    epochs = Table(box=None, padding=(0, 1))
    for name in ("epoch", "FVU", "L0", "dead"):
        epochs.add_column(name, justify="right")
    for row in result.history:
        epochs.add_row(str(row["epoch"]), f"{row['fvu']:.3f}", f"{row['l0']:.1f}", f"{row['dead']:.1%}")
    return Group(
        Text.assemble(
            (f"{result.d_sae:,} features", "bold"),
            f" (k {result.k}) on hidden state {result.layer} of {result.model} · {result.sentences:,} sentences "
            f"({result.tokens:,} tokens) from {source} · {result.epochs} epochs, {result.seconds:.0f} s",
        ),
        Text.assemble(
            ("held out", "bold"), f" ({result.held_out_sentences:,} sentences, {result.held_out_tokens:,} tokens): ", " · ".join(held)
        ),
        Text("running figures on the training tokens, at each epoch's end", style="dim"),
        epochs,
        Text(f"wrote {result.directory} (cfg.json, sae_weights.safetensors)", style="dim"),
    )


def shown_features(result: SAEFeatures, count: int = SHOWN_FEATURES) -> list[int]:
    """The features a report shows: those that fired, the best-named first where there are labels (highest F1),
    else the most frequent."""
    return result.ranked()[:count]


def _contexts(contexts: tuple[FeatureContext, ...], width: int = 3) -> Text:
    """Each context as its token, bold, with `width` tokens either side and its activation; `; ` between them."""
    shown = Text()
    for number, context in enumerate(contexts):
        left = context.tokens[max(0, context.position - width) : context.position]
        right = context.tokens[context.position + 1 : context.position + 1 + width]
        if number:
            shown.append("; ")
        shown.append(" ".join([*left, ""]))
        shown.append(context.token, style="bold underline")
        shown.append(" ".join(["", *right]) + f" ({context.activation:.2f})")
    return shown


def features_report(result: SAEFeatures, source: str, count: int = SHOWN_FEATURES) -> Group:
    """The corpus's figures, then a table of the features shown: density, best label, strongest contexts."""
    table = Table(box=None, padding=(0, 1))
    table.add_column("feature", justify="right")
    table.add_column("density", justify="right")
    if result.best is not None:
        table.add_column("best label")
        table.add_column("precision", justify="right")
        table.add_column("recall", justify="right")
    table.add_column("strongest tokens (activation)")
    shown = shown_features(result, count)
    for feature in shown:
        cells = [str(feature), f"{result.density[feature]:.2%}"]
        if result.best is not None:
            best = result.best[feature]
            cells += [f"{best.scheme}:{best.label}", f"{best.precision:.2f}", f"{best.recall:.2f}"] if best else ["", "", ""]
        table.add_row(*cells, _contexts(result.top[feature][:3]))
    lines = [
        Text.assemble(
            (f"{result.d_sae:,} features", "bold"),
            f" (k {result.k}) on hidden state {result.layer} · {result.sentences:,} sentences ({result.tokens:,} tokens) from {source}",
        ),
        Text(f"FVU {result.fvu:.3f} · L0 {result.l0:.1f} · dead {result.dead_share:.1%} (never fired here)"),
    ]
    if result.pure is not None:
        lines.append(
            Text(
                f"{result.pure:,} label-pure features: a UPOS, relation or word-piece label takes ≥ 90% of its firings "
                "(at least 10 firings; labels of at most half of the tokens)"
            )
        )
    order = "best-named first (F1 of their best label)" if result.best is not None else "most frequent first"
    more = len(result.alive) - len(shown)
    lines.append(Text(f"{len(shown)} features, {order}" + (f"; {more:,} more with --json or --csv" if more > 0 else ""), style="dim"))
    return Group(*lines, table)
