"""What every command shares: the group, the model the options name, checks, themes, progress, output (its flags: `options`).

Nothing here imports torch at module level, so `bertscope --help` answers at once. A
command judges all it can without the model first — the text, the files it reads and
writes, the mask, and layer and head numbers against the model's config.json read as
JSON — and imports the core's torch modules only once that passed, so such a mistake
is refused in a fraction of a second. Errors the user can fix print one line and exit
with status 2.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from bertscope import __version__
from bertscope.base import collector
from bertscope.base.errors import BertscopeError
from bertscope.cli import interrupts
from bertscope.cli.interrupts import EXIT_INTERRUPTED
from bertscope.model.masks import HeadMask

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.console import Console

    from bertscope.api import Corpus, ProgressCallback
    from bertscope.base.theming import ThemeSpec
    from bertscope.model.deferred import DeferredSession
    from bertscope.model.model_files import ModelFiles
    from bertscope.model.session import Session
    from bertscope.runtime import World

EXIT_BAD_INPUT = 2


class BertscopeGroup(click.Group):
    """A click group that turns user errors into one line and exit status 2.

    A bare `bertscope`, or one whose first word is not a command (`bertscope "a text"`,
    `bertscope --model DIR`), opens the explorer.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help", "-V", "--version")):
            args = ["explore", *args]
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None:
            interrupts.naming(name)
        return name, command, rest

    def _failed_command(self, ctx: click.Context) -> click.Command | None:
        """The command that was running, whose flags an error's advice names."""
        return self.commands.get(ctx.invoked_subcommand or "")

    def invoke(self, ctx: click.Context) -> Any:
        from bertscope import runtime as distributed

        here = distributed.world()
        try:
            with interrupts.running(), quiet_unless_main(here), distributed.failures_shared():
                return super().invoke(ctx)
        except distributed.RankFailed as error:  # another rank's failure, said once, by rank 0
            if here.main:
                click.echo(f"bertscope: error: {error_line(error, self._failed_command(ctx))}", err=True)
            ctx.exit(error.status)
        except click.UsageError as error:  # click's own refusal of a flag or an argument: one line too, not its usage block
            if here.main:
                command = " ".join(name for name in ("bertscope", ctx.invoked_subcommand) if name)  # as `python -m` too
                click.echo(f"bertscope: error: {usage_line(error, command)}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except BertscopeError as error:
            if here.main or isinstance(error, distributed.RankSetupFailed):
                prefix = f"rank {here.rank}: " if distributed.started() else ""  # before the group starts, every rank sees the same
                click.echo(f"bertscope: error: {prefix}{error_line(error, self._failed_command(ctx))}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt as stop:
            # Files are written whole or not at all (temporary file, then rename), so a stop
            # leaves only what was complete before it.
            if here.main and not isinstance(stop, distributed.Terminated):  # the rank that failed has said why
                interrupts.said()
                click.echo(interrupts.line(ctx.invoked_subcommand), err=True)
            if not here.active:  # under torchrun, the process group's own teardown runs
                interrupts.exit_interrupted()
            ctx.exit(EXIT_INTERRUPTED)
        except Exception as error:
            if not here.active:
                raise
            if here.main:  # out of memory, or a bug: one line naming the rank; the traceback with BERTSCOPE_DEBUG=1
                line = distributed.failure_line(error)
                setting = distributed.failure_setting(error)  # out of memory: the flag that makes passes smaller
                if setting is not None:
                    line += f" ({flag_for(setting, self._failed_command(ctx))})"
                click.echo(f"bertscope: error: rank {here.rank}: {line}", err=True)
            if os.environ.get("BERTSCOPE_DEBUG"):
                raise
            ctx.exit(1)


@contextlib.contextmanager
def quiet_unless_main(here: World) -> Iterator[None]:
    """Under torchrun, ranks other than 0 print nothing: rank 0 speaks for the job (and writes its files)."""
    if here.main:
        yield
        return
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield


def flag_for(setting: str, command: click.Command | None = None) -> str:
    """The flag that sets `setting` (a BertscopeError's: the core speaks of settings, the CLI of flags): the
    command's own option of that name as click declares it (`prune`'s `weights` is --weights, its `data_format`
    --format), else the setting with dashes."""
    dashed = "--" + setting.replace("_", "-")
    options = [param for param in (command.params if command is not None else ()) if isinstance(param, click.Option)]
    for option in sorted(options, key=lambda option: option.name != setting):  # its name first, then its flag
        if option.name == setting or dashed in option.opts:
            flag = max(option.opts, key=len)
            return f"{flag} {option.metavar}" if option.metavar and not option.is_flag else flag
    return dashed


def usage_line(error: click.UsageError, command: str = "bertscope") -> str:
    """click's refusal as one line that names the flag (`--limit 0 is out of range: it must be at least 1`), or
    points to `command`'s help."""
    if not isinstance(error, click.BadParameter) or isinstance(error, click.MissingParameter) or error.param is None:
        message = error.format_message().rstrip(".")  # No such option '--x'. Did you mean '--y'?
        return f"{message[:1].lower()}{message[1:]} (see `{command} --help`)"
    param = error.param
    name = max(param.opts, key=len) if isinstance(param, click.Option) else param.human_readable_name
    kind = param.type
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        refused = f" is not in the range {kind._describe_range()}."
        if error.message.endswith(refused):
            return f"{name} {error.message.removesuffix(refused)} is out of range: it must be {_bounds(kind)}"
    return f"{name}: {error.message.rstrip('.')}"


def _bounds(kind: click.IntRange | click.FloatRange) -> str:
    """A range as a person says it: at least 1, between 1 and 1000, more than 0."""
    low = None if kind.min is None else f"{'more than' if kind.min_open else 'at least'} {kind.min}"
    high = None if kind.max is None else f"{'less than' if kind.max_open else 'at most'} {kind.max}"
    if low is not None and high is not None and not (kind.min_open or kind.max_open):
        return f"between {kind.min} and {kind.max}"
    return " and ".join(bound for bound in (low, high) if bound is not None)


def error_line(error: BertscopeError, command: click.Command | None = None) -> str:
    """The error's message, with the flag of `command` that sets what it is about, and the CLI's own advice."""
    from bertscope.base.errors import NoMLMHeadError

    line = str(error)
    if error.setting is not None:
        line += f" ({flag_for(error.setting, command)})"
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
    from bertscope.model.allocator import keep_freed_memory

    keep_freed_memory()  # process-wide, so set here at the entry point: forwards reuse freed attention memory


# --- the model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """A model's layer and head counts and vocabulary: enough to judge numbers without loading it."""

    num_layers: int
    num_heads: int
    vocab_size: int | None

    @classmethod
    def from_config(cls, config: dict) -> ModelShape | None:
        """The shape config.json states; None if it leaves the counts to transformers' defaults."""
        layers, heads, vocab = (config.get(key) for key in ("num_hidden_layers", "num_attention_heads", "vocab_size"))
        if not (isinstance(layers, int) and isinstance(heads, int)):
            return None
        return cls(layers, heads, vocab if isinstance(vocab, int) else None)


@dataclass
class ModelChoice:
    """The model a command was given (--model, --device, --dtype, --allow-download, --max-length).

    Its files and its shape are judged from disk without torch; `open` loads it, once.
    """

    name: str | None
    device: str = "auto"
    dtype: str = "float32"
    allow_download: bool = False
    max_length: int | None = None  # cut inputs there rather than at the model's own limit
    _files: ModelFiles | None = field(default=None, init=False, repr=False)
    _session: Session | None = field(default=None, init=False, repr=False)

    def judge_files(self) -> ModelFiles | None:
        """Its files, checked without torch, so a wrong --model fails at once.

        None with --allow-download: the files may not be here yet, and loading fetches
        them, once, and judges them then.
        """
        if self.allow_download:
            return None
        if self._files is None:
            from bertscope.model.model_files import find_model, read_config, usable_length

            files = find_model(self.name)
            positions = read_config(files.directory).get("max_position_embeddings")
            if self.max_length is not None and isinstance(positions, int):  # a --max-length over the model's, refused now
                usable_length(positions, files.family, self.max_length)
            self._files = files
        return self._files

    def shape(self) -> ModelShape:
        """Its layers and heads as config.json states them, read before torch is imported.

        Where the files are not here yet (--allow-download) or config.json leaves the
        counts out, the model is loaded to tell.
        """
        files = self.judge_files()
        if files is not None:
            from bertscope.model.model_files import read_config

            shape = ModelShape.from_config(read_config(files.directory))
            if shape is not None:
                return shape
        session = self.open()
        return ModelShape(session.num_layers, session.num_heads, session.info.vocab_size)

    def open(self, spinner: bool = True) -> Session:
        """Load the model, with a spinner on a terminal so a person knows what is happening (none inside a progress bar)."""
        if self._session is None:
            from rich.console import Console

            self.judge_files()
            console = Console(stderr=True)
            status = console.status("loading model…") if spinner and console.is_terminal else contextlib.nullcontext()
            with status, collector.paused():  # imports make no garbage worth a walk of their objects (base.collector)
                from bertscope.api import load

                self._session = load(
                    self.name, device=self.device, dtype=self.dtype, allow_download=self.allow_download, max_length=self.max_length
                )
        return self._session

    def deferred(self) -> Session | DeferredSession:
        """The model for a job whose passes may all be cached (`probe`): loaded only if one is not, within the job.

        Where the files are not here yet (--allow-download), loaded now.
        """
        files = self.judge_files()
        if files is None or self._session is not None:
            return self.open()
        from bertscope.model.deferred import DeferredSession

        return DeferredSession.from_files(files, self.device, lambda: self.open(spinner=False), self.dtype, self.max_length)


# --- checks that need no model --------------------------------------------------------------


def check_text(text: str | None, advice: str, pair: str | None = None) -> None:
    """Refuse an empty TEXT or --pair before the model loads; `advice` says what to give instead."""
    if text is not None and not text.strip():
        raise BertscopeError(f"the text is empty; {advice}")
    if pair is not None and not pair.strip():
        raise BertscopeError("the pair text is empty; give a second sentence or leave --pair out")


def check_index(value: int, count: int, name: str) -> None:
    if not 0 <= value < count:
        raise BertscopeError(f"--{name} {value} is out of range: this model has {count} {name}s (0-{count - 1})")


def check_hidden_layer(value: int | None, shape: ModelShape, flag: str = "--layer") -> None:
    """A hidden-state layer: 0 is the embeddings, l+1 the output of layer l."""
    if value is not None and not 0 <= value <= shape.num_layers:
        raise BertscopeError(f"{flag} {value} is out of range: hidden-state layers are 0 (embeddings) to {shape.num_layers}")


def check_readable(path: str) -> None:
    """Refuse a missing, unreadable or directory input file before the model loads."""
    from bertscope.data.corpus import readable_file

    readable_file(path)


def read_corpus(text: str | None, data: str | None, data_format: str, limit: int | None) -> Corpus:
    """TEXT or --data's sentences (default: the sample corpus) read whole now: a file that cannot be read is refused
    before the model loads, and a sample of rows is drawn from all of them."""
    from bertscope.api import Corpus, corpus

    chosen = corpus(text, data=data, format=data_format, limit=limit)
    return Corpus(list(chosen.sentences), chosen.source, chosen.report)


def head_mask(spec: str | None, shape: ModelShape) -> HeadMask:
    """The --mask spec as a HeadMask, its layers and heads checked against the model's shape."""
    return HeadMask.parse(spec, shape.num_layers, shape.num_heads)


def chosen_theme(theme: str | None) -> ThemeSpec:
    """The theme named by --theme (a built-in name or a file; default: dark), an unknown one refused in one line."""
    from bertscope.base.theming import DEFAULT_THEME, ThemeError, load_theme

    try:
        return load_theme(theme or DEFAULT_THEME)
    except ThemeError as error:
        raise BertscopeError(str(error)) from None


# --- running and printing ------------------------------------------------------------------------


@contextlib.contextmanager
def notes_as_warnings() -> Iterator[None]:
    """Print each `BertscopeNote` the API issues inside the block as a `bertscope: warning:` line."""
    import warnings

    from bertscope.base.errors import BertscopeNote

    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always", BertscopeNote)
        yield
    for note in notes:
        if issubclass(note.category, BertscopeNote):
            warn(str(note.message))
        else:
            warnings.warn_explicit(note.message, note.category, note.filename, note.lineno)


@contextlib.contextmanager
def api_call(what: str) -> Iterator[ProgressCallback]:
    """Run a long `bertscope.api` function: yields its `progress=` callback (a bar on a terminal),
    with its notes printed as warnings."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with notes_as_warnings():
        if not console.is_terminal:
            yield None
            return
        with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console, transient=True) as bar:
            task = bar.add_task(what, total=None)
            yield lambda step: bar.update(task, description=f"{what}: {step.stage}", completed=step.done, total=step.total)


def report_console() -> Console:
    """The console a command prints its report on (stdout): every table in it whole at the width, 80 columns in a
    pipe or a file (bertscope.render.fit)."""
    from rich.console import Console

    from bertscope.render.fit import FitTables

    console = Console()
    console.push_render_hook(FitTables())
    return console


def warn(message: str) -> None:
    click.echo(f"bertscope: warning: {message}", err=True)


def print_json(payload: dict) -> None:
    click.echo(json.dumps(payload, indent=None, separators=(",", ":")))


def print_csv(rows: Iterable[Sequence]) -> None:
    """Rows (the header first) as CSV on stdout, for programs."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    click.echo(buffer.getvalue(), nl=False)


def record_rows(records: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """Records (a result's `table()`) as CSV rows: the first one's keys are the header; a key a record lacks, an empty cell."""
    header = list(records[0])
    return [header, *([record.get(key, "") for key in header] for record in records)]


def printed(output_format: str | None, payload: Callable[[], dict], rows: Callable[[], Iterable[Sequence]] | None = None) -> bool:
    """Print the result for programs where --json or --csv asked for it (`payload`: the JSON; `rows`: the CSV's,
    the header first), and say whether it did; where not, the command prints its report."""
    if output_format == "json":
        print_json(payload())
        return True
    if output_format == "csv" and rows is not None:
        print_csv(rows())
        return True
    return False


def write_figure(path: str | None, draw: Callable[[], Figure]) -> None:
    """Draw the figure and write it to `path` (with none, nothing is drawn; under torchrun rank 0 writes), saying where."""
    if path is None:
        return
    from bertscope import runtime as distributed

    if not distributed.is_main():
        return
    from bertscope.figures.save import save_figure

    click.echo(f"wrote {save_figure(draw(), path)}", err=True)
