"""Every flag that more than one command takes, declared once; a command lists the groups it takes.

A group is a decorator (`@options.mask`), or a function that makes one where commands word
a flag's help for their own data (`@options.seed("Which rows the sample keeps.")`);
`stacked` joins several into one, in the order a command's help lists them (`report`: the
--figure, --output, --json/--csv and model flags a report command ends with). Where a group's flags are
one thing to the command, it hands them over as one value: the model options as a
`ModelChoice`, --json/--csv as `output_format`, --cache-dir/--no-cache as `cache_dir`.
Nothing here imports torch or numpy, so `--help` answers at once.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable
from typing import Any

import click

from bertscope.base.errors import BertscopeError
from bertscope.cli.common import ModelChoice
from bertscope.data.batching import MAX_TOKENS
from bertscope.model.masks import ABLATIONS, HeadMask
from bertscope.model.model_files import SHORTEST_MAX_LENGTH

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]  # adds options to a command's function

ABLATION_HELP = "zero: remove the head's output (Michel et al.); uniform: the head attends evenly to all tokens (Kovaleva et al.)."
BATCH_SIZE_HELP = f"At most N sentences per forward pass (default: as many as fit {MAX_TOKENS:,} padded tokens)."
CACHE_HELP = "Feature cache. Default: $BERTSCOPE_CACHE_DIR, else ~/.cache/bertscope."
NO_CACHE_HELP = "Compute features afresh and keep nothing."
CORPUS_FORMATS = ["auto", "text", "conllu", "senteval"]
CORPUS_FORMAT_HELP = "text: one sentence a line; conllu: CoNLL-U; senteval: split<TAB>label<TAB>sentence."
DATA_HELP = "A corpus file. Default: the sample corpus shipped with bertscope."
HEATMAP_THEME_HELP = "Heatmap colours: a theme name or a theme file."
LIMIT_HELP = "Read at most N sentences."
PAIR_HELP = "A second segment (sentence pair input)."


def stacked(*decorators: Decorator) -> Decorator:
    """Several groups as one decorator, their flags in the order given (as if written one above the other)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return decorate


# --- the model --------------------------------------------------------------------------------------------


_model_flags = stacked(
    click.option(
        "--model",
        "-m",
        "model",
        default=None,
        metavar="M",
        help="Model directory, or a Hugging Face name already in the cache. Default: bundled all-MiniLM-L6-v2.",
    ),
    click.option("--device", default="auto", show_default=True, help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps."),
    click.option(
        "--dtype",
        default="float32",
        show_default=True,
        type=click.Choice(["float32", "float16", "bfloat16"]),
        help="Precision; the half precisions are for GPUs.",
    ),
    click.option("--allow-download", is_flag=True, help="Fetch a Hugging Face model that is not in the cache."),
    click.option(
        "--max-length",
        type=click.IntRange(min=SHORTEST_MAX_LENGTH),
        default=None,
        metavar="N",
        help="Cut inputs at N tokens. Default: as many as the model takes (its position embeddings).",
    ),
)


def model(command: Callable[..., Any]) -> Callable[..., Any]:
    """--model, --device, --dtype, --allow-download and --max-length, handed to the command as one `model`: a ModelChoice."""

    @functools.wraps(command)
    def with_model_choice(
        *, model: str | None, device: str, dtype: str, allow_download: bool, max_length: int | None, **options: Any
    ) -> Any:
        return command(model=ModelChoice(model, device, dtype, allow_download, max_length), **options)

    return _model_flags(with_model_choice)


# --- what the passes run under ------------------------------------------------------------------------------


def ablation(help: str = ABLATION_HELP) -> Decorator:
    """`--ablation zero|uniform`: what a switched-off head does."""
    return click.option("--ablation", default="zero", show_default=True, type=click.Choice(ABLATIONS), help=help)


def _checked_mask_spec(ctx: click.Context, param: click.Parameter, spec: str | None) -> str | None:
    """A malformed mask is refused while the options are read; `common.head_mask` checks its numbers against the model."""
    HeadMask.check_spec(spec)
    return spec


mask = stacked(
    click.option(
        "--mask", "mask_spec", default=None, metavar="SPEC", callback=_checked_mask_spec, help="Heads to switch off, e.g. 0:3,2:*."
    ),
    ablation(),
)


# --- how a corpus job runs ---------------------------------------------------------------------------------


def batch_size(help: str = BATCH_SIZE_HELP, metavar: str | None = "N") -> Decorator:
    """`--batch-size N`: an upper bound on a corpus job's sentences a pass; by default batches fill the token cap."""
    return click.option("--batch-size", type=click.IntRange(min=1), default=None, metavar=metavar, help=help)


def seed(help: str) -> Decorator:
    """`--seed N` (0 by default); `help` says what it seeds in this command."""
    return click.option("--seed", type=int, default=0, show_default=True, help=help)


def cache_dir(help: str = CACHE_HELP) -> Decorator:
    return click.option("--cache-dir", default=None, metavar="DIR", help=help)


def cache(cache_help: str = CACHE_HELP, no_cache_help: str = NO_CACHE_HELP) -> Decorator:
    """--cache-dir DIR and --no-cache, handed to the command as one `cache_dir`: the directory, None for the
    default, or False for no cache (as the API takes it)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def with_cache(*, cache_dir: str | None, no_cache: bool, **options: Any) -> Any:
            return command(cache_dir=False if no_cache else cache_dir, **options)

        return stacked(cache_dir(cache_help), click.option("--no-cache", is_flag=True, help=no_cache_help))(with_cache)

    return decorate


# --- the data ----------------------------------------------------------------------------------------------


def data(help: str = DATA_HELP, metavar: str = "FILE") -> Decorator:
    return click.option("--data", "data", default=None, metavar=metavar, help=help)


def corpus_format(choices: tuple[str, ...] = tuple(CORPUS_FORMATS), help: str | None = CORPUS_FORMAT_HELP) -> Decorator:
    """`--format`, handed to the command as `data_format`."""
    return click.option("--format", "data_format", default="auto", show_default=True, type=click.Choice(list(choices)), help=help)


def limit(help: str = LIMIT_HELP) -> Decorator:
    return click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N", help=help)


def corpus(data_help: str = DATA_HELP, format_help: str | None = CORPUS_FORMAT_HELP, limit_help: str = LIMIT_HELP) -> Decorator:
    """TEXT or --data FILE (with --format and --limit): a corpus command's sentences."""
    return stacked(click.argument("text", required=False), data(data_help), corpus_format(help=format_help), limit(limit_help))


def splits(data_help: str, dev_help: str, test_help: str, limit_help: str) -> Decorator:
    """--data TRAIN, --dev DEV, --test TEST, --format and --limit: a probe's labelled splits."""
    return stacked(
        data(data_help, "TRAIN"),
        click.option("--dev", default=None, metavar="DEV", help=dev_help),
        click.option("--test", default=None, metavar="TEST", help=test_help),
        corpus_format(("auto", "conllu", "senteval"), help=None),
        limit(limit_help),
    )


def sentence_pooling(help: str = "A sentence from its tokens.") -> Decorator:
    return click.option("--sentence-pooling", default="cls", show_default=True, type=click.Choice(["cls", "mean"]), help=help)


pooling = stacked(
    click.option(
        "--word-pooling", default="first", show_default=True, type=click.Choice(["first", "mean"]), help="A word from its sub-words."
    ),
    sentence_pooling(),
)


def min_examples(help: str) -> Decorator:
    return click.option("--min-examples", type=click.IntRange(min=1), default=2, show_default=True, metavar="N", help=help)


# --- the input ---------------------------------------------------------------------------------------------


def pair(help: str = PAIR_HELP) -> Decorator:
    return click.option("--pair", default=None, metavar="TEXT2", help=help)


def theme(help: str = HEATMAP_THEME_HELP) -> Decorator:
    return click.option("--theme", default=None, help=help)


# --- what the command gives --------------------------------------------------------------------------------


json = click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")


def json_or_csv(command: Callable[..., Any]) -> Callable[..., Any]:
    """--json or --csv, handed to the command as `output_format` ("json", "csv" or None); both together are refused,
    where the command would print one and drop the other without a word."""

    @functools.wraps(command)
    def with_format(*, as_json: bool, as_csv: bool, **options: Any) -> Any:
        if as_json and as_csv:
            raise BertscopeError("give --json or --csv, not both: each prints the whole result")
        return command(output_format="json" if as_json else "csv" if as_csv else None, **options)

    return stacked(json, click.option("--csv", "as_csv", is_flag=True, help="Print CSV for programs."))(with_format)


def output(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--output/-o FILE`: what the command prints goes to FILE instead, written whole or not at all.

    The file is checked before the model loads; under torchrun only rank 0 writes it.
    """

    @functools.wraps(command)
    def with_output(*, output: str | None, **options: Any) -> Any:
        if output is None:
            return command(**options)
        from bertscope import runtime as distributed
        from bertscope.data.files import atomic_write, check_writable

        if not distributed.is_main():
            return command(**options)  # its printing goes nowhere (quiet_unless_main)
        check_writable(output)
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            command(**options)
        with atomic_write(output, "w") as handle:
            handle.write(buffer.getvalue())

    return click.option("--output", "-o", default=None, metavar="FILE", help="Write to FILE (atomically) instead of printing.")(with_output)


def _checked_figure_path(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    if path is not None:
        from bertscope.figures.save import check_figure_path

        check_figure_path(path)
    return path


# `--figure PATH`: also write the command's figure there, its format from the suffix; the path is judged while the
# options are read, so a bad one is refused before the model loads.
figure = click.option(
    "--figure",
    "figure",
    default=None,
    metavar="PATH",
    callback=_checked_figure_path,
    help="Also write the figure to PATH: .svg or .pdf (vector, text kept as text) or .png.",
)


report = stacked(figure, output, json_or_csv, model)  # how a report command ends
