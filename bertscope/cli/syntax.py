"""`bertscope syntax`: heads that track dependency relations over a CoNLL-U treebank (Clark et al. 2019 §4)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from bertscope.cli import options
from bertscope.cli.common import ModelChoice, api_call, head_mask, printed, report_console, warn, write_figure

if TYPE_CHECKING:
    from bertscope.model.masks import Ablation

DEFAULT_MIN_COUNT = 100  # as analyses.attention.syntax_results.DEFAULT_MIN_COUNT (not imported: numpy stays out of --help)


@click.command()
@options.data("A CoNLL-U treebank. Default: the sample treebank shipped with bertscope (164 sentences).")
@options.limit()
@click.option(
    "--relations",
    default=None,
    metavar="LIST",
    help="Relations to report, e.g. det,nsubj,obj (UD v2 labels; Clark et al.'s dobj and poss are obj and nmod:poss). Default: all.",
)
@click.option(
    "--min-count",
    type=click.IntRange(min=1),
    default=DEFAULT_MIN_COUNT,
    show_default=True,
    metavar="N",
    help="Flag relations with fewer instances than N as too rare to trust.",
)
@options.mask
@options.batch_size()
@options.report
def syntax(
    data: str | None,
    limit: int | None,
    relations: str | None,
    min_count: int,
    mask_spec: str | None,
    ablation: Ablation,
    batch_size: int | None,
    output_format: str | None,
    figure: str | None,
    model: ModelChoice,
) -> None:
    """Heads that track dependency relations (Clark et al. 2019, What Does BERT Look At?, §4).

    For every relation of the treebank, in both directions, each head's accuracy: how often
    the word it attends to most (word-level attention: a word's sub-word columns summed, its
    rows averaged; [CLS], [SEP] and the word itself left out) is the dependent's head
    (dependent_to_head) or the head's dependent (head_to_dependent). Beside the best head:
    the best fixed-offset baseline (the word -3 to +3 places away). Relations are the
    treebank's labels with subtypes kept apart (nmod:poss, obl:tmod); arcs to the root are
    not counted.
    """
    from bertscope import api

    corpus = api.treebank(data=data, limit=limit)
    wanted = api.check_relations(relations.split(",")) if relations is not None else None
    mask = head_mask(mask_spec, model.shape())
    session = model.open()
    with api_call("syntactic heads") as progress:
        result = api.syntax(session, corpus, mask=mask, ablation=ablation, batch_size=batch_size, progress=progress)
    rows = result.rows(wanted, min_count=min_count)
    if figure is not None:  # the first four relations asked for that the corpus has, or its four most frequent
        drawn = [name for name in wanted or () if name in result.relations][:4] or None
        if wanted and drawn is None:
            warn("none of the relations asked for occur in this corpus: the figure shows its four most frequent")
        under = f" · mask {mask.spec()} ({ablation})" if len(mask) else ""  # the result does not hold what it ran under
        write_figure(figure, lambda: result.figure(drawn, under=under))
    payload = {
        "model": session.info.source,
        "data": corpus.source,
        "sentences": result.sentences,
        "words": result.words,
        "truncated": result.truncated,
        "skipped": len(corpus.report.skipped),
        "mask": mask.spec(),
        "ablation": ablation,
        "min_count": min_count,
        "attention": "word-level: sub-word columns summed, rows averaged; [CLS], [SEP] and the word itself left out",
        "relations": rows,
    }
    if printed(output_format, lambda: payload, lambda: _csv_rows(rows)):
        return

    from bertscope.render.syntax import syntax_table

    console = report_console()
    console.print(
        f"[bold]{session.info.source}[/] · {result.sentences:,} sentences, {result.words:,} words from {corpus.source}"
        + (f" · mask {mask.spec()} ({ablation})" if len(mask) else ""),
        highlight=False,
    )
    console.print(syntax_table(rows, min_count=min_count))
    console.print(
        f"[dim]best head as layer:head, from 0; baseline: the best fixed offset in words; * fewer than {min_count} instances[/]",
        highlight=False,
    )


CSV_HEADER = ["relation", "direction", "count", "few", "best_layer", "best_head", "best_accuracy", "baseline_offset", "baseline_accuracy"]


def _csv_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """A relation and direction a row: its count, its best head and the best fixed offset."""
    return [
        CSV_HEADER,
        *(
            [
                row["relation"],
                row["direction"],
                row["count"],
                int(row["few"]),
                row["best"]["layer"],
                row["best"]["head"],
                f"{row['best']['accuracy']:.6f}",
                row["baseline"]["offset"],
                f"{row['baseline']['accuracy']:.6f}",
            ]
            for row in rows
        ),
    ]
