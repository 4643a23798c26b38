"""`bertscope fill` and `bertscope attribute`: masked-LM knowledge probes and token attribution."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import click

from bertscope.analyses.attribution_results import METHODS, SCORES
from bertscope.base.errors import BertscopeError
from bertscope.cli import options
from bertscope.cli.common import (
    ModelChoice,
    api_call,
    check_hidden_layer,
    check_readable,
    check_text,
    chosen_theme,
    head_mask,
    notes_as_warnings,
    print_json,
    report_console,
    write_figure,
)

if TYPE_CHECKING:
    from bertscope.model.masks import Ablation, HeadMask
    from bertscope.model.session import Session


@click.command()
@click.argument("text", required=False)
@click.option("--top", "-k", type=click.IntRange(1, 1000), default=10, show_default=True, help="Guesses per [MASK].")
@click.option("--layers/--no-layers", default=True, show_default=True, help="Also read the guesses off every layer.")
@click.option(
    "--cloze",
    default=None,
    metavar="FILE",
    help="Score a cloze file instead: query<TAB>answer lines or LAMA JSON lines; `sample` for the shipped one.",
)
@options.batch_size("At most N cloze queries per forward pass (default: as many as the caps on tokens and on the MLM head's scores allow).")
@options.mask
@options.json
@options.output
@options.model
def fill(
    text: str | None,
    top: int,
    layers: bool,
    cloze: str | None,
    batch_size: int | None,
    mask_spec: str | None,
    ablation: Ablation,
    as_json: bool,
    model: ModelChoice,
) -> None:
    """Fill in every [MASK] of TEXT with the masked-LM head (Petroni et al. 2019, LAMA).

    Shows the top guesses with their probabilities, the same read off every layer (the MLM
    head applied to each hidden state; layer 0 = embeddings, l+1 = output of layer l), and
    with --mask the guesses before → after switching heads off. With --cloze FILE, the
    precision at 1 and 10 of each query's one-token gold answer, per layer. Needs a model
    saved with its MLM head (e.g. BertForMaskedLM); the bundled model has none.
    """
    if text is not None and cloze is not None:
        raise BertscopeError("give either TEXT or --cloze FILE, not both")
    if text is None and cloze is None:
        raise BertscopeError('give a TEXT with [MASK] in it, e.g. "Dante was born in [MASK].", or --cloze FILE')
    check_text(text, "give a sentence with [MASK] where the missing word goes")
    if cloze is not None and cloze != "sample":
        check_readable(cloze)
    shape = model.shape()
    if text is not None and shape.vocab_size is not None and top > shape.vocab_size:
        raise BertscopeError(f"--top {top} is more guesses than this model has tokens ({shape.vocab_size:,}); give at most that")
    mask = head_mask(mask_spec, shape)
    session = model.open()
    from bertscope.analyses.mlm import require_mlm_head

    require_mlm_head(session)
    if cloze is not None:
        return _cloze(session, cloze, mask, ablation, batch_size, as_json)
    assert text is not None  # TEXT or --cloze, checked above
    from bertscope import api

    with notes_as_warnings():
        result = api.fill(session, text, top=top, layers=layers, mask=mask, ablation=ablation)
    if as_json:
        print_json({"model": session.info.source, "text": text, **result.as_json()})
        return

    from bertscope.render.mlm import fill_report

    report_console().print(fill_report(result, session.info.source))


def _cloze(session: Session, path: str, mask: HeadMask, ablation: Ablation, batch_size: int | None, as_json: bool) -> None:
    from bertscope import api
    from bertscope.analyses.mlm import sample_cloze

    source = sample_cloze() if path == "sample" else path
    with api_call("cloze queries") as progress:
        result = api.cloze(session, data=source, batch_size=batch_size, mask=mask, ablation=ablation, progress=progress)
    if as_json:
        payload = {
            "model": session.info.source,
            "data": str(source),
            "mask": mask.spec(),
            "ablation": ablation,
            "skipped": result.skipped,
            **result.as_json(),
        }
        print_json(payload)
        return

    from bertscope.render.mlm import cloze_report

    report_console().print(cloze_report(result, session.info.source, str(source)))


@click.command()
@click.argument("text")
@options.pair()
@click.option("--method", default="integrated-gradients", show_default=True, type=click.Choice(METHODS))
@click.option(
    "--target",
    "label",
    default=None,
    metavar="LABEL",
    help="The token (MLM), class (classifier, probe) or label (token classifier, at --word) to explain; for a QA model "
    "start, end or span (start + end, the default) of the predicted answer. Default: the model's top choice.",
)
@click.option("--position", type=int, default=None, help="Which [MASK], by token position. Default: the first.")
@click.option(
    "--word",
    "-w",
    default=None,
    metavar="N|TEXT",
    help="A token classifier's word whose label is explained: its index (0 = the first word) or its text.",
)
@click.option(
    "--similarity",
    is_flag=True,
    help="Explain the cosine of TEXT's and --pair's sentence embeddings (the default on a model with no head of its own).",
)
@click.option(
    "--probe",
    "probe_task",
    default=None,
    metavar="TASK",
    help="Explain a probe's decision: a built-in task (e.g. subject_number) or, with --data, a SentEval task.",
)
@click.option("--data", default=None, metavar="FILE", help="SentEval file (split<TAB>label<TAB>sentence) to train the probe on.")
@click.option("--layer", "-l", type=int, default=None, help="Hidden-state layer the probe reads (0 = embeddings). Default: best on dev.")
@options.sentence_pooling("How the probe reads a sentence.")
@click.option("--score", default="log-probability", show_default=True, type=click.Choice(SCORES), help="The output explained.")
@click.option(
    "--ig-steps",
    type=click.IntRange(1, 4096),
    default=None,
    help="Integrated-gradients steps. Default: 32, doubled up to 256 until the completeness error is under 5%.",
)
@click.option("--steps", type=click.IntRange(1, 4096), hidden=True, deprecated="--steps is now --ig-steps, for one release more")
@options.cache(
    "Probe feature cache. Default: $BERTSCOPE_CACHE_DIR, else ~/.cache/bertscope.", "Compute probe features afresh and keep nothing."
)
@options.mask
@options.json
@options.theme("Colours of the shaded sentence: a theme name or file.")
@options.figure
@options.model
def attribute(
    text: str,
    pair: str | None,
    method: str,
    label: str | None,
    position: int | None,
    word: str | None,
    similarity: bool,
    probe_task: str | None,
    data: str | None,
    layer: int | None,
    sentence_pooling: str,
    score: str,
    ig_steps: int | None,
    steps: int | None,
    cache_dir: str | Literal[False] | None,
    mask_spec: str | None,
    ablation: Ablation,
    as_json: bool,
    theme: str | None,
    figure: str | None,
    model: ModelChoice,
) -> None:
    """Which tokens of TEXT a decision rests on: an MLM guess, a class, a label, an answer, a similarity, or a probe's.

    The decision is, in order: a probe's (--probe TASK; Mohebbi et al. 2021), a token
    classifier's label at --word, a QA model's predicted answer span (TEXT the question, --pair
    the context; log p(start) + log p(end), or one with --target start|end), a sequence
    classifier's class, the MLM head's guess at a [MASK], or, with --pair on a model with none
    of those heads (or --similarity), the cosine of the two sentences' embeddings, each encoded
    alone and pooled as the model's sentence-transformers files say. Methods: gradient (saliency
    norm), gradient-x-input, integrated-gradients (baseline: [PAD] word embeddings with
    [CLS], [SEP] and [MASK] kept; reports the completeness error), attention-rollout and
    attention-flow (Abnar & Zuidema 2020), and norms, value-zeroing and alti rolled out from the
    input (the row of the position the decision reads; see `bertscope mixing`). Works on the
    bundled model for probe decisions.
    """
    ig_steps = ig_steps if steps is None else steps  # --steps, the old spelling of --ig-steps
    check_text(text, "give a sentence to explain", pair)
    if (data is not None or layer is not None) and probe_task is None:
        raise BertscopeError("--data and --layer choose a probe: add --probe TASK")
    if similarity and pair is None:
        raise BertscopeError("--similarity explains the cosine of two sentences: give the second with --pair")
    if word is not None and not word.strip():
        raise BertscopeError("--word is empty; give a word's index (0 = the first) or its text")
    if data is not None:
        check_readable(data)
    theme_spec = None if as_json else chosen_theme(theme)
    shape = model.shape()
    check_hidden_layer(layer, shape)
    mask = head_mask(mask_spec, shape)
    session = model.open()
    from bertscope import api

    with api_call("attribution") as progress:
        result = api.attribute(
            session,
            text,
            pair,
            method=method,
            target=label,
            position=position,
            word=word,
            similarity=similarity,
            probe=probe_task,
            data=data,
            layer=layer,
            sentence_pooling=sentence_pooling,
            score=score,
            ig_steps=ig_steps,
            mask=mask,
            ablation=ablation,
            cache_dir=cache_dir,
            progress=progress,
        )
    write_figure(figure, result.figure)
    if as_json:
        print_json({"model": session.info.source, "text": text, "pair": pair, **result.as_json()})
        return

    from bertscope.render.attribution import attribution_report

    report_console().print(attribution_report(result, session.info.source, theme_spec, notes=False))  # notes went to stderr
