"""`bertscope sae train`, `features`, `heads` and `directions`: sparse autoencoders on a hidden state, trained and read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import click

from bertscope.base.errors import BertscopeError
from bertscope.cli import options
from bertscope.cli.common import (
    ModelChoice,
    ModelShape,
    api_call,
    check_hidden_layer,
    head_mask,
    print_json,
    printed,
    record_rows,
    report_console,
    write_figure,
)

if TYPE_CHECKING:
    from bertscope.model.masks import Ablation


@click.group(no_args_is_help=False)  # a bare `bertscope sae` is one line of error, not the help as one
def sae() -> None:
    """Sparse autoencoders on a hidden state: dictionary features of the encoder (TopK SAEs, Gao et al. 2024).

    `sae train` trains one on a corpus and writes it in SAELens's layout; `sae features` reads its features on a
    corpus: how often and how strongly each fires, on which tokens, and (CoNLL-U) which label it matches;
    `sae heads` says which heads write a feature; `sae directions` which features a probe reads and an erasure removes.
    """


def _hidden_size(model: ModelChoice) -> int | None:
    """The model's hidden size as config.json states it, read without torch (None where it does not say)."""
    files = model.judge_files()
    if files is None:
        return None
    from bertscope.model.model_files import read_config

    config = read_config(files.directory)
    size = config.get("hidden_size", config.get("dim"))
    return size if isinstance(size, int) else None


def _check_corpus(data: str | None, data_format: str, limit: int | None) -> None:
    """Refuse a corpus file that cannot be read or holds no sentence, reading only as far as its first one."""
    if data is None:
        return
    from bertscope.data.corpus import read_sentences

    next(iter(read_sentences(data, data_format, limit=1)), None)  # an empty file is refused when its end is reached


def _shape(model: ModelChoice) -> ModelShape:
    return model.shape()


@sae.command("train")
@options.data("The corpus to train on: text (a sentence a line), CoNLL-U or SentEval. Default: the sample corpus.")
@options.corpus_format()
@options.limit()
@click.option("--layer", "-l", type=int, required=True, help="Hidden state to train on (0 = embeddings, l+1 = the output of layer l).")
@click.option(
    "--out", "-o", "out", required=True, metavar="DIR", help="New directory to write the SAE to (cfg.json, sae_weights.safetensors)."
)
@click.option("--width", type=click.IntRange(min=1), default=None, metavar="N", help="Features of the SAE. Default: 4 × the hidden size.")
@click.option("--k", "-k", type=click.IntRange(min=1), default=32, show_default=True, help="Features that fire on each token (TopK).")
@click.option(
    "--epochs",
    type=click.IntRange(min=1),
    default=None,
    metavar="E",
    help="Passes over the corpus. Default: enough to train on 200,000 tokens, at most 40.",
)
@click.option(
    "--lr", type=click.FloatRange(min=0, min_open=True), default=None, help="Adam's learning rate. Default: 1.2e-3 / sqrt(width / 16384)."
)
@click.option("--include-special", is_flag=True, help="Train on the special tokens too ([CLS], [SEP]); padding never.")
@click.option(
    "--held-out",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.1,
    show_default=True,
    help="Share of the sentences never trained on; the figures reported are theirs.",
)
@options.batch_size()
@options.seed("Which sentences are held out, and the SAE's initialisation and shuffling.")
@options.figure
@options.json
@options.model
def train(
    data: str | None,
    data_format: str,
    limit: int | None,
    layer: int,
    out: str,
    width: int | None,
    k: int,
    epochs: int | None,
    lr: float | None,
    include_special: bool,
    held_out: float,
    batch_size: int | None,
    seed: int,
    figure: str | None,
    as_json: bool,
    model: ModelChoice,
) -> None:
    """Train a TopK sparse autoencoder on a hidden state of the corpus and write it to a new directory.

    Gao et al.'s recipe: decoder rows of unit norm, the decoder bias started at the activations' geometric median,
    the AuxK loss that revives dead features, Adam at a learning rate that falls with the width. A seeded share of
    the sentences (--held-out) is never trained on; on them: the FVU (fraction of variance unexplained), the mean
    number of features firing (L0), the share never firing, and, splicing the reconstruction into the model, the last
    hidden state's cosine to the plain pass (preserve) and with an MLM head the share of the MLM loss recovered.
    """
    from bertscope.analyses.sae.results import SAESettings
    from bertscope.data.files import check_new_directory

    settings = SAESettings(width=width, k=k, epochs=epochs, lr=lr, held_out=held_out, include_special=include_special)
    settings.check()
    check_hidden_layer(layer, _shape(model))
    hidden = _hidden_size(model)
    if width is None and hidden is not None and k > 4 * hidden:
        raise BertscopeError(f"--k {k} is more than the SAE's {4 * hidden} features (4 × the hidden size); give a smaller --k or a --width")
    check_new_directory(out)
    _check_corpus(data, data_format, limit)
    session = model.open()
    from bertscope import api

    with api_call("training the SAE") as progress:
        result = api.train_sae(
            session,
            layer=layer,
            out=out,
            data=data,
            format=data_format,
            limit=limit,
            width=width,
            k=k,
            epochs=epochs,
            lr=lr,
            include_special=include_special,
            held_out=held_out,
            batch_size=batch_size,
            seed=seed,
            progress=progress,
        )
    write_figure(figure, result.figure)
    source = str(data) if data is not None else "the sample corpus"
    if as_json:
        print_json(result.as_json() | {"data": source})
        return
    from bertscope.render.sae import training_report

    report_console().print(training_report(result, source))


@sae.command("features")
@click.option("--sae", "sae_dir", required=True, metavar="DIR", help="The SAE's directory (as `bertscope sae train` writes it).")
@options.data("The corpus to read the features on; CoNLL-U adds each feature's best-matching label. Default: the sample corpus.")
@options.corpus_format()
@options.limit()
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, metavar="N", help="Strongest tokens kept per feature.")
@options.batch_size()
@options.figure
@options.json_or_csv
@options.model
def features(
    sae_dir: str,
    data: str | None,
    data_format: str,
    limit: int | None,
    top: int,
    batch_size: int | None,
    figure: str | None,
    output_format: str | None,
    model: ModelChoice,
) -> None:
    """Read an SAE's features on a corpus: how well it reconstructs it, and what each feature fires on.

    The FVU, L0 and share of features that never fire on this corpus; per feature its density (the share of tokens
    it fires on), its --top strongest tokens in their sentences and a histogram of its activations (in --json). With
    a CoNLL-U corpus, each feature's best-matching label among UPOS, dependency relation and a word's first or inner
    piece, with precision and recall, and the count of label-pure features (precision ≥ 0.9).
    """
    from bertscope.analyses.sae.files import check_fits, read_config

    config = read_config(sae_dir)
    shape = _shape(model)
    hidden = _hidden_size(model)
    if hidden is not None:
        check_fits(config, hidden, shape.num_layers, directory=sae_dir)
    _check_corpus(data, data_format, limit)
    session = model.open()
    from bertscope import api

    with api_call("reading SAE features") as progress:
        result = api.sae_features(
            session, sae=sae_dir, data=data, format=data_format, limit=limit, top=top, batch_size=batch_size, progress=progress
        )
    write_figure(figure, result.figure)
    source = str(data) if data is not None else "the sample corpus"
    if printed(output_format, lambda: result.as_json() | {"data": source}, lambda: record_rows(result.table())):
        return
    from bertscope.render.sae import features_report

    report_console().print(features_report(result, source))


@sae.command("heads")
@click.option("--sae", "sae_dir", required=True, metavar="DIR", help="The SAE's directory (as `bertscope sae train` writes it).")
@click.option("--feature", "-f", type=click.IntRange(min=0), required=True, metavar="N", help="The feature whose writers to read.")
@options.data("The corpus to read the feature on (it is averaged over the tokens where it fires). Default: the sample corpus.")
@options.corpus_format()
@options.limit()
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, metavar="K", help="Heads shown (--json and --csv: all).")
@options.mask
@options.batch_size()
@options.json_or_csv
@options.model
def heads(
    sae_dir: str,
    feature: int,
    data: str | None,
    data_format: str,
    limit: int | None,
    top: int,
    mask_spec: str | None,
    ablation: Ablation,
    batch_size: int | None,
    output_format: str | None,
    model: ModelChoice,
) -> None:
    """Which heads write a feature: each head's direct contribution to its pre-activation, where it fires.

    For an SAE at hidden state L ≥ 1: W_enc[:, N] · (each head's output through the attention output projection, as
    it reaches hidden state L through the residual stream), averaged over the tokens where feature N fires; beside
    the heads, the embeddings', feed-forward blocks', biases' and LayerNorm shifts' shares, which add up to the
    pre-activation. In post-LN families (BERT, RoBERTa, ...) each LayerNorm after a write is linearised at the
    token's own scale (Kobayashi et al. 2021), exact for the pass; a head's effect through later blocks is theirs.
    """
    from bertscope.analyses.sae.files import check_fits, read_config
    from bertscope.analyses.sae.reading_results import check_sae_for_heads

    config = read_config(sae_dir)
    shape = _shape(model)
    hidden = _hidden_size(model)
    if hidden is not None:
        check_fits(config, hidden, shape.num_layers, directory=sae_dir)
    check_sae_for_heads(sae_dir, feature)
    mask = head_mask(mask_spec, shape)
    _check_corpus(data, data_format, limit)
    session = model.open()
    from bertscope import api

    with api_call("reading what writes the feature") as progress:
        result = api.sae_heads(
            session,
            sae=sae_dir,
            feature=feature,
            data=data,
            format=data_format,
            limit=limit,
            mask=mask,
            ablation=ablation,
            batch_size=batch_size,
            progress=progress,
        )
    source = str(data) if data is not None else "the sample corpus"
    if printed(output_format, lambda: result.as_json() | {"data": source}, lambda: record_rows(result.table())):
        return
    from bertscope.render.sae import heads_report

    report_console().print(heads_report(result, source, top))


@sae.command("directions")
@click.option("--sae", "sae_dir", required=True, metavar="DIR", help="The SAE's directory (as `bertscope sae train` writes it).")
@click.option(
    "--task",
    "-t",
    required=True,
    type=click.Choice(["upos", "xpos", "deprel"]),
    help="The word-level task whose probe and eraser to compare.",
)
@options.splits(
    "The CoNLL-U file to fit the probe and the eraser on. Default: the built-in treebank.",
    "Dev file (the probe's L2). Default: a split of the training data.",
    "Test file. Default: a split of the training data.",
    "Read at most N sentences of each file.",
)
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, metavar="K", help="Features shown per list.")
@options.min_examples("Leave out labels with fewer than N training examples, as `probe` does.")
@options.seed("Seed of the splits and the probe's fit (as `probe` and `erase` take it), and of the chance levels.")
@options.cache()
@options.batch_size()
@options.json_or_csv
@options.model
def directions(
    sae_dir: str,
    task: str,
    data: str | None,
    dev: str | None,
    test: str | None,
    data_format: str,
    limit: int | None,
    top: int,
    min_examples: int,
    seed: int,
    cache_dir: str | Literal[False] | None,
    batch_size: int | None,
    output_format: str | None,
    model: ModelChoice,
) -> None:
    """Each feature's decoder direction against a probe's class directions and a LEACE erasure, at the SAE's hidden state.

    Per feature: the largest |cosine| between its decoder row and the class directions of the linear probe `probe`
    fits for the task at that hidden state (and which class), and the share of the row the LEACE eraser `erase`
    fits there takes away. Counted among the features that fire on the data: how many the probe reads (|cos| ≥ 0.3)
    and how many the erasure removes (≥ 50% of the row); the JSON gives the levels random directions reach.
    """
    from bertscope import api
    from bertscope.analyses.sae.files import check_fits, read_config

    config = read_config(sae_dir)
    shape = _shape(model)
    hidden = _hidden_size(model)
    if hidden is not None:
        check_fits(config, hidden, shape.num_layers, directory=sae_dir)
    chosen = api.probe_sentences(task, data=data, dev=dev, test=test, format=data_format, limit=limit)
    session = model.open()
    with api_call("reading the features' directions") as progress:
        result = api.sae_directions(
            session,
            task,
            chosen,
            sae=sae_dir,
            min_examples=min_examples,
            cache_dir=cache_dir,
            batch_size=batch_size,
            seed=seed,
            progress=progress,
        )
    if printed(output_format, lambda: result.as_json() | {"data": chosen.source, "seed": seed}, lambda: record_rows(result.table())):
        return
    from bertscope.render.sae import directions_report

    report_console().print(directions_report(result, chosen.source, top))
