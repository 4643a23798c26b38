"""Amnesic probing: `erase` a property from a layer inside the forward pass (Elazar et al. 2021, with LEACE)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import click

from bertscope.cli import options
from bertscope.cli.common import ModelChoice, api_call, check_hidden_layer, head_mask, printed, record_rows, report_console, write_figure

if TYPE_CHECKING:
    from bertscope.model.masks import Ablation


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
@options.splits(
    "Training file (the eraser and the probes fit on it): CoNLL-U or SentEval.",
    "Dev file (the probes' L2 strength). Default: the SentEval va split, or 10% of train.",
    "Test file (guardedness and the measure). Default: the te split, or 20% of train.",
    "Read at most N sentences per file; without --data, the size of the generated treebank.",
)
@click.option(
    "--measure",
    default=None,
    metavar="M",
    help="What the model loses: mlm (MLM accuracy; the default with an MLM head), preserve (how far the output moves; the "
    "default otherwise), class (a sequence classifier's accuracy) or probe:TASK (a probe for another task).",
)
@click.option("--probe-layer", type=int, default=None, help="The layer probe:TASK reads (0 = embeddings). Default: the last.")
@options.pooling
@options.min_examples("Leave out (and count) labels with fewer than N training examples.")
@options.batch_size("Sentences per batch of the measure. Default: by length.", metavar=None)
@options.seed("Seed of the held-out splits, the probes and the random control.")
@options.cache()
@options.mask
@options.report
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
    cache_dir: str | Literal[False] | None,
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
        from bertscope.analyses.erasure_results import check_measure_heads

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
            cache_dir=cache_dir,
            mask=mask,
            ablation=ablation,
            batch_size=batch_size,
            seed=seed,
            progress=progress,
        )
    write_figure(figure, result.figure)
    run = {"model": session.source, "data": chosen.source, "mask": mask.spec(), "seed": seed}
    if printed(output_format, lambda: result.as_json() | run, lambda: record_rows(result.table())):
        return

    from bertscope.render.erasure import erasure_report

    report_console().print(erasure_report(result, session.source, chosen.source))
