"""`bertscope patterns`: attention statistics and pattern classes of every head over a corpus."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from bertscope.cli import options
from bertscope.cli.common import ModelChoice, api_call, head_mask, printed, report_console, write_figure

if TYPE_CHECKING:
    from bertscope.analyses.attention.patterns_results import PatternResult
    from bertscope.model.masks import Ablation


@click.command()
@options.corpus()
@options.mask
@options.batch_size()
@click.option(
    "--norms",
    is_flag=True,
    help="Also every share of the value-weighted norms ‖α f(x)‖ (Kobayashi et al. 2020), beside the share of weight.",
)
@options.report
def patterns(
    text: str | None,
    data: str | None,
    data_format: str,
    limit: int | None,
    mask_spec: str | None,
    ablation: Ablation,
    batch_size: int | None,
    norms: bool,
    figure: str | None,
    output_format: str | None,
    model: ModelChoice,
) -> None:
    """Attention statistics and pattern classes of every head (Kovaleva et al.; Clark et al.).

    Over TEXT, or a corpus (--data FILE; default: the sample corpus shipped with bertscope).
    Per head: the share of attention to [CLS], [SEP], punctuation, the token itself, the
    previous and next token and its own segment, the attention entropy (nats) and mean
    distance, averaged over real tokens and sentences; and the share of sentences in which
    the head's map is vertical, diagonal, vertical+diagonal, block or heterogeneous.

    With --norms, the shares to [CLS], [SEP], punctuation, self, previous and next are also
    taken of ‖α_ij f_h(x_j)‖, f_h(x) = (x W_V + b_V) W_O of the head, the bias of W_O left
    out (Kobayashi et al. 2020): how much of what a head moves comes from there, not only
    where it looks. Same forward passes.
    """
    from bertscope import api

    chosen = api.corpus(text, data=data, format=data_format, limit=limit)
    mask = head_mask(mask_spec, model.shape())
    session = model.open()
    from bertscope.analyses.attention.patterns import PATTERNS

    with api_call("attention statistics") as progress:
        result = api.patterns(session, chosen, mask=mask, ablation=ablation, batch_size=batch_size, norms=norms, progress=progress)
    write_figure(figure, result.figure)  # each head's dominant pattern class
    under = {"data": chosen.source, "mask": mask.spec(), "ablation": ablation, "skipped": len(chosen.report.skipped)}
    if printed(output_format, lambda: result.as_json(session.info.source) | under, lambda: _rows(result)):
        if output_format == "csv" and norms:
            from bertscope.analyses.attention.patterns_results import NORM_DEFINITION

            click.echo(f"norm_* columns: the same shares of {NORM_DEFINITION}", err=True)
        return

    from bertscope.render.patterns import patterns_report

    console = report_console()
    counted = f"{result.sentences:,} sentence{'' if result.sentences == 1 else 's'}"
    console.print(
        f"[bold]{session.info.source}[/] · {counted} from {chosen.source} · {result.tokens:,} tokens"
        + (f" · mask {mask.spec()} ({ablation})" if len(mask) else ""),
        highlight=False,
    )
    console.print(patterns_report(result, PATTERNS))


def _rows(result: PatternResult) -> list[list[Any]]:
    """One CSV row per head, the shares as 6 decimals."""
    header, rows = result.head_table()
    return [header, *([f"{value:.6f}" if isinstance(value, float) else value for value in row] for row in rows)]
