"""Probing what each layer knows: `probe`, and its helpers `treebank` (the built-in data) and `cache`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from bertscope.cli.common import (
    ModelChoice,
    api_call,
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
from bertscope.core.errors import BertscopeError

if TYPE_CHECKING:
    from bertscope.core.analyses.probing_results import ProbeKind
    from bertscope.core.model.masks import Ablation


@click.command()
@click.option("--task", "-t", required=True, help="upos, xpos, deprel, depth, distance (CoNLL-U); a SentEval task; or a built-in task.")
@click.option(
    "--data",
    default=None,
    metavar="TRAIN",
    help="Training file: CoNLL-U or SentEval. Without it, a built-in task or the built-in treebank is generated.",
)
@click.option(
    "--dev",
    default=None,
    metavar="DEV",
    help="Dev file (chooses the L2 strength, or when training stops). Default: the SentEval va split, or 10% of train.",
)
@click.option("--test", default=None, metavar="TEST", help="Test file. Default: the SentEval te split, or 20% of train.")
@click.option("--format", "data_format", default="auto", show_default=True, type=click.Choice(["auto", "conllu", "senteval"]))
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Read at most N sentences per file; without --data, the size of the generated treebank (default 4000).",
)
@click.option("--word-pooling", default="first", show_default=True, type=click.Choice(["first", "mean"]), help="A word from its sub-words.")
@click.option(
    "--sentence-pooling", default="cls", show_default=True, type=click.Choice(["cls", "mean"]), help="A sentence from its tokens."
)
@click.option(
    "--kind",
    default="linear",
    show_default=True,
    type=click.Choice(["linear", "mlp"]),
    help="The probe: linear (multinomial logistic regression) or mlp (one hidden layer).",
)
@click.option("--probe", type=click.Choice(["linear", "mlp"]), hidden=True, deprecated="--probe is now --kind, for one release more")
@click.option("--control/--no-control", default=True, show_default=True, help="Control task and selectivity (word-level tasks).")
@click.option(
    "--random-baseline/--no-random-baseline",
    default=True,
    show_default=True,
    help="The same probe on a randomly initialised copy of the model.",
)
@click.option(
    "--min-examples",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    metavar="N",
    help="Leave out (and count) labels with fewer than N training examples, as for a treebank's rare tags.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the held-out splits, the probes' starting weights and the control task: run a few to see a probe's spread.",
)
@click.option(
    "--mdl",
    is_flag=True,
    help="Description length too (Voita & Titov 2020): each layer's online codelength in bits and its compression, and the "
    "control task's, on the same features; --figure then draws the compression. Not for depth or distance.",
)
@click.option("--cache-dir", default=None, metavar="DIR", help="Feature cache. Default: $BERTSCOPE_CACHE_DIR, else ~/.cache/bertscope.")
@click.option("--no-cache", is_flag=True, help="Compute features afresh and keep nothing.")
@mask_options
@figure_option
@output_option
@format_options
@model_options
def probe(
    task: str,
    data: str | None,
    dev: str | None,
    test: str | None,
    data_format: str,
    limit: int | None,
    word_pooling: str,
    sentence_pooling: str,
    kind: ProbeKind,
    probe: ProbeKind | None,
    control: bool,
    random_baseline: bool,
    min_examples: int,
    seed: int,
    mdl: bool,
    cache_dir: str | None,
    no_cache: bool,
    mask_spec: str | None,
    ablation: Ablation,
    output_format: str | None,
    figure: str | None,
    model: ModelChoice,
) -> None:
    """What each layer knows: a probe per layer, with baselines (Conneau; Jawahar; Tenney; Hewitt).

    Layers are indexed as hidden states: 0 is the embeddings, l+1 the output of layer l. With --mdl, the
    description length of the labels given each layer (Voita & Titov): compression = uniform / online bits.
    """
    from bertscope import api

    kind = kind if probe is None else probe  # --probe, the old spelling of --kind
    api.check_mdl(task, mdl)
    chosen = api.probe_sentences(task, data=data, dev=dev, test=test, format=data_format, limit=limit)
    mask = head_mask(mask_spec, model.shape())
    session = model.deferred()  # with every feature set cached, the fit needs neither transformers nor the weights
    with api_call("probing") as progress:
        report = api.probe(
            session,
            task,
            chosen,
            word_pooling=word_pooling,
            sentence_pooling=sentence_pooling,
            kind=kind,
            control=control,
            random_baseline=random_baseline,
            min_examples=min_examples,
            cache_dir=False if no_cache else cache_dir,
            mask=mask,
            ablation=ablation,
            seed=seed,
            mdl=mdl,
            progress=progress,
        )
    under = f"mask {mask.spec()} ({ablation})" if len(mask) else ""
    write_figure(figure, lambda: report.figure(mdl=mdl, under=under))
    if output_format == "json":
        payload = report.as_json() | {"model": session.source, "data": chosen.source, "mask": mask.spec(), "seed": seed}
        print_json(payload)
        return
    table = report.table()  # flat: a layer's description length as columns
    columns = list(table[0])
    if output_format == "csv":
        print_csv([columns, *([row.get(column, "") for column in columns] for row in table)])
        return

    from bertscope.render.probing import probe_report

    report_console().print(probe_report(report, session.source, chosen.source))


@click.command()
@click.option("--output", "-o", required=True, metavar="FILE.conllu", help="Where to write the treebank.")
@click.option("--sentences", "-n", type=click.IntRange(min=1), default=4000, show_default=True, help="How many sentences.")
@click.option("--seed", type=int, default=0, show_default=True, help="The same seed gives the same treebank.")
def treebank(output: str, sentences: int, seed: int) -> None:
    """Write the built-in generated treebank as CoNLL-U (what `probe --task upos` uses without --data).

    English sentences from a seeded grammar, annotated as Universal Dependencies v2:
    UPOS, Penn Treebank XPOS, heads and relations, right by construction.
    """
    from bertscope.core.data.files import check_writable
    from bertscope.core.data.treebank import generate_treebank, write_conllu

    check_writable(output)
    generated = generate_treebank(sentences, seed)
    try:
        write_conllu(output, generated, id_prefix=f"bertscope-s{seed}")
    except OSError as error:
        raise BertscopeError(f"cannot write {output}: {error.strerror or error}") from None
    words = sum(len(sentence.words or ()) for sentence in generated)  # every generated sentence has its words
    click.echo(f"wrote {output}: {len(generated):,} sentences, {words:,} words (seed {seed})", err=True)


@click.command()
@click.option("--cache-dir", default=None, metavar="DIR", help="The cache. Default: $BERTSCOPE_CACHE_DIR, else ~/.cache/bertscope.")
@click.option("--clear", is_flag=True, help="Remove every cached feature set and probe.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
def cache(cache_dir: str | None, clear: bool, as_json: bool) -> None:
    """How much the feature and probe cache holds, or clear it.

    Entries of an older bertscope, or of data you no longer use, are never read again but
    stay on disk until cleared; the next run of a probe computes what it needs anew.
    """
    from bertscope.core.data.cache import cache_usage, clear_cache, default_cache_dir

    directory = cache_dir if cache_dir is not None else default_cache_dir()
    usage = clear_cache(directory) if clear else cache_usage(directory)
    if as_json:
        print_json(usage.as_json() | {"cleared": clear})
        return
    held = (
        f"{usage.bytes / 1e6:,.1f} MB in {usage.files} files ({usage.feature_entries} feature "
        f"set{'s' * (usage.feature_entries != 1)}, {usage.probes} probe{'s' * (usage.probes != 1)})"
    )
    if clear:
        click.echo(f"{usage.directory}: removed {held}" if usage.files else f"{usage.directory}: nothing to remove")
    else:
        click.echo(f"{usage.directory}: {held}" if usage.files else f"{usage.directory}: empty")
