"""The model and one input through it: `explore` (the explorer), `info`, `attention` and `export`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from bertscope.base import collector
from bertscope.base.errors import BertscopeError
from bertscope.cli import interrupts, options
from bertscope.cli.common import (
    ModelChoice,
    check_index,
    check_text,
    chosen_theme,
    head_mask,
    notes_as_warnings,
    print_csv,
    print_json,
    report_console,
    warn,
    write_figure,
)

if TYPE_CHECKING:
    from bertscope.model.masks import Ablation
    from bertscope.session_backend import SessionBackend


@click.command()
@click.argument("text", required=False)
@options.pair()
@options.theme("dark, light, colorblind, or a theme of your own (see the README).")
@click.option(
    "--session",
    "session_file",
    default=None,
    metavar="FILE",
    help="Restore the sentence, masks and selection from FILE, and keep saving them there.",
)
@click.option(
    "--export-dir", default=".", show_default=True, type=click.Path(file_okay=False), help="Where `e` saves a view's figure and its data."
)
@click.option(
    "--figure-format",
    type=click.Choice(["svg", "pdf", "png"]),
    default="svg",
    show_default=True,
    help="What `e` writes the figure as: SVG or PDF keep the text as text, PNG is an image.",
)
@click.option(
    "--glyphs/--colours",
    "glyphs",
    default=None,
    help="Draw heatmaps with shade characters, or with colours. Default: colours when the terminal has 256 or more and NO_COLOR is unset.",
)
@options.model
def explore(
    text: str | None,
    pair: str | None,
    theme: str | None,
    session_file: str | None,
    export_dir: str,
    figure_format: str,
    glyphs: bool | None,
    model: ModelChoice,
) -> None:
    """Open the explorer on TEXT (default: an example sentence, or the one in --session)."""
    from bertscope.data.files import check_writable
    from bertscope.ui.state import check_session_file  # torch-free, as is all of bertscope.ui

    check_text(text, "give a sentence, or leave it out for the example")
    if theme is not None:
        chosen_theme(theme)  # an unknown theme fails here, with the list of themes
    if session_file is not None:
        check_session_file(session_file)  # a file that is not a session is refused, and left as it is
        check_writable(session_file)
    model.judge_files()  # a model the explorer cannot read is refused here, like any command's
    check_terminal()
    starting = collector.Pause()  # until the model is loaded: imports make no garbage worth a walk of their objects
    import_model_code()
    from bertscope.ui.app import ExplorerApp

    def open_backend(report: Callable[[str], None]) -> SessionBackend:
        try:
            report("importing torch and transformers…")
            from bertscope.api import load
            from bertscope.session_backend import SessionBackend

            report(f"loading {model.name or 'the bundled all-MiniLM-L6-v2'}…")
            session = load(
                model.name, device=model.device, dtype=model.dtype, allow_download=model.allow_download, max_length=model.max_length
            )
            return SessionBackend(session)
        finally:
            starting.end()

    app = ExplorerApp(
        open_backend,
        text=text,
        pair=pair,
        theme=theme,
        session_file=session_file,
        export_dir=export_dir,
        figure_format=figure_format,
        glyphs=glyphs,
    )
    interrupts.release()  # Ctrl-C is a key to the explorer, and Textual restores the terminal itself
    try:
        app.run()
    finally:  # the explorer closed before its model loaded
        starting.end()
    if app.load_error is not None:  # the files looked right, but the model would not load
        raise BertscopeError(app.load_error)
    sys.exit(app.return_code or 0)


def import_model_code() -> None:
    """Start importing what opening the model needs (torch and transformers: seconds) on a thread of its own, so that
    it runs while the explorer's modules load and its first frame is drawn, not after; the loading worker's imports
    find the modules done, or wait for them. A failure is left for the worker's own import to report."""
    import importlib
    import threading

    def run() -> None:
        try:
            importlib.import_module("bertscope.session_backend")
        except Exception:  # noqa: S110 - reported by the worker's import, in the explorer's words
            pass

    threading.Thread(target=run, name="bertscope-imports", daemon=True).start()


def check_terminal() -> None:
    """The explorer draws on a terminal and reads its keys: without one (input from a file or /dev/null, a job
    scheduler) Textual's input thread would read end-of-file for ever at full speed. Refuse, naming what runs
    without one."""
    missing = [name for name, stream in (("input", sys.stdin), ("output", sys.stdout)) if not (stream and stream.isatty())]
    if not missing:
        return
    context = click.get_current_context()
    group = context.parent.command if context.parent is not None else None
    names = sorted(name for name in getattr(group, "commands", {}) if name != "explore")
    raise BertscopeError(
        f"the explorer needs a terminal, and its {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not one; "
        f"the headless commands need none: bertscope {', '.join(names)} (bertscope COMMAND --help)"
    )


INFO_LABELS = {
    "source": "model",
    "family": "family",
    "architecture": "architecture",
    "num_layers": "layers",
    "num_heads": "heads per layer",
    "hidden_size": "hidden size",
    "vocab_size": "vocabulary",
    "max_length": "max tokens",
    "has_mlm_head": "MLM head",
    "num_labels": "labels",
    "device": "device",
    "dtype": "dtype",
    "cpu_linear": "CPU linear kernels",
    "parameters": "parameters",
    "fingerprint": "fingerprint",
    "pruned_heads": "pruned heads",
    "hidden_states": "hidden states",
}


@click.command()
@options.model
@options.json
def info(model: ModelChoice, as_json: bool) -> None:
    """What the model is: family, layers, heads, sizes, MLM head, device."""
    details = model.open().info.as_dict()
    if as_json:
        print_json(details)
        return
    from rich.table import Table

    table = Table(show_header=False, box=None, padding=(0, 2))
    for key, label in INFO_LABELS.items():
        value = details[key]
        if value is None and key in ("num_labels", "cpu_linear") or key == "pruned_heads" and not value:
            continue
        if isinstance(value, bool):
            value = "yes" if value else "no (fill-in needs a model with an MLM head)"
        elif key == "parameters":
            value = f"{value:,} ({value / 1e6:.1f} M)"
        elif key == "max_length":
            value = length_said(details)
        table.add_row(f"[bold]{label}[/]", str(value))
    report_console().print(table)


def length_said(details: dict) -> str:
    """The most tokens a command feeds the model, and why, where the model or its tokenizer's file says otherwise."""
    length, own, stated = details["max_length"], details.get("model_limit"), details.get("tokenizer_limit")
    why = []
    if own is not None and length < own:
        why.append(f"--max-length; the model takes {own}")
    elif stated is not None and stated != length:
        why.append("the model's position embeddings")
    if stated is not None and stated != length:
        why.append(f"its tokenizer's file says {stated}" + (f": --max-length {stated} cuts there" if stated < length else ""))
    return f"{length} ({'; '.join(why)})" if why else str(length)


@click.command()
@click.argument("text")
@options.pair()
@click.option("--layer", "-l", type=int, required=True, help="Layer, from 0.")
@click.option("--head", "-H", "head", type=int, required=True, help="Head, from 0.")
@options.mask
@options.json_or_csv
@options.theme()
@click.option(
    "--scale",
    type=click.Choice(["max", "row", "fixed", "log"]),
    default="max",
    show_default=True,
    help="Colour scale: 0 to the map's largest weight, each row to its own largest, fixed 0–1, or three decades (log).",
)
@click.option("--dense", is_flag=True, help="Two query rows a line (half blocks), for long inputs; needs 256 colours.")
@click.option(
    "--norms",
    is_flag=True,
    help="Show the value-weighted norms ‖α_ij f_h(x_j)‖ (Kobayashi et al. 2020) instead of the weights α_ij.",
)
@options.figure
@options.model
def attention(
    text: str,
    pair: str | None,
    layer: int,
    head: int,
    mask_spec: str | None,
    ablation: Ablation,
    output_format: str | None,
    theme: str | None,
    scale: str,
    dense: bool,
    norms: bool,
    figure: str | None,
    model: ModelChoice,
) -> None:
    """Show one head's attention over TEXT as a heatmap (rows attend to columns).

    With --norms, each cell is ‖α_ij f_h(x_j)‖, f_h(x) = (x W_V + b_V) W_O of the head, the
    bias of W_O left out (Kobayashi et al. 2020): how much the head moves from token j into
    token i, not only where it looks.
    """
    check_text(text, "give a sentence to analyse", pair)
    if norms and scale == "fixed":
        raise BertscopeError("--scale fixed is the 0–1 range of weights; norms have no fixed range: use --scale max, row or log")
    colormap = chosen_theme(theme).heatmap if output_format is None else None
    shape = model.shape()
    check_index(layer, shape.num_layers, "layer")
    check_index(head, shape.num_heads, "head")
    mask = head_mask(mask_spec, shape)
    session = model.open()
    from bertscope import api

    with notes_as_warnings():
        encoding = api.encoded(session, text, pair)
    attention, layer_norms = session.layer_maps(encoding, layer, mask=mask, ablation=ablation, norms=norms)
    weights = (layer_norms if norms and layer_norms is not None else attention)[head]
    tokens = list(encoding.tokens)
    window = session.attention_window(layer)
    if window is not None and len(tokens) > window + 1:
        warn(
            f"layer {layer} is local: its heads see ±{window} tokens, so the cells beyond are out of their reach, "
            "not attention they chose not to pay"
        )
    if figure is not None:
        from bertscope.figures.heatmaps import attention_heatmap
        from bertscope.render.heatmap import beyond_reach

        notes = []
        if len(mask):
            off = f"head {layer}:{head} switched off" if mask.is_masked(layer, head) else f"heads off: {mask.spec()}"
            notes.append(f"{off} ({ablation} ablation)")
        if window is not None and len(tokens) > window + 1:
            notes.append(f"local layer: its heads see ±{window} tokens (grey: out of reach)")
        quantity, note, shown = "norm" if norms else "weight", "; ".join(notes) or None, beyond_reach(weights, window)
        rest = "--csv writes every token"
        write_figure(
            figure, lambda: attention_heatmap(shown, tokens, layer=layer, head=head, quantity=quantity, scale=scale, note=note, rest=rest)
        )
    if output_format == "json":
        payload = {
            "model": session.info.source,
            "layer": layer,
            "head": head,
            "window": window,
            "mask": mask.spec(),
            "ablation": ablation,
            "masked": mask.is_masked(layer, head),
            "tokens": tokens,
            "attention": attention[head].round(6).tolist(),
        }
        if norms:
            from bertscope.analyses.attention.patterns_results import NORM_DEFINITION

            payload.update({"norms": weights.round(6).tolist(), "norm_definition": NORM_DEFINITION})
        print_json(payload)
        return
    if output_format == "csv":
        print_csv([["from \\ to", *tokens], *([token, *(f"{value:.6f}" for value in row)] for token, row in zip(tokens, weights))])
        if norms:
            from bertscope.analyses.attention.patterns_results import NORM_DEFINITION

            click.echo(f"cells: {NORM_DEFINITION}", err=True)
        return
    from rich.console import Console

    from bertscope.render.heatmap import AttentionHeatmap, Cells, Labels, Scale, beyond_reach, reach_note, terminal_window, window_note

    title = f"layer {layer} · head {head}" + (" · value-weighted norms ‖α f(x)‖" if norms else "")
    if len(mask):
        title += f" · mask {mask.spec()} ({ablation})"
    title += reach_note(window, len(tokens))
    assert colormap is not None  # chosen for any output but JSON and CSV
    console = report_console()
    visible = min(len(tokens), terminal_window(tokens, console.width, dense)) if console.is_terminal else len(tokens)
    console.print(
        AttentionHeatmap(
            beyond_reach(weights, window)[:visible, :visible],
            tokens[:visible],
            tokens[:visible],
            colormap,
            title=title,
            masked=mask.is_masked(layer, head),
            scale=Scale(scale, quantity="‖αf‖" if norms else None),
            cells=Cells(width=None, dense=dense),
            labels=Labels(width=None),
        )
    )
    if visible < len(tokens):
        console.print(window_note(visible, len(tokens)), style="dim", highlight=False)
    if norms:
        from bertscope.analyses.attention.patterns_results import NORM_DEFINITION

        Console(stderr=True).print(f"[dim]cells: {NORM_DEFINITION}[/]", highlight=False)


@click.command()
@click.argument("text")
@options.pair()
@options.mask
@click.option("--output", "-o", required=True, metavar="FILE.npz", help="Where to write the arrays.")
@options.model
def export(text: str, pair: str | None, mask_spec: str | None, ablation: Ablation, output: str, model: ModelChoice) -> None:
    """Write tokens, attentions, hidden states (and MLM logits) of TEXT to an .npz file.

    Arrays: tokens [T], input_ids [T], token_type_ids [T], word_ids [T] (-1 for special
    tokens), special [T], attentions [L,H,T,T], norms [L,H,T,T] (the value-weighted norms
    ‖α_ij f_h(x_j)‖ of Kobayashi et al. 2020, named in norm_definition), hidden_states
    [L+1,T,D] (0 = embeddings), mlm_logits [T,V] when the model has an MLM head, and the mask
    spec and ablation. Written with one layer's maps in memory at a time (analyses.export).
    """
    from bertscope.data.files import check_writable

    check_text(text, "give a sentence to analyse", pair)
    check_writable(output)
    mask = head_mask(mask_spec, model.shape())
    session = model.open()
    from bertscope import api

    with notes_as_warnings():
        encoding = api.encoded(session, text, pair)
    from bertscope.analyses.export import export_input

    try:
        written = export_input(session, encoding, mask, ablation, output)
    except OSError as error:
        raise BertscopeError(f"cannot write {output}: {error.strerror or error}") from None
    shapes = ", ".join(f"{name} {written[name]}" for name in ("attentions", "norms", "hidden_states", "mlm_logits") if name in written)
    click.echo(f"wrote {output}: {len(encoding)} tokens; {shapes}", err=True)
