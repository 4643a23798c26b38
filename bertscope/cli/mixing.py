"""`bertscope mixing`: how much of each token ends up in each other (context mixing), on a sentence or over a corpus."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from bertscope.analyses.mixing.results import CORPUS_DEFAULT, METHODS, SHARES
from bertscope.base.errors import BertscopeError
from bertscope.cli import options
from bertscope.cli.common import (
    ModelChoice,
    api_call,
    check_index,
    check_readable,
    check_text,
    chosen_theme,
    head_mask,
    printed,
    record_rows,
    report_console,
    warn,
    write_figure,
)

if TYPE_CHECKING:
    from bertscope.analyses.mixing.results import Mixing, MixingAgreement
    from bertscope.api import ProgressCallback
    from bertscope.base.theming import ThemeSpec
    from bertscope.model.masks import Ablation

FLOW_WARNING_S = 10.0  # an attention flow expected to take longer is said so before it runs


def _checked_methods(ctx: click.Context, param: click.Parameter, methods: tuple[str, ...]) -> tuple[str, ...]:
    """Unknown methods are refused while the options are read, before the model loads."""
    for method in methods:
        if method not in METHODS:
            raise BertscopeError(f"unknown context-mixing method {method!r}; use one of: {', '.join(METHODS)} (--method)")
    return methods


@click.command()
@click.argument("text", required=False)
@options.pair()
@click.option(
    "--method",
    "methods",
    multiple=True,
    metavar="M",
    callback=_checked_methods,
    help=f"{', '.join(METHODS)}. One for TEXT (default value-zeroing); repeat it to compare several over --data "
    f"(default: {', '.join(CORPUS_DEFAULT)}; value-zeroing and flow cost far more, and say how long once timed).",
)
@click.option("--layer", "-l", type=int, default=None, help="Show this layer alone (from 0): its own map and the map rolled out to it.")
@options.data("A corpus: compare the methods over its sentences instead.")
@options.corpus_format(help="The corpus file's format.")
@options.limit("Read at most N sentences of --data.")
@options.batch_size()
@options.mask
@options.theme()
@options.report
def mixing(
    text: str | None,
    pair: str | None,
    methods: tuple[str, ...],
    layer: int | None,
    data: str | None,
    data_format: str,
    limit: int | None,
    batch_size: int | None,
    mask_spec: str | None,
    ablation: Ablation,
    theme: str | None,
    figure: str | None,
    output_format: str | None,
    model: ModelChoice,
) -> None:
    """How much of each token ends up in each other token, layer by layer (context mixing).

    On TEXT, one measure: a heatmap per layer (rows take from columns; rows sum to 1) and the
    map rolled out from the input to the last layer. Measures: attention (mean over heads),
    norms (Σ_h ‖α f_h(x)‖, Kobayashi et al. 2020), value-zeroing (Mohebbi et al. 2023: the
    change of token i's layer output when token j's values are zeroed), alti (Ferrando et al.
    2022), rollout and flow (Abnar & Zuidema 2020; flow has no per-layer map). --json prints
    {"method", "definition", "tokens", "per_layer", "rolled"} with each layer's T×T matrix.

    With --data FILE: every pair of methods' Spearman correlation of their rolled-out rows at
    the last layer, averaged over sentences (Mohebbi et al. 2023 §5), and per layer each
    method's share from [CLS], [SEP], punctuation and the token itself. By default attention,
    norms, alti and rollout, each about a bare forward or two; value-zeroing (about 13) and
    flow (grows as the fourth power of a sentence's length) run when named, and once timed on
    the first batch a warning says how long they will take.

    --figure PATH draws TEXT's map rolled out to --layer (default: the last), or over --data
    the agreement table.
    """
    if data is not None:
        if text is not None:
            raise BertscopeError("give either TEXT or --data FILE, not both")
        if pair is not None:
            raise BertscopeError("--pair is for one TEXT; a corpus file's lines are its sentences")
        check_readable(data)
    else:
        if text is None:
            raise BertscopeError("give a sentence to analyse, or a corpus file (--data FILE)")
        check_text(text, "give a sentence to analyse", pair)
        if len(methods) > 1:
            raise BertscopeError("one --method for TEXT; several are compared over a corpus (--data FILE)")
    spec = chosen_theme(theme) if output_format is None else None
    shape = model.shape()
    if layer is not None:
        check_index(layer, shape.num_layers, "layer")
    mask = head_mask(mask_spec, shape)
    from bertscope import api

    if data is not None:
        chosen = api.corpus(data=data, format=data_format, limit=limit)
        session = model.open()
        with api_call("context-mixing agreement") as progress:
            agreement = api.mixing_agreement(
                session,
                chosen,
                method=methods or CORPUS_DEFAULT,
                mask=mask,
                ablation=ablation,
                batch_size=batch_size,
                progress=_saying_estimate(progress),
            )
        write_figure(figure, agreement.figure)
        run = {"model": session.info.source, "data": chosen.source}
        if not printed(output_format, lambda: run | agreement.as_json(), lambda: record_rows(agreement.table())):
            _print_agreement(agreement, session.info.source, chosen.source)
        return
    session = model.open()

    method = methods[0] if methods else "value-zeroing"
    with api_call(f"context mixing ({method})") as progress:
        result = api.mixing(session, text or "", pair=pair, method=method, mask=mask, ablation=ablation, progress=_saying_flow(progress))
    write_figure(figure, lambda: result.figure(layer))
    if printed(output_format, lambda: {"model": session.info.source, **result.as_json()}, lambda: _csv_rows(result)):
        return
    assert spec is not None  # chosen for any output but JSON and CSV
    _print_maps(result, layer, spec, session.info.source)


def _saying_flow(progress: ProgressCallback) -> ProgressCallback:
    """`progress`, which first says how long an attention flow will take where that is long (a bar shows it too)."""
    said: list[bool] = []

    def step(record: Any) -> None:
        partial = record.partial if isinstance(record.partial, dict) else {}
        expected = partial.get("expected_seconds")
        if expected is not None and expected > FLOW_WARNING_S and not said:
            said.append(True)
            warn(f"attention flow over this input takes about {expected:.0f} s (Ctrl-C stops it)")
        if progress is not None:
            progress(record)

    return step


def _saying_estimate(progress: ProgressCallback) -> ProgressCallback:
    """`progress`, which says on stderr how long the costly measures will take, once the first batch has timed them."""
    from bertscope.analyses.mixing.results import CostEstimate

    def step(record: Any) -> None:
        if isinstance(record.partial, CostEstimate):
            warn(f"{record.partial.line()}; Ctrl-C stops it")
        if progress is not None:
            progress(record)

    return step


def _csv_rows(result: Mixing) -> list[list[Any]]:
    """Long form: one row per layer, kind (layer, rolled), receiving token and source token."""
    tokens = result.tokens
    rows: list[list[Any]] = [["method", "layer", "kind", "to", "to_token", "from", "from_token", "value"]]
    kinds = [("rolled", result.rolled)] + ([("layer", result.per_layer)] if result.per_layer is not None else [])
    for layer in range(result.num_layers):
        for kind, matrices in kinds:
            for i, receiving in enumerate(tokens):
                for j, giving in enumerate(tokens):
                    rows.append([result.method, layer, kind, i, receiving, j, giving, f"{matrices[layer][i, j]:.6f}"])
    return rows


LABEL_WIDTH = 12  # the maps' row labels


def _print_maps(result: Mixing, layer: int | None, spec: ThemeSpec, source: str) -> None:
    from rich.console import Console

    from bertscope.analyses.mixing.results import METHOD_NAMES
    from bertscope.render.heatmap import AttentionHeatmap, Cells, Labels, Scale, terminal_window, window_note

    console = report_console()
    tokens = list(result.tokens)
    visible = min(len(tokens), terminal_window(tokens, console.width, label_width=LABEL_WIDTH)) if console.is_terminal else len(tokens)
    name = METHOD_NAMES[result.method]
    masked = f" · mask {result.mask.spec()} ({result.ablation})" if result.mask is not None and len(result.mask) else ""
    console.print(f"[bold]{source}[/] · {name} · {len(tokens)} tokens{masked}", highlight=False)
    shown = range(result.num_layers) if layer is None else [layer]
    maps: list[tuple[str, Any]] = []
    for index in shown:
        if result.per_layer is not None:
            maps.append((f"{name} · layer {index}", result.per_layer[index]))
        if result.per_layer is None or layer is not None:
            maps.append((f"{name} · input → layer {index} (rolled out)", result.rolled[index]))
    if layer is None and result.per_layer is not None:
        last = result.num_layers - 1
        maps.append((f"{name} · input → layer {last} (rolled out)", result.rolled[last]))
    for title, matrix in maps:
        window = matrix[:visible, :visible], tokens[:visible], tokens[:visible]
        console.print(
            AttentionHeatmap(
                *window,
                spec.heatmap,
                title=title,
                scale=Scale("max", quantity="share"),
                cells=Cells(width=None),
                labels=Labels(LABEL_WIDTH),
            )
        )
    if visible < len(tokens):
        console.print(window_note(visible, len(tokens)), style="dim", highlight=False)
    table = ", ".join(f"{share} {value:.1%}" for share, value in zip(SHARES, result.shares()[-1], strict=True))
    console.print(f"rolled out to the last layer, a token's mixing on average from: {table}", highlight=False)
    from rich.markup import escape

    Console(stderr=True).print(f"[dim]cells: {escape(result.definition)}[/]", highlight=False)


def _print_agreement(result: MixingAgreement, source: str, data: str) -> None:
    from rich.table import Table

    console = report_console()
    console.print(f"[bold]{source}[/] · {result.sentences:,} sentences from {data} · {result.tokens:,} tokens", highlight=False)
    agreement = Table(title="Spearman ρ of rolled-out rows at the last layer (mean over sentences)")
    agreement.add_column("")
    for method in result.methods:
        agreement.add_column(method, justify="right")
    for row in result.agreement_rows():
        agreement.add_row(row["method"], *("–" if row[m] is None else f"{row[m]:.2f}" for m in result.methods))
    console.print(agreement)
    shares = Table(title="share of a token's mixing from [CLS] / [SEP] / punctuation / self, per layer (its own map; rolled out)")
    shares.add_column("method")
    shares.add_column("layer", justify="right")
    for name in SHARES:
        shares.add_column(name, justify="right")
    for row in result.table():
        cells = []
        for name in SHARES:
            own, rolled = row[f"layer_{name}"], row[f"rolled_{name}"]
            cells.append(f"{rolled:.0%}" if own is None else f"{own:.0%} ({rolled:.0%})")
        shares.add_row(row["method"], str(row["layer"]), *cells)
    console.print(shares)
