"""Headless commands: every analysis without the UI, for people (Rich) and programs (JSON/CSV).

Imports stay light at module level so `bertscope --help` answers before torch loads;
each command imports the core when it runs. Errors the user can fix print one line and
exit with status 2.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sys

import click

from bertscope import __version__
from bertscope.core.errors import BertscopeError
from bertscope.core.model.masks import ABLATIONS

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


class BertscopeGroup(click.Group):
    """A click group that turns user errors into one line and exit status 2.

    A bare `bertscope`, or one whose first word is not a command (`bertscope "a text"`,
    `bertscope --model DIR`), opens the explorer.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help", "-V", "--version")):
            args = ["explore", *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BertscopeError as error:
            click.echo(f"bertscope: error: {error_line(error)}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            # Files are written whole or not at all (temporary file, then rename), so a stop
            # leaves only what was complete before it.
            what = ctx.invoked_subcommand or "bertscope"
            click.echo(f"bertscope: interrupted: {what} stopped before it finished; no file was left half written", err=True)
            ctx.exit(EXIT_INTERRUPTED)


# The flag of each setting an error can name (BertscopeError.setting), where it is not
# simply the setting with dashes: the core speaks of settings, the CLI of flags.
FLAGS = {"probe": "--probe TASK", "data": "--data FILE", "task": "--task", "unit": "--unit", "format": "--format"}


def error_line(error: BertscopeError) -> str:
    """The error's message, with the flag that sets what it is about, and the CLI's own advice."""
    from bertscope.core.errors import NoMLMHeadError

    line = str(error)
    if error.setting is not None:
        line += f" ({FLAGS.get(error.setting, '--' + error.setting.replace('_', '-'))})"
    if isinstance(error, NoMLMHeadError):
        line += "; or use what works without one: `bertscope attribute TEXT --probe TASK`, `bertscope probe`, `bertscope attention`"
    return line


@click.group(cls=BertscopeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="bertscope")
def main() -> None:
    """bertscope: explore what the attention heads and layers of BERT-family encoders do.

    `bertscope [TEXT]` opens the explorer; the commands below run the analyses headless.
    Every command works on the bundled all-MiniLM-L6-v2 unless --model names a local
    model directory or a model already in the Hugging Face cache. Layers and heads count
    from 0. Head masks are LAYER:HEAD items separated by commas, LAYER:* for a whole layer.
    """


def model_options(command):
    """--model, --device, --dtype and --allow-download, shared by every command that loads a model."""
    options = [
        click.option(
            "--model", "-m", "model", default=None, metavar="M",
            help="Model directory, or a Hugging Face name already in the cache. Default: bundled all-MiniLM-L6-v2.",
        ),
        click.option("--device", default="auto", show_default=True, help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps."),
        click.option(
            "--dtype", default="float32", show_default=True, type=click.Choice(["float32", "float16", "bfloat16"]),
            help="Precision; the half precisions are for GPUs.",
        ),
        click.option("--allow-download", is_flag=True, help="Fetch a Hugging Face model that is not in the cache."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def mask_options(command):
    command = click.option(
        "--ablation", default="zero", show_default=True, type=click.Choice(ABLATIONS),
        help="zero: remove the head's output (Michel et al.); uniform: the head attends evenly to all tokens (Kovaleva et al.).",
    )(command)
    return click.option(
        "--mask", "mask_spec", default=None, metavar="SPEC", callback=_checked_mask_spec, help="Heads to switch off, e.g. 0:3,2:*."
    )(command)


def _checked_mask_spec(ctx, param, spec: str | None) -> str | None:
    """A malformed mask is refused before the model loads; its layers and heads are checked against the model later."""
    from bertscope.core.model.masks import HeadMask

    HeadMask.check_spec(spec)
    return spec


def format_options(command):
    command = click.option("--csv", "output_format", flag_value="csv", help="Print CSV for programs.")(command)
    return click.option("--json", "output_format", flag_value="json", help="Print JSON for programs.")(command)


def open_session(model: str | None, device: str, dtype: str, allow_download: bool):
    """Load the model, with a spinner on a terminal so a person knows what is happening.

    Its files are judged first, before torch is imported, so a wrong --model fails at once.
    """
    from rich.console import Console

    judge_model_files(model, allow_download)
    console = Console(stderr=True)
    with console.status("loading model…") if console.is_terminal else contextlib.nullcontext():
        from bertscope.core.model.session import Session

        return Session.open(model, device=device, dtype=dtype, allow_download=allow_download)


def judge_model_files(model: str | None, allow_download: bool) -> None:
    """Refuse a model whose files bertscope cannot read, without importing torch.

    With --allow-download the files may not be here yet: loading the model fetches them,
    once, and judges them then.
    """
    if not allow_download:
        from bertscope.core.model.model_files import find_model

        find_model(model)


def warn(message: str) -> None:
    click.echo(f"bertscope: warning: {message}", err=True)


def encode_or_warn(session, text: str, pair: str | None):
    encoding = session.encode(text, pair)
    if encoding.truncated:
        warn(
            f"the input is {len(encoding) + encoding.truncated} tokens; cut {encoding.truncated} "
            f"to fit the model's maximum of {session.max_length}"
        )
    return encoding


def check_index(value: int, count: int, name: str) -> None:
    if not 0 <= value < count:
        raise BertscopeError(f"--{name} {value} is out of range: this model has {count} {name}s (0-{count - 1})")


def print_json(payload: dict) -> None:
    click.echo(json.dumps(payload, indent=None, separators=(",", ":")))


@main.command()
@click.argument("text", required=False)
@click.option("--pair", default=None, metavar="TEXT2", help="A second segment (sentence pair input).")
@click.option("--theme", default=None, help="dark, light, colorblind, or a theme of your own (see the README).")
@click.option("--session", "session_file", default=None, metavar="FILE", help="Restore the sentence, masks and selection from FILE, and keep saving them there.")
@click.option("--export-dir", default=".", show_default=True, type=click.Path(file_okay=False), help="Where `e` saves SVG and CSV exports.")
@click.option(
    "--glyphs/--colours", "glyphs", default=None,
    help="Draw heatmaps with shade characters, or with colours. Default: colours when the terminal has 256 or more and NO_COLOR is unset.",
)
@model_options
def explore(text, pair, theme, session_file, export_dir, glyphs, model, device, dtype, allow_download):
    """Open the explorer on TEXT (default: an example sentence, or the one in --session)."""
    from bertscope.core.data.files import check_writable

    if text is not None and not text.strip():
        raise BertscopeError("the text is empty; give a sentence, or leave it out for the example")
    if theme is not None:
        _heatmap_colormap(theme)  # an unknown theme fails here, with the list of themes
    if session_file is not None:
        check_writable(session_file)
    judge_model_files(model, allow_download)  # a model the explorer cannot read is refused here, like any command's
    from bertscope.ui.app import ExplorerApp

    def open_backend(report):
        report("importing torch and transformers…")
        from bertscope.core.model.session import Session
        from bertscope.session_backend import SessionBackend

        report(f"loading {model or 'the bundled all-MiniLM-L6-v2'}…")
        return SessionBackend(Session.open(model, device=device, dtype=dtype, allow_download=allow_download))

    app = ExplorerApp(
        open_backend, text=text, pair=pair, theme=theme, session_file=session_file, export_dir=export_dir, glyphs=glyphs
    )
    app.run()
    if app.load_error is not None:  # the files looked right, but the model would not load
        raise BertscopeError(app.load_error)
    sys.exit(app.return_code or 0)


@main.command()
@model_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
def info(model, device, dtype, allow_download, as_json):
    """What the model is: family, layers, heads, sizes, MLM head, device."""
    session = open_session(model, device, dtype, allow_download)
    details = session.info.as_dict()
    if as_json:
        print_json(details)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=False, box=None, padding=(0, 2))
    labels = {
        "source": "model", "family": "family", "architecture": "architecture", "num_layers": "layers",
        "num_heads": "heads per layer", "hidden_size": "hidden size", "vocab_size": "vocabulary",
        "max_length": "max tokens", "has_mlm_head": "MLM head", "num_labels": "labels",
        "device": "device", "dtype": "dtype", "parameters": "parameters", "fingerprint": "fingerprint",
        "pruned_heads": "pruned heads",
    }
    for key, label in labels.items():
        value = details[key]
        if key == "num_labels" and value is None or key == "pruned_heads" and not value:
            continue
        if isinstance(value, bool):
            value = "yes" if value else "no (fill-in needs a model with an MLM head)"
        elif key == "parameters":
            value = f"{value:,} ({value / 1e6:.1f} M)"
        table.add_row(f"[bold]{label}[/]", str(value))
    Console().print(table)


@main.command()
@click.argument("text")
@click.option("--pair", default=None, metavar="TEXT2", help="A second segment (sentence pair input).")
@click.option("--layer", "-l", type=int, required=True, help="Layer, from 0.")
@click.option("--head", "-H", "head", type=int, required=True, help="Head, from 0.")
@mask_options
@format_options
@click.option("--theme", default=None, help="Heatmap colours: a theme name or a theme file.")
@click.option(
    "--scale", type=click.Choice(["max", "row", "fixed", "log"]), default="max", show_default=True,
    help="Colour scale: 0 to the map's largest weight, each row to its own largest, fixed 0–1, or three decades (log).",
)
@click.option("--dense", is_flag=True, help="Two query rows a line (half blocks), for long inputs; needs 256 colours.")
@model_options
def attention(text, pair, layer, head, mask_spec, ablation, output_format, theme, scale, dense, model, device, dtype, allow_download):
    """Show one head's attention over TEXT as a heatmap (rows attend to columns)."""
    if output_format is None:
        colormap = _heatmap_colormap(theme)  # a bad theme fails before the model loads
    session = open_session(model, device, dtype, allow_download)
    check_index(layer, session.num_layers, "layer")
    check_index(head, session.num_heads, "head")
    head_mask = session.mask(mask_spec)
    result = session.forward(encode_or_warn(session, text, pair), attentions=True, mask=head_mask, ablation=ablation)
    weights = result.attentions[layer, head]
    tokens = list(result.tokens)
    if output_format == "json":
        print_json(
            {
                "model": session.info.source,
                "layer": layer,
                "head": head,
                "mask": head_mask.spec(),
                "ablation": ablation,
                "masked": head_mask.is_masked(layer, head),
                "tokens": tokens,
                "attention": weights.round(6).tolist(),
            }
        )
        return
    if output_format == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["from \\ to", *tokens])
        for token, row in zip(tokens, weights):
            writer.writerow([token, *(f"{value:.6f}" for value in row)])
        click.echo(buffer.getvalue(), nl=False)
        return
    from rich.console import Console

    from bertscope.render.heatmap import AttentionHeatmap

    title = f"layer {layer} · head {head}"
    if len(head_mask):
        title += f" · mask {head_mask.spec()} ({ablation})"
    Console().print(
        AttentionHeatmap(
            weights, tokens, tokens, colormap, title=title, masked=head_mask.is_masked(layer, head),
            scale=scale, dense=dense, cell_width=None, label_width=None,
        )
    )


def _heatmap_colormap(theme: str | None):
    from bertscope.theming import DEFAULT_THEME, ThemeError, load_theme

    try:
        return load_theme(theme or DEFAULT_THEME).heatmap
    except ThemeError as error:
        raise BertscopeError(str(error)) from None


def data_options(command):
    """TEXT or --data FILE (with --format and --limit), shared by the corpus commands."""
    command = click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N", help="Read at most N sentences.")(command)
    command = click.option(
        "--format", "data_format", default="auto", show_default=True,
        type=click.Choice(["auto", "text", "conllu", "senteval"]),
        help="text: one sentence a line; conllu: CoNLL-U; senteval: split<TAB>label<TAB>sentence.",
    )(command)
    command = click.option("--data", "data", default=None, metavar="FILE", help="A corpus file. Default: the sample corpus shipped with bertscope.")(command)
    return click.argument("text", required=False)(command)


def corpus_sentences(text, data, data_format, limit, report):
    """The sentences to analyse: TEXT, or the file, or the shipped sample corpus."""
    from bertscope.core.data.corpus import Sentence, read_sentences, sample_corpus

    if text is not None and data is not None:
        raise BertscopeError("give either TEXT or --data FILE, not both")
    if text is not None:
        if not text.strip():
            raise BertscopeError("the text is empty; give a sentence, or --data FILE for a corpus")
        report.sentences = 1
        return [Sentence(text=text, location="TEXT")], "TEXT"
    path = data if data is not None else sample_corpus()
    return read_sentences(path, data_format, limit=limit, report=report), str(path)


def run_with_progress(steps, total: int | None, what: str):
    """Drain a core generator, showing a progress bar of sentences on a terminal; return its result."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from bertscope.core.progress import outcome

    console = Console(stderr=True)
    if not console.is_terminal:
        return outcome(steps, what)
    columns = [TextColumn(what), BarColumn(), MofNCompleteColumn(), TextColumn("sentences"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(what, total=total)
        return outcome(steps, what, on_step=lambda step: progress.update(task, completed=step.done, total=step.total or total))


@main.command()
@data_options
@mask_options
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True, help="Sentences per forward pass.")
@format_options
@model_options
def patterns(text, data, data_format, limit, mask_spec, ablation, batch_size, output_format, model, device, dtype, allow_download):
    """Attention statistics and pattern classes of every head (Kovaleva et al.; Clark et al.).

    Over TEXT, or a corpus (--data FILE; default: the sample corpus shipped with bertscope).
    Per head: the share of attention to [CLS], [SEP], punctuation, the token itself, the
    previous and next token and its own segment, the attention entropy (nats) and mean
    distance, averaged over real tokens and sentences; and the share of sentences in which
    the head's map is vertical, diagonal, vertical+diagonal, block or heterogeneous.
    """
    from bertscope.core.analyses.patterns import PATTERNS, STATISTICS, pattern_statistics
    from bertscope.core.data.corpus import ReadReport

    report = ReadReport()
    sentences, source = corpus_sentences(text, data, data_format, limit, report)
    session = open_session(model, device, dtype, allow_download)
    head_mask = session.mask(mask_spec)
    steps = pattern_statistics(session, sentences, mask=head_mask, ablation=ablation, batch_size=batch_size)
    result = run_with_progress(steps, limit, "attention statistics")
    if report.skipped:
        warn(report.summary())
    if result.truncated:
        warn(f"{result.truncated:,} tokens were cut from sentences longer than the model's maximum of {session.max_length}")
    if output_format == "json":
        payload = result.as_json(session.info.source)
        payload.update({"data": source, "mask": head_mask.spec(), "ablation": ablation, "skipped": len(report.skipped)})
        print_json(payload)
        return
    if output_format == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["layer", "head", "pattern", *(f"share_{name}" for name in PATTERNS), *STATISTICS])
        for layer in range(session.num_layers):
            for head in range(session.num_heads):
                writer.writerow(
                    [layer, head, PATTERNS[result.dominant[layer, head]]]
                    + [f"{share:.6f}" for share in result.pattern_shares[layer, head]]
                    + [f"{result.statistics[name][layer, head]:.6f}" for name in STATISTICS]
                )
        click.echo(buffer.getvalue(), nl=False)
        return
    from rich.console import Console

    from bertscope.render.patterns import patterns_report

    console = Console()
    sentences = f"{result.sentences:,} sentence{'' if result.sentences == 1 else 's'}"
    console.print(f"[bold]{session.info.source}[/] · {sentences} from {source} · {result.tokens:,} tokens"
                  + (f" · mask {head_mask.spec()} ({ablation})" if len(head_mask) else ""), highlight=False)
    console.print(patterns_report(result, PATTERNS))


@main.command()
@click.option("--task", "-t", required=True, help="upos, xpos, deprel, depth, distance (CoNLL-U); a SentEval task; or a built-in task.")
@click.option(
    "--data", default=None, metavar="TRAIN",
    help="Training file: CoNLL-U or SentEval. Without it, a built-in task or the built-in treebank is generated.",
)
@click.option("--dev", default=None, metavar="DEV", help="Dev file (chooses the L2 strength). Default: the SentEval va split, or 10% of train.")
@click.option("--test", default=None, metavar="TEST", help="Test file. Default: the SentEval te split, or 20% of train.")
@click.option("--format", "data_format", default="auto", show_default=True, type=click.Choice(["auto", "conllu", "senteval"]))
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, metavar="N",
    help="Read at most N sentences per file; without --data, the size of the generated treebank (default 4000).",
)
@click.option("--word-pooling", default="first", show_default=True, type=click.Choice(["first", "mean"]), help="A word from its sub-words.")
@click.option("--sentence-pooling", default="cls", show_default=True, type=click.Choice(["cls", "mean"]), help="A sentence from its tokens.")
@click.option("--probe", "kind", default="linear", show_default=True, type=click.Choice(["linear", "mlp"]))
@click.option("--control/--no-control", default=True, show_default=True, help="Control task and selectivity (word-level tasks).")
@click.option("--random-baseline/--no-random-baseline", default=True, show_default=True, help="The same probe on a randomly initialised copy of the model.")
@click.option(
    "--min-examples", type=click.IntRange(min=1), default=2, show_default=True, metavar="N",
    help="Leave out (and count) labels with fewer than N training examples, as for a treebank's rare tags.",
)
@click.option("--cache-dir", default=None, metavar="DIR", help="Feature cache. Default: $BERTSCOPE_CACHE_DIR, else ~/.cache/bertscope.")
@click.option("--no-cache", is_flag=True, help="Compute features afresh and keep nothing.")
@mask_options
@format_options
@model_options
def probe(task, data, dev, test, data_format, limit, word_pooling, sentence_pooling, kind, control, random_baseline,
          min_examples, cache_dir, no_cache, mask_spec, ablation, output_format, model, device, dtype, allow_download):
    """What each layer knows: a probe per layer, with baselines (Conneau; Jawahar; Tenney; Hewitt).

    Layers are indexed as hidden states: 0 is the embeddings, l+1 the output of layer l.
    """
    from bertscope.core.data.corpus import ReadReport, read_sentences
    from bertscope.core.data.probing_tasks import TASKS, generate

    word_tasks = ("upos", "xpos", "deprel", "depth", "distance")
    reports, notes = [], []

    def read(path):
        if path is None:
            return None
        report = ReadReport()
        sentences = list(read_sentences(path, data_format, limit=limit, report=report))
        reports.append(report)
        return sentences

    if data is None:
        if dev is not None or test is not None:
            raise BertscopeError("--dev and --test need --data TRAIN")
        if task in word_tasks:
            from bertscope.core.data.treebank import DEFAULT_SENTENCES, generate_treebank

            size = limit or DEFAULT_SENTENCES
            train_sentences, dev_sentences, test_sentences = generate_treebank(size), None, None
            source = f"built-in treebank ({size:,} sentences)"
            notes.append(
                f"no --data: probing a generated treebank of {size:,} sentences (bertscope's built-in grammar; "
                "`bertscope treebank -o FILE.conllu` writes it out)"
            )
        elif task not in TASKS:
            choices = ", ".join((*TASKS, *word_tasks))
            raise BertscopeError(f"unknown task {task!r} without --data; built-in tasks: {choices}; or give --data FILE")
        else:
            train_sentences, dev_sentences, test_sentences, source = generate(task), None, None, f"built-in task {task}"
    else:
        train_sentences, dev_sentences, test_sentences, source = read(data), read(dev), read(test), data
        words = train_sentences[0].words is not None
        if words and task not in word_tasks:
            raise BertscopeError(f"a CoNLL-U file probes {', '.join(word_tasks)}; not {task!r}")
        if not words and task in word_tasks:
            raise BertscopeError(f"task {task!r} needs a CoNLL-U file; {data} is not one")
    from bertscope.core.analyses.probing import make_splits, run_probe

    splits = make_splits(train_sentences, dev_sentences, test_sentences)
    session = open_session(model, device, dtype, allow_download)
    head_mask = session.mask(mask_spec)
    steps = run_probe(
        session, task, splits, word_pooling=word_pooling, sentence_pooling=sentence_pooling, mask=head_mask.spec(),
        ablation=ablation, kind=kind, control=control, random_baseline=random_baseline, min_examples=min_examples,
        cache_dir=False if no_cache else cache_dir,
    )
    report = run_stages(steps, "probing")
    report.notes[:0] = notes
    for read_report in reports:
        if read_report.skipped:
            warn(read_report.summary())
    for note in report.notes:
        warn(note)
    if output_format == "json":
        payload = report.as_json() | {"model": session.info.source, "data": source, "mask": head_mask.spec()}
        print_json(payload)
        return
    columns = list(report.layers[0])
    if output_format == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(report.layers)
        click.echo(buffer.getvalue(), nl=False)
        return
    from rich.console import Console

    from bertscope.render.probing import probe_report

    Console().print(probe_report(report, session.info.source, source))


def run_stages(steps, what: str):
    """Drain a staged core generator (core.progress) with a progress bar on a terminal; its result."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from bertscope.core.progress import outcome

    console = Console(stderr=True)
    if not console.is_terminal:
        return outcome(steps, what)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task(what, total=None)

        def show(step) -> None:
            progress.update(task, description=f"{what}: {step.stage}", completed=step.done, total=step.total)

        return outcome(steps, what, on_step=show)


@main.command()
@click.option("--output", "-o", required=True, metavar="FILE.conllu", help="Where to write the treebank.")
@click.option("--sentences", "-n", type=click.IntRange(min=1), default=4000, show_default=True, help="How many sentences.")
@click.option("--seed", type=int, default=0, show_default=True, help="The same seed gives the same treebank.")
def treebank(output, sentences, seed):
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
    words = sum(len(sentence.words) for sentence in generated)
    click.echo(f"wrote {output}: {len(generated):,} sentences, {words:,} words (seed {seed})", err=True)


@main.command()
@click.option("--cache-dir", default=None, metavar="DIR", help="The cache. Default: $BERTSCOPE_CACHE_DIR, else ~/.cache/bertscope.")
@click.option("--clear", is_flag=True, help="Remove every cached feature set and probe.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
def cache(cache_dir, clear, as_json):
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
    held = (f"{usage.bytes / 1e6:,.1f} MB in {usage.files} files ({usage.feature_entries} feature "
            f"set{'s' * (usage.feature_entries != 1)}, {usage.probes} probe{'s' * (usage.probes != 1)})")
    if clear:
        click.echo(f"{usage.directory}: removed {held}" if usage.files else f"{usage.directory}: nothing to remove")
    else:
        click.echo(f"{usage.directory}: {held}" if usage.files else f"{usage.directory}: empty")


@main.command()
@click.argument("text")
@click.option("--pair", default=None, metavar="TEXT2", help="A second segment (sentence pair input).")
@mask_options
@click.option("--output", "-o", required=True, metavar="FILE.npz", help="Where to write the arrays.")
@model_options
def export(text, pair, mask_spec, ablation, output, model, device, dtype, allow_download):
    """Write tokens, attentions, hidden states (and MLM logits) of TEXT to an .npz file.

    Arrays: tokens [T], input_ids [T], token_type_ids [T], word_ids [T] (-1 for special
    tokens), special [T], attentions [L,H,T,T], hidden_states [L+1,T,D] (0 = embeddings),
    mlm_logits [T,V] when the model has an MLM head, and the mask spec and ablation.
    """
    import numpy as np

    from bertscope.core.data.files import atomic_write, check_writable

    check_writable(output)
    session = open_session(model, device, dtype, allow_download)
    head_mask = session.mask(mask_spec)
    result = session.forward(encode_or_warn(session, text, pair), attentions=True, mask=head_mask, ablation=ablation)
    encoding = result.encoding
    arrays = {
        "tokens": np.array(encoding.tokens),
        "input_ids": encoding.input_ids,
        "token_type_ids": encoding.token_type_ids,
        "word_ids": np.array([-1 if word is None else word for word in encoding.word_ids], dtype=np.int64),
        "special": encoding.special,
        "attentions": result.attentions,
        "hidden_states": result.hidden_states,
        "mask": np.array(head_mask.spec()),
        "ablation": np.array(ablation),
        "model": np.array(session.info.source),
    }
    if result.mlm_logits is not None:
        arrays["mlm_logits"] = result.mlm_logits
    try:
        with atomic_write(output) as handle:
            np.savez(handle, **arrays)
    except OSError as error:
        raise BertscopeError(f"cannot write {output}: {error.strerror or error}") from None
    shapes = ", ".join(f"{name} {list(arrays[name].shape)}" for name in ("attentions", "hidden_states", "mlm_logits") if name in arrays)
    click.echo(f"wrote {output}: {len(encoding)} tokens; {shapes}", err=True)


from bertscope import (
    cli_fill_attribute,  # noqa: E402,F401  (registers `fill` and `attribute`)
    cli_geometry,  # noqa: E402,F401 - registers `geometry` and `compare` on `main`
    cli_importance,  # noqa: E402,F401 - registers `importance` and `prune` on `main`
)
