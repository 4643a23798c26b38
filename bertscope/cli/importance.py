"""`bertscope importance` and `bertscope prune`: which heads matter, and a physically smaller model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from bertscope.cli.common import (
    CommandFunction,
    ModelChoice,
    api_call,
    batch_size_option,
    check_hidden_layer,
    figure_option,
    format_options,
    model_options,
    output_option,
    print_csv,
    print_json,
    report_console,
    write_figure,
)
from bertscope.core.analyses.importance_results import METHODS, OBJECTIVES, WEIGHTS
from bertscope.core.errors import BertscopeError
from bertscope.core.model.masks import ABLATIONS

if TYPE_CHECKING:
    from bertscope.api import Corpus
    from bertscope.core.analyses.objectives import Objective
    from bertscope.core.model.masks import Ablation
    from bertscope.core.model.session import Session


def objective_options(command: CommandFunction) -> CommandFunction:
    """What importance is measured on: the objective, its data and its options."""
    options = [
        click.argument("text", required=False),
        click.option(
            "--data",
            default=None,
            metavar="FILE",
            help="Sentences: plain text, CoNLL-U or SentEval TSV. "
            "Default: the shipped sample corpus (the probe objective: a built-in task).",
        ),
        click.option(
            "--format", "data_format", default="auto", show_default=True, type=click.Choice(["auto", "text", "conllu", "senteval"])
        ),
        click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N", help="Read at most N sentences."),
        click.option(
            "--objective",
            "-O",
            "objective",
            required=True,
            type=click.Choice(OBJECTIVES),
            help="mlm (MLM head), classification (classifier, labelled data), probe (--task, --probe-layer), preserve (any encoder).",
        ),
        click.option(
            "--task",
            "-t",
            default=None,
            help="probe objective: a built-in task, the labels of a SentEval file, or upos/xpos/deprel (CoNLL-U).",
        ),
        click.option(
            "--probe-layer",
            type=int,
            default=None,
            metavar="N",
            help="probe objective: hidden-state layer, 0 = embeddings. Default: the last.",
        ),
        click.option(
            "--method",
            default="gradient",
            show_default=True,
            type=click.Choice(METHODS),
            help="gradient: Michel et al.'s E|dL/dgate| (one backward pass per batch); ablation: exact loss change per head and per layer.",
        ),
        click.option(
            "--ablation",
            default="zero",
            show_default=True,
            type=click.Choice(ABLATIONS),
            help="zero: remove the head's output (Michel et al.); uniform: the head attends evenly (Kovaleva et al.).",
        ),
        click.option(
            "--normalize/--no-normalize",
            default=True,
            show_default=True,
            help="Divide each layer's scores by their l2 norm (Michel et al.).",
        ),
        batch_size_option,
        click.option("--seed", type=int, default=0, show_default=True, help="MLM masking, probe training and random projections."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def objective_data(objective: str, text: str | None, data: str | None, data_format: str, limit: int | None, task: str | None) -> Corpus:
    """The sentences the objective is measured on (an api.Corpus), read before the model loads."""
    from bertscope.api import Corpus, check_objective_data, corpus
    from bertscope.core.data.corpus import ReadReport

    if text is None and data is None and objective == "probe":
        return Corpus([], f"built-in task {task}", ReadReport())
    check_objective_data(objective, text, data)
    chosen = corpus(text, data=data, format=data_format, limit=limit)
    return Corpus(list(chosen.sentences), chosen.source, chosen.report)


def load_objective(
    model: ModelChoice,
    objective: str,
    text: str | None,
    data: str | None,
    data_format: str,
    limit: int | None,
    task: str | None,
    probe_layer: int | None,
    batch_size: int | None,
    seed: int,
) -> tuple[Session, Objective]:
    """(session, the objective ready to measure, where its data comes from): the data and the probe layer judged before the model loads."""
    sentences = objective_data(objective, text, data, data_format, limit, task)
    files = model.judge_files()
    if files is not None:  # a head the objective needs, judged from config.json before the model loads
        from bertscope.core.analyses.importance_results import check_objective_heads

        check_objective_heads(objective, files.architecture, files.may_have_mlm_head, files.may_classify)
    if objective == "probe":
        check_hidden_layer(probe_layer, model.shape(), "--probe-layer")
    session = model.open()
    from bertscope import api

    with api_call("preparing the objective"):  # a bar with its clock: the probe objective trains a probe first
        prepared = api.objective(session, objective, sentences, task=task, probe_layer=probe_layer, batch_size=batch_size, seed=seed)
    return session, prepared


@click.command()
@objective_options
@figure_option
@output_option
@format_options
@model_options
def importance(
    text: str | None,
    data: str | None,
    data_format: str,
    limit: int | None,
    objective: str,
    task: str | None,
    probe_layer: int | None,
    method: str,
    ablation: Ablation,
    normalize: bool,
    batch_size: int | None,
    seed: int,
    output_format: str | None,
    figure: str | None,
    model: ModelChoice,
) -> None:
    """How much each head matters for an objective (Michel et al.; Kovaleva et al.).

    gradient: I_h = E|dL/d gate_h| from one backward pass per batch through float head
    gates (for preserve: the first-order movement E||dh/d gate_h||^2, since the distance
    itself has zero gradient); ablation: the exact loss change when each head, and each
    whole layer, is switched off. Higher means more important.
    """
    from bertscope import api

    session, prepared = load_objective(model, objective, text, data, data_format, limit, task, probe_layer, batch_size, seed)
    with api_call("head importance") as progress:
        result = api.importance(session, prepared, method=method, ablation=ablation, normalize=normalize, seed=seed, progress=progress)
    write_figure(figure, result.figure)
    if output_format == "json":
        print_json(result.as_json(session.info.source) | {"data": prepared.source})
        return
    if output_format == "csv":
        rows = (
            [layer, head, f"{result.importance[layer, head]:.8g}", f"{result.raw[layer, head]:.8g}", int((layer, head) in result.pruned)]
            for layer in range(session.num_layers)
            for head in range(session.num_heads)
        )
        print_csv([["layer", "head", "importance", "raw", "pruned"], *rows])
        return

    from bertscope.render.importance import importance_report

    report_console().print(importance_report(result, session.info.source, prepared.source))


@click.command()
@objective_options
@click.option("--curve", is_flag=True, help="Measure the objective as ever more heads are removed.")
@click.option("--step", type=float, default=0.1, show_default=True, help="--curve: the share of all heads removed per step.")
@click.option("--reestimate", is_flag=True, help="--curve: estimate importance again after every step (iterative pruning).")
@click.option(
    "--max-drop",
    type=click.FloatRange(min=0),
    default=0.01,
    show_default=True,
    help="--curve: the largest fall in the objective's metric (accuracy, or cosine for preserve) still called harmless.",
)
@click.option(
    "--fraction", type=float, default=None, metavar="F", help="Prune this share of all heads, 0 < F < 1 (the least important first)."
)
@click.option("--output", "-o", default=None, metavar="DIR", help="--fraction: write the physically pruned model to DIR (new or empty).")
@click.option(
    "--weights",
    "weights",
    default=None,
    type=click.Choice(WEIGHTS),
    help="-o: sliced cuts the heads out (smaller, faster; bertscope or transformers 4 load it; the default); zeroed keeps "
    "the shapes and zeroes their output projection (any transformers loads it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
@figure_option
@model_options
def prune(
    text: str | None,
    data: str | None,
    data_format: str,
    limit: int | None,
    objective: str,
    task: str | None,
    probe_layer: int | None,
    method: str,
    ablation: Ablation,
    normalize: bool,
    batch_size: int | None,
    seed: int,
    curve: bool,
    step: float,
    reestimate: bool,
    max_drop: float,
    fraction: float | None,
    output: str | None,
    weights: str | None,
    as_json: bool,
    figure: str | None,
    model: ModelChoice,
) -> None:
    """Remove the least important heads: a pruning curve, or a physically smaller model.

    --curve removes --step of the heads at a time and measures the objective at each step,
    reporting the largest fraction within --max-drop. --fraction F -o DIR writes a copy of
    the model with those heads sliced out of its weights (listed in config.json's
    pruned_heads and in DIR/bertscope-pruning.json); `--model DIR` loads it, and its
    outputs equal the original with those heads masked (zero ablation). Head numbers stay
    those of the original model. --weights zeroed writes the same shapes with the heads'
    output projection zeroed instead: plain transformers 5 loads it.
    """
    from bertscope.core.analyses.importance_results import check_fraction

    if curve == (fraction is not None):
        raise BertscopeError("give --curve for a pruning curve, or --fraction F (with -o DIR) to prune")
    if fraction is None:  # --curve: one or the other, checked above
        check_fraction(step, "--step")
        if output is not None:
            raise BertscopeError("-o DIR writes a pruned model: use it with --fraction F, not --curve")
    else:
        check_fraction(fraction, "--fraction")
        if figure is not None:
            raise BertscopeError("--figure draws the pruning curve: use it with --curve, not --fraction")
    if weights is not None and output is None:
        raise BertscopeError("--weights says how the copy written with -o DIR keeps the pruned heads: give it with --fraction F -o DIR")
    weights = weights or "sliced"
    if output is not None:
        from pathlib import Path

        from bertscope.core.data.files import check_new_directory

        check_new_directory(Path(output))
        check_pruned_copy_of(model, weights)
    session, prepared = load_objective(model, objective, text, data, data_format, limit, task, probe_layer, batch_size, seed)
    if fraction is None:
        _curve(session, prepared, method, ablation, normalize, step, reestimate, max_drop, seed, as_json, figure)
    else:
        _prune_to(session, prepared, method, ablation, normalize, fraction, output, weights, seed, as_json)


def check_pruned_copy_of(model: ModelChoice, weights: str) -> None:
    """Refuse, from config.json and before any head is scored, a copy this model cannot have (ALBERT's, ModernBERT's
    and MPNet's heads cannot be sliced; an already sliced model cannot be written zeroed)."""
    from bertscope.core.analyses.importance_results import check_pruned_copy
    from bertscope.core.model.model_files import read_config

    files = model.judge_files()
    if files is None:  # --allow-download: the files may not be here yet; the API judges the loaded model
        return
    listed = read_config(files.directory).get("pruned_heads")
    already = isinstance(listed, dict) and any(listed.values())
    check_pruned_copy(weights, files.family, already)


def _curve(
    session: Session,
    prepared: Objective,
    method: str,
    ablation: Ablation,
    normalize: bool,
    step: float,
    reestimate: bool,
    max_drop: float,
    seed: int,
    as_json: bool,
    figure: str | None,
) -> None:
    from bertscope import api

    with api_call("pruning curve") as progress:
        result = api.pruning_curve(
            session,
            prepared,
            method=method,
            ablation=ablation,
            step=step,
            reestimate=reestimate,
            normalize=normalize,
            max_drop=max_drop,
            seed=seed,
            progress=progress,
        )
    source = prepared.source
    write_figure(figure, result.figure)
    if as_json:
        print_json(result.as_json(session.info.source) | {"data": source, "sentences": prepared.sentences})
        return

    from bertscope.render.importance import curve_report

    report_console().print(curve_report(result, session.info.source, source))


def _prune_to(
    session: Session,
    prepared: Objective,
    method: str,
    ablation: Ablation,
    normalize: bool,
    fraction: float,
    output: str | None,
    weights: str,
    seed: int,
    as_json: bool,
) -> None:
    from bertscope import api

    with api_call("pruning") as progress:
        pruning = api.prune(
            session,
            prepared,
            fraction=fraction,
            output=output,
            weights=weights,
            method=method,
            ablation=ablation,
            normalize=normalize,
            seed=seed,
            progress=progress,
        )
    source = prepared.source
    result, mask, chosen = pruning.importance, pruning.mask, pruning.mask.off
    total = session.num_layers * session.num_heads
    payload = pruning.as_json(session.info.source)
    if as_json:
        print_json(payload)
        return

    console = report_console()
    console.print(
        f"[bold]pruned {len(chosen)} of {total} heads[/] ({len(chosen) / total:.0%}) by {method} importance "
        f"for {prepared.name} on {source}: {mask.spec()}",
        highlight=False,
    )
    console.print(
        f"{prepared.metric}: {result.baseline_metric:.4f} → {pruning.metric_after:.4f}; "
        f"loss {result.baseline_loss:.4g} → {pruning.loss_after:.4g}",
        highlight=False,
    )
    written = pruning.written
    if written is not None:
        before, after_p = payload["parameters_before"], payload["parameters_after"]
        console.print(
            f"wrote {payload['output']}: parameters {before:,} → {after_p:,} ({(after_p - before) / before:+.1%}); "
            f"{written.describe_speed()}; "
            f"outputs equal the masked original within {payload['max_abs_difference_vs_masked']:.2g}",
            highlight=False,
        )
        loader = "bertscope --model" if weights == "sliced" else "bertscope --model, or transformers' AutoModel.from_pretrained on"
        console.print(f"load it with: {loader} {payload['output']}", style="dim", highlight=False)
    elif output is None:  # under torchrun only rank 0 writes the copy
        console.print("give -o DIR to write the pruned model", style="dim")
