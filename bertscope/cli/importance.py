"""`bertscope importance` and `bertscope prune`: which heads matter, and a physically smaller model."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import click

from bertscope.analyses.importance.results import METHODS, OBJECTIVES, WEIGHTS
from bertscope.base.errors import BertscopeError
from bertscope.cli import options
from bertscope.cli.common import ModelChoice, api_call, check_hidden_layer, print_json, printed, read_corpus, report_console, write_figure

if TYPE_CHECKING:
    from bertscope.analyses.importance.objectives import Objective
    from bertscope.analyses.importance.results import HeadImportance
    from bertscope.api import Corpus
    from bertscope.model.masks import Ablation
    from bertscope.model.session import Session


@dataclass(frozen=True)
class ObjectiveChoice:
    """What importance is measured on (the objective, its data and its options) and how it is estimated: the
    objective options, handed to the command whole."""

    objective: str
    text: str | None
    data: str | None
    data_format: str
    limit: int | None
    label_column: str | None
    task: str | None
    probe_layer: int | None
    method: str
    ablation: Ablation
    normalize: bool
    batch_size: int | None
    seed: int

    def estimation(self) -> dict[str, Any]:
        """How importance is estimated, as the API's keywords."""
        return {"method": self.method, "ablation": self.ablation, "normalize": self.normalize, "seed": self.seed}

    def sentences(self) -> Corpus:
        """The sentences the objective is measured on (an api.Corpus), read before the model loads."""
        from bertscope.api import Corpus, check_objective_data, objective_corpus
        from bertscope.data.corpus import ReadReport

        if self.text is None and self.data is None and self.objective == "probe":
            return Corpus([], f"built-in task {self.task}", ReadReport())
        check_objective_data(self.objective, self.text, self.data)
        if self.objective in ("token-classification", "qa", "similarity") or self.label_column is not None:
            chosen = objective_corpus(
                self.objective, self.text, data=self.data, format=self.data_format, limit=self.limit, label_column=self.label_column
            )
            return Corpus(list(chosen.sentences), chosen.source, chosen.report)
        return read_corpus(self.text, self.data, self.data_format, self.limit)

    def prepared(self, model: ModelChoice) -> tuple[Session, Objective]:
        """(session, the objective ready to measure): the data and the probe layer judged before the model loads."""
        sentences = self.sentences()
        files = model.judge_files()
        if files is not None:  # a head the objective needs, judged from config.json before the model loads
            from bertscope.analyses.importance.results import check_objective_heads

            check_objective_heads(self.objective, files.architecture, files.may_have_mlm_head, files.may_classify)
        if self.objective == "probe":
            check_hidden_layer(self.probe_layer, model.shape(), "--probe-layer")
        session = model.open()
        from bertscope import api

        with api_call("preparing the objective"):  # a bar with its clock: the probe objective trains a probe first
            prepared = api.objective(
                session, self.objective, sentences, task=self.task, probe_layer=self.probe_layer, batch_size=self.batch_size, seed=self.seed
            )
        return session, prepared


objective_flags = options.stacked(
    options.corpus(
        "Sentences: plain text, CoNLL-U or SentEval TSV; token-classification: CoNLL-2003 (a token and its label a line) or "
        "CoNLL-U; qa: SQuAD-1.1 or 2.0 JSON; similarity: a TSV of sentence1, sentence2, score. Default: the shipped sample "
        "corpus (probe: a built-in task; similarity: the shipped sample pairs).",
        format_help=None,
    ),
    click.option(
        "--objective",
        "-O",
        "objective",
        required=True,
        type=click.Choice(OBJECTIVES),
        help="mlm (MLM head), classification (classifier, labelled data), probe (--task, --probe-layer), preserve (any encoder), "
        "token-classification (token classifier, tagged words), qa (question-answering model, SQuAD JSON), "
        "similarity (sentence pairs with scores), embedding (any encoder).",
    ),
    click.option(
        "--label-column",
        default=None,
        type=click.Choice(("upos", "xpos", "deprel")),
        help="token-classification on a CoNLL-U file: the column its labels are in. Default: upos.",
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
    options.ablation("zero: remove the head's output (Michel et al.); uniform: the head attends evenly (Kovaleva et al.)."),
    click.option(
        "--normalize/--no-normalize",
        default=True,
        show_default=True,
        help="Divide each layer's scores by their l2 norm (Michel et al.).",
    ),
    options.batch_size(),
    options.seed("MLM masking, probe training and random projections."),
)


def objective_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The objective, its data and its options, and how importance is estimated: handed to the command as one
    `objective`, an ObjectiveChoice."""

    @functools.wraps(command)
    def with_objective(**flags: Any) -> Any:
        chosen = ObjectiveChoice(**{field.name: flags.pop(field.name) for field in fields(ObjectiveChoice)})
        return command(objective=chosen, **flags)

    return objective_flags(with_objective)


@click.command()
@objective_options
@options.report
def importance(
    objective: ObjectiveChoice,
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

    session, prepared = objective.prepared(model)
    with api_call("head importance") as progress:
        result = api.importance(session, prepared, **objective.estimation(), progress=progress)
    write_figure(figure, result.figure)
    if printed(output_format, lambda: result.as_json(session.info.source) | {"data": prepared.source}, lambda: _rows(result)):
        return

    from bertscope.render.importance import importance_report

    report_console().print(importance_report(result, session.info.source, prepared.source))


def _rows(result: HeadImportance) -> list[list[Any]]:
    """One CSV row per head: its importance, the raw score, and whether it is pruned."""
    layers, heads = result.importance.shape
    rows = (
        [layer, head, f"{result.importance[layer, head]:.8g}", f"{result.raw[layer, head]:.8g}", int((layer, head) in result.pruned)]
        for layer in range(layers)
        for head in range(heads)
    )
    return [["layer", "head", "importance", "raw", "pruned"], *rows]


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
@options.json
@options.figure
@options.model
def prune(
    objective: ObjectiveChoice,
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
    from bertscope.analyses.importance.results import check_fraction

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

        from bertscope.data.files import check_new_directory

        check_new_directory(Path(output))
        check_pruned_copy_of(model, weights)
    session, prepared = objective.prepared(model)
    if fraction is None:
        _curve(session, prepared, objective, step, reestimate, max_drop, as_json, figure)
    else:
        _prune_to(session, prepared, objective, fraction, output, weights, as_json)


def check_pruned_copy_of(model: ModelChoice, weights: str) -> None:
    """Refuse, from config.json and before any head is scored, a copy this model cannot have (ALBERT's, ModernBERT's
    and MPNet's heads cannot be sliced; an already sliced model cannot be written zeroed)."""
    from bertscope.analyses.importance.results import check_pruned_copy
    from bertscope.model.model_files import read_config

    files = model.judge_files()
    if files is None:  # --allow-download: the files may not be here yet; the API judges the loaded model
        return
    listed = read_config(files.directory).get("pruned_heads")
    already = isinstance(listed, dict) and any(listed.values())
    check_pruned_copy(weights, files.family, already)


def _curve(
    session: Session,
    prepared: Objective,
    objective: ObjectiveChoice,
    step: float,
    reestimate: bool,
    max_drop: float,
    as_json: bool,
    figure: str | None,
) -> None:
    from bertscope import api

    with api_call("pruning curve") as progress:
        result = api.pruning_curve(
            session, prepared, step=step, reestimate=reestimate, max_drop=max_drop, **objective.estimation(), progress=progress
        )
    source = prepared.source
    write_figure(figure, result.figure)
    if as_json:
        print_json(result.as_json(session.info.source) | {"data": source, "sentences": prepared.sentences})
        return

    from bertscope.render.importance import curve_report

    report_console().print(curve_report(result, session.info.source, source))


def _prune_to(
    session: Session, prepared: Objective, objective: ObjectiveChoice, fraction: float, output: str | None, weights: str, as_json: bool
) -> None:
    from bertscope import api

    with api_call("pruning") as progress:
        pruning = api.prune(
            session, prepared, fraction=fraction, output=output, weights=weights, **objective.estimation(), progress=progress
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
        f"[bold]pruned {len(chosen)} of {total} heads[/] ({len(chosen) / total:.0%}) by {objective.method} importance "
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
