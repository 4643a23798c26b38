"""Probing what each layer knows: `probe`, and its helpers `treebank` (the built-in data) and `cache`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import click

from bertscope.base.errors import BertscopeError
from bertscope.cli import options
from bertscope.cli.common import ModelChoice, api_call, head_mask, print_json, printed, record_rows, report_console, write_figure

if TYPE_CHECKING:
    from bertscope.analyses.probing.results import ProbeKind
    from bertscope.model.masks import Ablation


@click.command()
@click.option("--task", "-t", required=True, help="upos, xpos, deprel, depth, distance (CoNLL-U); a SentEval task; or a built-in task.")
@options.splits(
    "Training file: CoNLL-U or SentEval. Without it, a built-in task or the built-in treebank is generated.",
    "Dev file (chooses the L2 strength, or when training stops). Default: the SentEval va split, or 10% of train.",
    "Test file. Default: the SentEval te split, or 20% of train.",
    "Read at most N sentences per file; without --data, the size of the generated treebank (default 4000).",
)
@options.pooling
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
@options.min_examples("Leave out (and count) labels with fewer than N training examples, as for a treebank's rare tags.")
@options.seed("Seed of the held-out splits, the probes' starting weights and the control task: run a few to see a probe's spread.")
@click.option(
    "--mdl",
    is_flag=True,
    help="Description length too (Voita & Titov 2020): each layer's online codelength in bits and its compression, and the "
    "control task's, on the same features; --figure then draws the compression. Not for depth or distance.",
)
@options.cache()
@options.mask
@options.report
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
    cache_dir: str | Literal[False] | None,
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
            cache_dir=cache_dir,
            mask=mask,
            ablation=ablation,
            seed=seed,
            mdl=mdl,
            progress=progress,
        )
    under = f"mask {mask.spec()} ({ablation})" if len(mask) else ""
    write_figure(figure, lambda: report.figure(mdl=mdl, under=under))
    run = {"model": session.source, "data": chosen.source, "mask": mask.spec(), "seed": seed}
    if printed(output_format, lambda: report.as_json() | run, lambda: record_rows(report.table())):  # CSV: flat, MDL as columns
        return

    from bertscope.render.probing import probe_report

    report_console().print(probe_report(report, session.source, chosen.source))


@click.command()
@click.option("--output", "-o", required=True, metavar="FILE.conllu", help="Where to write the treebank.")
@click.option("--sentences", "-n", type=click.IntRange(min=1), default=4000, show_default=True, help="How many sentences.")
@options.seed("The same seed gives the same treebank.")
def treebank(output: str, sentences: int, seed: int) -> None:
    """Write the built-in generated treebank as CoNLL-U (what `probe --task upos` uses without --data).

    English sentences from a seeded grammar, annotated as Universal Dependencies v2:
    UPOS, Penn Treebank XPOS, heads and relations, right by construction.
    """
    from bertscope.data.files import check_writable
    from bertscope.data.treebank import generate_treebank, write_conllu

    check_writable(output)
    generated = generate_treebank(sentences, seed)
    try:
        write_conllu(output, generated, id_prefix=f"bertscope-s{seed}")
    except OSError as error:
        raise BertscopeError(f"cannot write {output}: {error.strerror or error}") from None
    words = sum(len(sentence.words or ()) for sentence in generated)  # every generated sentence has its words
    click.echo(f"wrote {output}: {len(generated):,} sentences, {words:,} words (seed {seed})", err=True)


@click.command()
@options.cache_dir("The cache. Default: $BERTSCOPE_CACHE_DIR, else ~/.cache/bertscope.")
@click.option("--clear", is_flag=True, help="Remove every cached feature set and probe.")
@options.json
def cache(cache_dir: str | None, clear: bool, as_json: bool) -> None:
    """How much the feature and probe cache holds, or clear it.

    Entries of an older bertscope, or of data you no longer use, are never read again but
    stay on disk until cleared; the next run of a probe computes what it needs anew.
    """
    from bertscope.data.cache import cache_usage, clear_cache, default_cache_dir

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
