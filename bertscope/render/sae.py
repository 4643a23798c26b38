"""Rich views of sparse autoencoders: what training reports, a corpus's strongest features, the heads that write a
feature and the features a probe reads or an erasure removes (no torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from bertscope.analyses.sae.reading_results import SAEDirections, SAEHeads
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


def heads_report(result: SAEHeads, source: str, top: int = 10) -> Group:
    """The feature's firing and pre-activation, its parts' totals (which add up to it), and the heads that write it
    most, either way."""
    share = (lambda value: f"{value / result.preactivation:+.0%}") if result.preactivation else (lambda value: "")
    totals = Table(box=None, padding=(0, 1))
    for name, justify in (("part", "left"), ("contribution", "right"), ("share", "right")):
        totals.add_column(name, justify=justify)  # type: ignore[arg-type]
    for name, value in result.parts().items():
        totals.add_row(name, f"{value:+.4f}", share(value))
    totals.add_row(Text("pre-activation", style="bold"), Text(f"{result.preactivation:.4f}", style="bold"), "")
    ranked = Table(box=None, padding=(0, 1))
    for name in ("head", "contribution", "share"):
        ranked.add_column(name, justify="right")
    for layer, head, value in result.ranked()[:top]:
        ranked.add_row(f"{layer}:{head}", f"{value:+.4f}", share(value))
    feed_forward = " · ".join(f"{layer}: {value:+.3f}" for layer, value in enumerate(result.feed_forward.tolist()))
    masked = f" · mask {result.mask}" if result.mask else ""
    kind = result.linearisation.split(":")[0]
    return Group(
        Text.assemble(
            (f"feature {result.feature}", "bold"),
            f" of {result.d_sae:,} at hidden state {result.layer} · {result.sentences:,} sentences from {source}{masked}",
        ),
        Text(
            f"fired on {result.firing:,} of {result.tokens:,} tokens ({result.firing / max(result.tokens, 1):.1%}); "
            f"mean activation {result.activation:.3f}; each part's direct contribution to the pre-activation, "
            "mean over those tokens"
        ),
        totals,
        Text(f"feed-forward by layer: {feed_forward}", style="dim"),
        Text(f"top {min(top, result.heads.size)} of {result.heads.size} heads by |contribution| (layer:head)", style="bold"),
        ranked,
        Text(
            f"{kind}: "
            + (
                "each LayerNorm after a write is linearised at the token's own σ (Kobayashi et al. 2021); "
                if kind == "post-LN"
                else "blocks add to the residual stream; "
            )
            + f"a head's effect through later blocks is theirs · residual {result.residual:.1e}",
            style="dim",
        ),
    )


def directions_report(result: SAEDirections, source: str, top: int = 10) -> Group:
    """The counts a paper reports (features a probe reads, features an erasure removes), with the chance levels, and
    the features of each list, the strongest first."""
    from bertscope.analyses.sae.reading_results import ERASED_SHARE, READ_COSINE

    def listing(by: str) -> Table:
        table = Table(box=None, padding=(0, 1))
        for name in ("feature", "|cos|", "class", "erased"):
            table.add_column(name, justify="right" if name != "class" else "left")
        for feature in result.ranked(by)[:top]:
            row = result.row(feature)
            sign = "+" if row["sign"] > 0 else "−"
            table.add_row(str(feature), f"{row['cosine']:.3f}", f"{sign}{row['class']}", f"{row['erased']:.3f}")
        return table

    counted = "that fired on the data" if result.alive is not None else ""
    return Group(
        Text.assemble(
            (f"{result.d_sae:,} features", "bold"),
            f" at hidden state {result.layer} against {result.task} ({len(result.classes)} classes) · {source} · probe dev accuracy "
            f"{result.probe_accuracy:.3f} ({result.train_words:,} training words); LEACE removes {result.rank} directions",
        ),
        Text(
            f"of {result.counted:,} features {counted}: {result.read:,} read by the probe (max |cos| to a class direction ≥ "
            f"{READ_COSINE}; random directions: {result.chance_cosine:.3f} at the 99th percentile), {result.removed:,} taken away "
            f"by the erasure (≥ {ERASED_SHARE:.0%} of the decoder row in the removed directions; random: {result.chance_erased:.0%})"
        ),
        Text("closest to a class direction (+: towards the class, −: away from it)", style="bold"),
        listing("cosine"),
        Text("most in the erased directions (the share of the unit decoder row in them)", style="bold"),
        listing("erased"),
    )
