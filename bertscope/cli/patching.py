"""`bertscope patch`: activation patching between a clean and a corrupted sentence."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

import click

from bertscope.analyses.patching_results import COMPONENTS, DIRECTIONS, METRICS, SWEEPS
from bertscope.base.errors import BertscopeError
from bertscope.cli import options
from bertscope.cli.common import (
    ModelChoice,
    api_call,
    check_hidden_layer,
    check_readable,
    check_text,
    printed,
    report_console,
    write_figure,
)

if TYPE_CHECKING:
    import numpy as np

    from bertscope.analyses.patching_results import PatchingResult


def _pair_of(value: str | None, flag: str) -> tuple[str, str] | None:
    """`A,B` as two names; refused before the model loads when it is not two."""
    if value is None:
        return None
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    if len(names) != 2:
        raise BertscopeError(f"{flag} {value!r}: give two names separated by a comma, e.g. is,are")
    return names


@click.command()
@click.argument("clean")
@click.option("--corrupt", required=True, metavar="TEXT", help="The corrupted sentence: the same number of tokens as CLEAN.")
@options.pair("A second segment of the clean input.")
@click.option("--corrupt-pair", default=None, metavar="TEXT2", help="A second segment of the corrupted input.")
@click.option(
    "--metric",
    default="preserve",
    show_default=True,
    type=click.Choice(METRICS),
    help="mlm: logit difference of --answers at the [MASK]; class: of --classes of a classifier; "
    "probe: of --classes of a --task probe; preserve: how close the output stays to the clean one (any model); "
    "embedding: the cosine of the pooled sentence embedding to the clean one's (any model); "
    "label: logit difference of --classes of a token classifier at --word; "
    "answer: a QA model's start + end logit of the clean answer span minus the corrupted run's (CLEAN the question, --pair the context).",
)
@click.option(
    "--word",
    "-w",
    default=None,
    metavar="N|TEXT",
    help="label: the word whose label is measured, by index (0 = the first) or text. Default: the first word the inputs differ at.",
)
@click.option("--answers", default=None, metavar="A,B", help="mlm: the two answers compared (default: each input's top guess).")
@click.option(
    "--classes", default=None, metavar="A,B", help="class, probe, label: the two classes compared (default: each input's choice)."
)
@click.option("--task", "-t", default=None, help="probe: a built-in sentence task (e.g. subject_number) or, with --data, a SentEval task.")
@options.data("probe: a SentEval file to train the probe on.")
@click.option(
    "--probe-layer", type=int, default=None, metavar="N", help="probe: the hidden state it reads (0 = embeddings). Default: best on dev."
)
@click.option("--sweep", "sweeps", multiple=True, type=click.Choice(SWEEPS), help="What to patch (repeatable). Default: all three.")
@click.option(
    "--direction",
    default="denoise",
    show_default=True,
    type=click.Choice(DIRECTIONS),
    help="denoise: clean activations into the corrupted run; noise: corrupted into the clean run.",
)
@click.option("--per-position", is_flag=True, help="heads: also patch each head at each position.")
@options.cache(
    "probe: the feature and probe cache. Default: $BERTSCOPE_CACHE_DIR, else ~/.cache/bertscope.",
    "probe: compute features afresh and keep nothing.",
)
@options.figure
@options.json_or_csv
@options.model
def patch(
    clean: str,
    corrupt: str,
    pair: str | None,
    corrupt_pair: str | None,
    metric: str,
    word: str | None,
    answers: str | None,
    classes: str | None,
    task: str | None,
    data: str | None,
    probe_layer: int | None,
    sweeps: tuple[str, ...],
    direction: str,
    per_position: bool,
    cache_dir: str | Literal[False] | None,
    output_format: str | None,
    figure: str | None,
    model: ModelChoice,
) -> None:
    """Which heads, layers and positions carry a behaviour: activation patching (Vig et al.; Meng et al.).

    Runs CLEAN and --corrupt (same number of tokens), copies one component's activation from
    one run into the other, and measures how much of the difference in a metric m moves
    with it. Sweeps: each head's output (its slice of the context, at every position);
    each layer's attention and feed-forward writes; the residual stream at each hidden state
    (0 = embeddings) and position. The effect is a share of m(clean) - m(corrupt): 1 when the
    component carries all of it, 0 when none, negative when it works against it.
    """
    check_text(clean, "give the clean sentence", pair)
    check_text(corrupt, "give the corrupted sentence")
    if corrupt_pair is not None:
        check_text(corrupt_pair, "give the corrupted second segment, or leave --corrupt-pair out")
    answer_pair, class_pair = _pair_of(answers, "--answers"), _pair_of(classes, "--classes")
    if metric == "probe" and task is None:
        raise BertscopeError("the probe metric needs a task: --task TASK (e.g. subject_number)")
    if metric == "mlm" and "[MASK]" not in clean:
        raise BertscopeError("the mlm metric reads the MLM head at a [MASK]: write [MASK] in both sentences")
    if word is not None and metric != "label":
        raise BertscopeError("--word chooses the word of the label metric; add --metric label")
    if data is not None:
        check_readable(data)
    check_hidden_layer(probe_layer, model.shape(), "--probe-layer")
    session = model.open()
    import bertscope

    with api_call("patching") as progress:
        result = bertscope.patch(
            session,
            clean,
            corrupt,
            pair=pair,
            corrupt_pair=corrupt_pair,
            metric=metric,
            answers=answer_pair,
            classes=class_pair,
            task=task,
            data=data,
            probe_layer=probe_layer,
            word=word,
            sweep=sweeps or SWEEPS,
            direction=direction,
            per_position=per_position,
            cache_dir=cache_dir,
            progress=progress,
        )
    write_figure(figure, result.figure)  # the first sweep run: heads, else layers, else positions
    if printed(
        output_format, lambda: {"model": session.info.source, "clean": clean, "corrupt": corrupt, **result.as_json()}, lambda: _rows(result)
    ):
        return

    from bertscope.render.patching import patching_report

    report_console().print(patching_report(result, session.info.source))


def _rows(result: PatchingResult) -> Iterator[list[str | int]]:
    """One CSV row per patched component: sweep, layer, head, position, token, component, effect."""
    yield ["sweep", "layer", "head", "position", "token", "component", "effect"]
    if result.heads is not None:
        for (layer, head), effect in _cells(result.heads):
            yield ["heads", layer, head, "", "", "", effect]
        if result.head_positions is not None:
            for (layer, head, position), effect in _cells(result.head_positions):
                yield ["heads", layer, head, position, result.tokens[position], "", effect]
    if result.layers is not None:
        for (layer, component), effect in _cells(result.layers):
            yield ["layers", layer, "", "", "", COMPONENTS[component], effect]
    if result.positions is not None:
        for (layer, position), effect in _cells(result.positions):
            yield ["positions", layer, "", position, result.tokens[position], "", effect]


def _cells(values: np.ndarray) -> Iterator[tuple[tuple[int, ...], str]]:
    import numpy as np

    for index, value in np.ndenumerate(values):
        yield index, f"{value:.6f}"
