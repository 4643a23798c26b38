"""Amnesic probing: `erase` a property from a layer inside the forward pass (Elazar et al. 2021, with LEACE)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from bertscope.cli.common import (
    ModelChoice,
    api_call,
    check_hidden_layer,
    figure_option,
    format_options,
    head_mask,
    mask_options,
    model_options,
    output_option,
    print_csv,
    print_json,
    report_console,
    write_figure,
)

if TYPE_CHECKING:
    from bertscope.core.model.masks import Ablation


@click.command()
@click.option(
    "--task", "-t", required=True, help="The property to erase: upos, xpos, deprel (CoNLL-U), a SentEval task, or a built-in task."
)
@click.option(
    "--layer",
    "-l",
    type=int,
    default=None,
    help="Hidden-state layer to erase it from (0 = embeddings, l+1 = the output of layer l). Default: the last.",
)
@click.option("--data", default=None, metavar="TRAIN", help="Training file (the eraser and the probes fit on it): CoNLL-U or SentEval.")
@click.option(
    "--dev", default=None, metavar="DEV", help="Dev file (the probes' L2 strength). Default: the SentEval va split, or 10% of train."
)
@click.option(
    "--test", default=None, metavar="TEST", help="Test file (guardedness and the measure). Default: the te split, or 20% of train."
)
@click.option("--format", "data_format", default="auto", show_default=True, type=click.Choice(["auto", "conllu", "senteval"]))
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Read at most N sentences per file; without --data, the size of the generated treebank.",
)
@click.option(
    "--measure",
    default=None,
    metavar="M",
    help="What the model loses: mlm (MLM accuracy; the default with an MLM head), preserve (how far the output moves; the "
    "default otherwise), class (a sequence classifier's accuracy) or probe:TASK (a probe for another task).",
)
@click.option("--probe-layer", type=int, default=None, help="The layer probe:TASK reads (0 = embeddings). Default: the last.")
@click.option("--word-pooling", default="first", show_default=True, type=click.Choice(["first", "mean"]), help="A word from its sub-words.")
@click.option(
    "--sentence-pooling", default="cls", show_default=True, type=click.Choice(["cls", "mean"]), help="A sentence from its tokens."
)
@click.option(
    "--min-examples",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    metavar="N",
    help="Leave out (and count) labels with fewer than N training examples.",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Sentences per batch of the measure. Default: by length.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the held-out splits, the probes and the random control.")
@click.option("--cache-dir", default=None, metavar="DIR", help="Feature cache. Default: $BERTSCOPE_CACHE_DIR, else ~/.cache/bertscope.")
@click.option("--no-cache", is_flag=True, help="Compute features afresh and keep nothing.")
@mask_options
@figure_option
@output_option
@format_options
@model_options
def erase(
    task: str,
    layer: int | None,
    data: str | None,
    dev: str | None,
    test: str | None,
    data_format: str,
    limit: int | None,
    measure: str | None,
    probe_layer: int | None,
    word_pooling: str,
    sentence_pooling: str,
    min_examples: int,
    batch_size: int | None,
    seed: int,
    cache_dir: str | None,
    no_cache: bool,
    mask_spec: str | None,
    ablation: Ablation,
    output_format: str | None,
    figure: str | None,
    model: ModelChoice,
) -> None:
    """Erase a property from a layer as the model runs, and see what it loses (amnesic probing, LEACE).

    LEACE (Belrose et al. 2023) is fitted on the training split's features at --layer; then, on the test split:
    a fresh probe for the task at that layer and above (does it fall to the majority class? does the model compute
    it again?), and the --measure as it is, erased, and with as many random directions removed (Elazar et al.'s control).
    """
    from bertscope import api

    api.check_erasure(task, measure)
    files = model.judge_files()
    if files is not None:  # a head the measure needs, judged from config.json before the model loads
        from bertscope.core.analyses.erasure_results import check_measure_heads

        check_measure_heads(measure, files.architecture, files.may_have_mlm_head, files.may_classify)
    shape = model.shape()
    check_hidden_layer(layer, shape)
    check_hidden_layer(probe_layer, shape, "--probe-layer")
    chosen = api.erasure_sentences(task, measure, data=data, dev=dev, test=test, format=data_format, limit=limit)
    mask = head_mask(mask_spec, shape)
    session = model.open()
    with api_call("erasure") as progress:
        result = api.erase(
            session,
            task,
            chosen,
            layer=layer,
            measure=measure,
            probe_layer=probe_layer,
            word_pooling=word_pooling,
            sentence_pooling=sentence_pooling,
            min_examples=min_examples,
            cache_dir=False if no_cache else cache_dir,
            mask=mask,
            ablation=ablation,
            batch_size=batch_size,
            seed=seed,
            progress=progress,
        )
    write_figure(figure, result.figure)
    if output_format == "json":
        print_json(result.as_json() | {"model": session.source, "data": chosen.source, "mask": mask.spec(), "seed": seed})
        return
    rows = result.table()
    if output_format == "csv":
        columns = list(rows[0])
        print_csv([columns, *([row[column] for column in columns] for row in rows)])
        return

    from bertscope.render.erasure import erasure_report

    report_console().print(erasure_report(result, session.source, chosen.source))
