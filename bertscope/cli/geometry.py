"""`bertscope geometry` and `bertscope compare`: representation geometry per layer, and two models side by side."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import click

from bertscope.analyses.geometry.results import UNITS
from bertscope.base.errors import BertscopeError, ModelLoadError
from bertscope.cli import options
from bertscope.cli.common import (
    ModelChoice,
    api_call,
    check_hidden_layer,
    chosen_theme,
    head_mask,
    print_json,
    read_corpus,
    report_console,
    write_figure,
)

if TYPE_CHECKING:
    from bertscope.model.masks import Ablation


sample_options = options.stacked(  # which rows are sampled and how many: geometry's and compare's
    click.option(
        "--unit",
        default="auto",
        show_default=True,
        type=click.Choice(["auto", *UNITS]),
        help="Rows: every token; CoNLL-U words (first sub-word); or sentences (mean of their tokens). "
        "auto: word for CoNLL-U, sentence for SentEval, else token.",
    ),
    click.option(
        "--max-rows",
        type=click.IntRange(min=4),
        default=4000,
        show_default=True,
        metavar="N",
        help="At most N rows, a seeded uniform sample of the corpus (memory stays bounded).",
    ),
    options.seed("Which rows the sample keeps."),
    options.batch_size(),
)


@click.command()
@options.corpus()
@sample_options
@click.option("--neighbours", "-k", type=click.IntRange(min=1), default=10, show_default=True, help="k of the neighbourhood overlap.")
@click.option(
    "--layer", "-l", type=int, default=None, help="Hidden-state layer whose PCA scatter is drawn (0 = embeddings). Default: the last."
)
@click.option(
    "--colour-by",
    "--color-by",
    "colour_by",
    default=None,
    metavar="LABEL",
    help="Colour the scatter by upos, xpos or deprel (CoNLL-U words), token (kind of token) or label (SentEval). "
    "Default: the first the data has.",
)
@click.option("--points", is_flag=True, help="With --json: every layer's 2-D PCA coordinates and each row's text and labels.")
@options.json
@options.theme()
@options.mask
@options.figure
@options.output
@options.model
def geometry(
    text: str | None,
    data: str | None,
    data_format: str,
    limit: int | None,
    unit: str,
    max_rows: int,
    seed: int,
    batch_size: int | None,
    neighbours: int,
    layer: int | None,
    colour_by: str | None,
    points: bool,
    as_json: bool,
    theme: str | None,
    mask_spec: str | None,
    ablation: Ablation,
    figure: str | None,
    model: ModelChoice,
) -> None:
    """Representation geometry per layer over a corpus (van Aken; Kornblith; Valeriani et al.).

    On a seeded sample of at most --max-rows tokens, words or sentences: each layer's PCA
    projection (a scatter coloured by label), linear CKA layer × layer (and its debiased
    form in JSON), the TwoNN intrinsic dimension, and the overlap of each row's k nearest
    neighbours between consecutive layers. Layers are hidden states: 0 is the embeddings.
    """
    colormap = None if as_json else chosen_theme(theme).heatmap
    chosen = read_corpus(text, data, data_format, limit)
    shape = model.shape()
    check_hidden_layer(layer, shape)
    mask = head_mask(mask_spec, shape)
    session = model.open()
    from bertscope import api

    with api_call("geometry") as progress:
        result = api.geometry(
            session,
            chosen,
            unit=unit,
            max_rows=max_rows,
            neighbours=neighbours,
            seed=seed,
            batch_size=batch_size,
            mask=mask,
            ablation=ablation,
            progress=progress,
        )
    if colour_by is not None and colour_by not in result.labels:
        have = ", ".join(result.labels) or "none"
        raise BertscopeError(f"--colour-by {colour_by}: these {result.unit}s have no such label; labels here: {have}")
    write_figure(figure, lambda: result.figure("scatter", layer=layer, label=colour_by))  # the PCA scatter of --layer
    if as_json:
        print_json(result.as_json(session.info.source, points=points) | {"data": chosen.source})
        return

    from bertscope.render.geometry import geometry_report

    console = report_console()
    glyphs = console.no_color or console.color_system not in ("256", "truecolor")
    masked = f" · mask {mask.spec()} ({ablation})" if len(mask) else ""
    console.print(
        f"[bold]{session.info.source}[/] · {result.sentences:,} sentences from {chosen.source} · "
        f"{result.size:,} of {result.seen:,} {result.unit}s{masked}",
        highlight=False,
    )
    shown = session.num_layers if layer is None else layer
    assert colormap is not None  # chosen for any output but JSON
    console.print(
        geometry_report(
            result, colormap, layer=shown, label=colour_by, glyphs=glyphs, scatter_width=min(console.width, 100), scatter_height=22
        )
    )


@click.command()
@options.corpus()
@click.option(
    "--model-b",
    "model_b",
    required=True,
    metavar="B",
    help="The model to compare with: a directory or a Hugging Face name in the cache (same tokenizer as --model).",
)
@sample_options
@click.option(
    "--probe",
    "probe_tasks",
    multiple=True,
    metavar="TASK",
    help="Probe every layer of both models for TASK (repeatable): a built-in task, upos/xpos/deprel with a CoNLL-U --data, "
    "or the labels of a SentEval --data.",
)
@options.json
@options.theme()
@options.figure
@options.output
@options.model
def compare(
    text: str | None,
    data: str | None,
    data_format: str,
    limit: int | None,
    model_b: str,
    unit: str,
    max_rows: int,
    seed: int,
    batch_size: int | None,
    probe_tasks: tuple[str, ...],
    as_json: bool,
    theme: str | None,
    figure: str | None,
    model: ModelChoice,
) -> None:
    """Compare model A (--model) with model B (--model-b): same tokenizer, e.g. before and after fine-tuning.

    Per head, the cosine similarity of its attention maps in A and B averaged over the
    sentences (Kovaleva et al. 2019, Fig. 4); linear CKA between every layer of A and
    every layer of B on the same sampled rows; with --probe, a probe per layer on both.
    """
    colormap = None if as_json else chosen_theme(theme).heatmap
    chosen = read_corpus(text, data, data_format, limit)
    other_model = dataclasses.replace(model, name=model_b)
    model.judge_files()
    try:
        other_model.judge_files()
    except ModelLoadError as error:
        if error.setting == "model":
            error.setting = "model_b"  # the fault is in --model-b
        raise
    from bertscope import api
    from bertscope.analyses.geometry.compare import probe_data

    probes = [(task, probe_data(task, list(chosen.sentences))) for task in probe_tasks]
    session = model.open()
    other = dataclasses.replace(other_model, device=str(session.device)).open()
    with api_call("comparing") as progress:
        result = api.compare(
            session,
            other,
            chosen,
            unit=unit,
            max_rows=max_rows,
            seed=seed,
            batch_size=batch_size,
            probe=probes,
            progress=progress,
        )
    write_figure(figure, result.figure)  # each head's attention cosine, or CKA where the heads differ
    if as_json:
        print_json(result.as_json() | {"data": chosen.source})
        return

    from bertscope.render.geometry import comparison_report

    console = report_console()
    glyphs = console.no_color or console.color_system not in ("256", "truecolor")
    console.print(
        f"[bold]A[/] {result.model_a}\n[bold]B[/] {result.model_b}\n"
        f"{result.sentences:,} sentences from {chosen.source} · {result.tokens:,} tokens",
        highlight=False,
    )
    assert colormap is not None  # chosen for any output but JSON
    console.print(comparison_report(result, colormap, glyphs=glyphs))
