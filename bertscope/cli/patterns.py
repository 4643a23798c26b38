"""`bertscope patterns`: attention statistics and pattern classes of every head over a corpus."""

from __future__ import annotations

import click

from bertscope.cli.common import (
    output_option,
    ModelChoice,
    api_call,
    corpus_sentences,
    data_options,
    format_options,
    head_mask,
    mask_options,
    model_options,
    print_csv,
    print_json,
)


@click.command()
@data_options
@mask_options
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True, help="Sentences per forward pass.")
@output_option
@format_options
@model_options
def patterns(text, data, data_format, limit, mask_spec, ablation, batch_size, output_format, model: ModelChoice):
    """Attention statistics and pattern classes of every head (Kovaleva et al.; Clark et al.).

    Over TEXT, or a corpus (--data FILE; default: the sample corpus shipped with bertscope).
    Per head: the share of attention to [CLS], [SEP], punctuation, the token itself, the
    previous and next token and its own segment, the attention entropy (nats) and mean
    distance, averaged over real tokens and sentences; and the share of sentences in which
    the head's map is vertical, diagonal, vertical+diagonal, block or heterogeneous.
    """
    from bertscope.core.data.corpus import ReadReport

    report = ReadReport()
    sentences, source = corpus_sentences(text, data, data_format, limit, report)
    mask = head_mask(mask_spec, model.shape())
    session = model.open()
    from bertscope import api
    from bertscope.core.analyses.patterns import PATTERNS, STATISTICS

    with api_call("attention statistics") as progress:
        result = api.patterns(session, api.Corpus(sentences, source, report), mask=mask, ablation=ablation,
                                    batch_size=batch_size, progress=progress)
    if output_format == "json":
        payload = result.as_json(session.info.source)
        payload.update({"data": source, "mask": mask.spec(), "ablation": ablation, "skipped": len(report.skipped)})
        print_json(payload)
        return
    if output_format == "csv":
        header = ["layer", "head", "pattern", *(f"share_{name}" for name in PATTERNS), *STATISTICS]
        rows = (
            [layer, head, PATTERNS[result.dominant[layer, head]]]
            + [f"{share:.6f}" for share in result.pattern_shares[layer, head]]
            + [f"{result.statistics[name][layer, head]:.6f}" for name in STATISTICS]
            for layer in range(session.num_layers)
            for head in range(session.num_heads)
        )
        print_csv([header, *rows])
        return
    from rich.console import Console

    from bertscope.render.patterns import patterns_report

    console = Console()
    sentences = f"{result.sentences:,} sentence{'' if result.sentences == 1 else 's'}"
    console.print(f"[bold]{session.info.source}[/] · {sentences} from {source} · {result.tokens:,} tokens"
                  + (f" · mask {mask.spec()} ({ablation})" if len(mask) else ""), highlight=False)
    console.print(patterns_report(result, PATTERNS))
