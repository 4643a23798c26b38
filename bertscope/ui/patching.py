"""The patching screen (`X`): which heads, layers and positions carry the difference between two sentences.

The clean input is the explorer's sentence (and pair); the person types the corrupted one
under it, chooses what is measured (`m`: preserve, a probe's decision, an MLM answer, a
classifier's class) and the direction (`d`: denoise or noise), and Enter runs activation
patching (analyses.patching) in a worker, with progress, escape to cancel. The head
grid is shaded on a diverging scale (red: the head carries the difference, blue: it works
against it), beside the layers' two writes and the residual-stream grid, token by hidden
state. Enter on a head opens it in the main view; the result stays on the app (ui.kept).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from threading import Event
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Static

from bertscope import api
from bertscope.analyses.patching_results import PatchingResult
from bertscope.base.progress import Progress
from bertscope.base.theming import Colormap
from bertscope.data.probing_tasks import TASKS
from bertscope.model.labels import token_labels
from bertscope.model.masks import HeadMask
from bertscope.model.results import ModelInfo
from bertscope.render.heatmap import GLYPHS
from bertscope.render.patching import effect_cell, effect_style, layers_table, legend, positions_grid
from bertscope.ui.backend import Backend
from bertscope.ui.corpus_screen import RunScreen
from bertscope.ui.export import json_text, save_screen
from bertscope.ui.help import BACK_KEY, EXPORT_KEY, HELP_KEY, OPEN_HEAD_KEY
from bertscope.ui.kept import KeptResults, KeptRun
from bertscope.ui.widgets.footer import KeyFooter
from bertscope.ui.widgets.head_grid import HeadGrid
from bertscope.ui.widgets.job_progress import JobProgress
from bertscope.ui.widgets.pattern_grid import PatternGrid

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DEFAULT_TASK = "subject_number"  # the number of the subject's head noun: the worked example's question
DIRECTION_NOTES = {
    "denoise": "clean into corrupted: 1 restores the whole difference",
    "noise": "corrupted into clean: 1 destroys the whole difference",
}
ARGUMENTS = {  # what the box beside the corrupted sentence asks for, per metric
    "probe": "probing task [class A,B], e.g. subject_number",
    "mlm": "answers A,B at the [MASK] (empty: the top guesses)",
    "class": "classes A,B (empty: the top two)",
}
FULL_GRID_WIDTH = 14  # the token column of the numbered residual-stream grid; each hidden state adds 6 columns
COMPACT_TOKEN = 10


def metrics_for(info: ModelInfo) -> list[str]:
    """What this model can be measured by: preserve and a probe always, MLM answers and classes where it has the head."""
    metrics = ["preserve", "probe"]
    if info.has_mlm_head:
        metrics.append("mlm")
    if info.num_labels:
        metrics.append("class")
    return metrics


def parse_argument(metric: str, argument: str) -> tuple[str | None, tuple[str, str] | None, tuple[str, str] | None]:
    """(task, answers, classes) from the box's text; ValueError with a one-line reason when it cannot be read."""
    words = argument.split()
    if metric == "probe":
        if not words:
            raise ValueError(f"the probe metric needs a task; one of: {', '.join(TASKS)}")
        if words[0] not in TASKS:
            raise ValueError(f"unknown task {words[0]!r}; use one of: {', '.join(TASKS)}")
        return words[0], None, _pair_of(words[1:], "classes")
    if metric == "mlm":
        return None, _pair_of(words, "answers"), None
    if metric == "class":
        return None, None, _pair_of(words, "classes")
    return None, None, None


def _pair_of(words: list[str], what: str) -> tuple[str, str] | None:
    if not words:
        return None
    names = [name.strip() for name in " ".join(words).split(",") if name.strip()]
    if len(names) != 2:
        raise ValueError(f"give two {what} as A,B (e.g. is,are), not {len(names)}")
    return names[0], names[1]


SCALES = (0.05, 0.1, 0.2, 0.25, 0.5, 1.0)  # the head grid's colours reach full strength at ± one of these


def grid_scale(effects: np.ndarray) -> float:
    """The smallest of SCALES that holds the largest effect: one head rarely carries much, and ±1 would leave them all white."""
    largest = float(np.nanmax(np.abs(effects))) if np.isfinite(effects).any() else 1.0
    return next((scale for scale in SCALES if largest <= scale), 1.0)


class EffectGrid(PatternGrid):
    """The head grid on the diverging effect scale of render.patching: red +, white 0, blue −, full at ± `value_range`."""

    def _legend(self) -> str:
        return "no run yet: / and Enter" if self.values is None else super()._legend()

    def _append_cell(self, text: Text, layer: int, head: int) -> None:
        if self.values is None:
            return super()._append_cell(text, layer, head)
        value = float(self.values[layer, head])
        chosen = (layer, head) == self.selected
        if self.glyphs:  # no colour: the sign and a shade of the size
            cell = glyph_cell(value / self.value_range[1])
            text.append(f"[{cell[1]}]" if chosen else cell, style=Style(bold=chosen, reverse=chosen))  # the value line gives the sign
            return
        style = effect_style(value / self.value_range[1])
        text.append("▸ ◂" if chosen else "   ", style=style + Style(bold=True) if chosen else style)

    def _append_range(self, text: Text) -> None:
        """The selected head's effect, then the scale: −s, blue to white to red, +s."""
        layer, head = self.selected
        assert self.values is not None  # drawn only under values
        value = f"{layer}:{head} = {float(self.values[layer, head]):+.3f}"
        scale = f"{self.value_range[1]:g}"
        text.append(f"{value}  −{scale} ", style="dim")
        if self.glyphs:
            text.append("−" + "".join(reversed(GLYPHS)) + "+" + "".join(GLYPHS), style="dim")
        else:
            cells = max(3, min(9, self._width() - len(value) - 6 - 2 * len(scale)))
            cells -= 1 - cells % 2  # odd: white in the middle
            for index in range(cells):
                text.append(" ", style=effect_style(-1.0 + 2.0 * index / (cells - 1)))
        text.append(f" +{scale}", style="dim")


def glyph_cell(value: float) -> str:
    """An effect without colour: its sign and a shade of its size (saturated at ±1)."""
    if not np.isfinite(value):
        return " · "
    return ("−" if value < 0 else "+") + GLYPHS[round(min(abs(value), 1.0) * (len(GLYPHS) - 1))] + " "


def compact_positions(effects: np.ndarray, tokens: Sequence[str], differing: Collection[int] = (), glyphs: bool = False) -> Table:
    """The residual-stream grid in 3 columns a hidden state (colour, or glyphs; the numbers are in the wide grid and the export)."""
    table = Table(box=None, padding=(0, 0), show_edge=False, pad_edge=False)
    table.add_column("token", no_wrap=True)
    for layer in range(effects.shape[0]):
        table.add_column(f"{layer:>2} ", no_wrap=True)
    for position, token in enumerate(tokens):
        name = token if len(token) <= COMPACT_TOKEN - 3 else token[: COMPACT_TOKEN - 4] + "…"
        label = Text(f"{position:>2} {name}".ljust(COMPACT_TOKEN), style="bold" if position in differing else "dim")
        if position in differing:
            label = Text(f"{position:>2}*{name}".ljust(COMPACT_TOKEN), style="bold")
        cells = (Text(glyph_cell(value)) if glyphs else Text("   ", style=effect_style(value)) for value in effects[:, position])
        table.add_row(label, *cells)
    return table


def strongest(effects: np.ndarray, tokens: Sequence[str], count: int = 3) -> Text:
    """The largest effects of the residual-stream grid, by size: 'keys@1 +0.98'."""
    order = np.argsort(-np.abs(np.nan_to_num(effects)), axis=None)[:count]
    text = Text("largest: ", style="dim")
    for rank, flat in enumerate(order):
        layer, position = np.unravel_index(flat, effects.shape)
        if rank:
            text.append(" · ", style="dim")
        text.append(f"{tokens[position]}@{layer} ")
        text.append_text(effect_cell(float(effects[layer, position])).copy())
    return text


class PatchingScreen(RunScreen[PatchingResult, tuple[int, int] | None]):
    """`X` in the explorer: activation patching between the explorer's sentence and a corrupted one."""

    name_kept = "patching"
    job_title = "patching"
    AUTO_FOCUS = "#patch-grid"
    BINDINGS = [
        BACK_KEY,
        HELP_KEY,
        OPEN_HEAD_KEY,
        Binding("m", "next_metric", "metric"),
        Binding("d", "next_direction", "direction"),
        Binding("r", "run", "run"),
        EXPORT_KEY,
        Binding("slash", "focus_corrupt", "corrupted"),
    ]
    DEFAULT_CSS = """
    PatchingScreen #patch-top { height: auto; }
    PatchingScreen #patch-clean { height: auto; width: 1fr; padding: 0 1; }
    PatchingScreen #patch-settings { height: auto; width: auto; padding: 0 1; }
    PatchingScreen #patch-inputs { height: auto; }
    PatchingScreen #patch-corrupt, PatchingScreen #patch-corrupt-pair { width: 1fr; }
    PatchingScreen #patch-argument { width: 28; }
    PatchingScreen .progress-line { height: auto; padding: 0 1; }
    PatchingScreen .progress-text { padding-left: 2; width: 1fr; }
    PatchingScreen #patch-body { height: 1fr; }
    PatchingScreen #patch-left { width: auto; min-width: 30; }
    PatchingScreen #patch-grid { border: round $accent; padding: 0 1; height: auto; }
    PatchingScreen #patch-head { padding: 0 1; height: auto; }
    PatchingScreen #patch-side { width: 1fr; padding: 0 1; }
    PatchingScreen #patch-side:focus { background: $boost; }
    """

    def __init__(
        self,
        backend: Backend,
        clean: str,
        clean_pair: str | None,
        colormap: Colormap,
        glyphs: bool,
        selected: tuple[int, int],
        kept: KeptResults | None = None,
    ) -> None:
        super().__init__(kept)
        self.backend, self.colormap, self.glyphs = backend, colormap, glyphs
        self.clean, self.clean_pair = clean, clean_pair or None
        self.selected = selected
        self.metrics = metrics_for(backend.info)
        self.metric, self.direction = "preserve", "denoise"
        self.arguments = {"probe": DEFAULT_TASK, "mlm": "", "class": ""}  # what was typed for each metric
        self._asked: dict[str, Any] = {}  # what the run under way was asked, to keep with its result

    # layout

    def compose(self) -> ComposeResult:
        pair = f"  ‖ {self.clean_pair}" if self.clean_pair else ""
        with Horizontal(id="patch-top"):
            yield Static(Text.assemble(("clean  ", "bold"), self.clean + pair), id="patch-clean")
            yield Static("", id="patch-settings")
        with Horizontal(id="patch-inputs"):
            yield Input(self.clean, placeholder="the corrupted sentence (same token count): change a word, then Enter", id="patch-corrupt")
            if self.clean_pair:
                yield Input(self.clean_pair, placeholder="the corrupted second segment", id="patch-corrupt-pair")
            yield Input("", id="patch-argument")
        with Horizontal(classes="progress-line"):
            yield JobProgress()
            yield Static("", classes="progress-text")
        with Horizontal(id="patch-body"):
            with VerticalScroll(can_focus=False, id="patch-left"):
                yield EffectGrid(self.colormap, id="patch-grid")
                yield Static("", id="patch-head")
            yield VerticalScroll(Static("", id="patch-charts"), id="patch-side")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one(EffectGrid).set_up("head effects", self.backend.num_layers, self.backend.num_heads, self.colormap, self.glyphs)
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None:
            view = kept.view
            self.metric = view["metric"] if view["metric"] in self.metrics else "preserve"
            self.direction, self.arguments = view["direction"], dict(view["arguments"])
            if (view["clean"], view["clean_pair"]) == (self.clean, self.clean_pair):  # the same sentence: its result
                self.query_one("#patch-corrupt", Input).value = view["corrupt"]
                if self.clean_pair:
                    self.query_one("#patch-corrupt-pair", Input).value = view["corrupt_pair"] or ""
                self._asked = dict(view)
                self.result = cast(PatchingResult, kept.result)  # kept under this screen's name
                self.selected = tuple(view.get("selected", self.selected))
                self.query_one(JobProgress).finished()
                self.say(f"{self.done_text()} · kept from before (r runs again)")
                self.call_after_refresh(self.draw)
        self.show_settings()
        if self.result is None:
            self.say("/ types the corrupted sentence, Enter runs")

    def show_settings(self) -> None:
        """The box beside the corrupted sentence asks for what the metric needs; the top line says metric and direction."""
        box = self.query_one("#patch-argument", Input)
        box.display = self.metric in ARGUMENTS
        box.placeholder = ARGUMENTS.get(self.metric, "")
        box.value = self.arguments.get(self.metric, "")
        self.query_one("#patch-settings", Static).update(
            Text.assemble(("m", "bold"), "etric ", (self.metric, "bold"), " · ", ("d", "bold"), "irection ", (self.direction, "bold"))
        )

    # settings

    def action_next_metric(self) -> None:
        self._remember_argument()
        self.metric = self.metrics[(self.metrics.index(self.metric) + 1) % len(self.metrics)]
        self.show_settings()
        offered = ", ".join(self.metrics)
        self.notify(f"metric: {self.metric} (this model offers {offered}); r runs it", timeout=3)

    def action_next_direction(self) -> None:
        self.direction = "noise" if self.direction == "denoise" else "denoise"
        self.show_settings()
        self.notify(f"{self.direction}: {DIRECTION_NOTES[self.direction]}", timeout=4)

    def _remember_argument(self) -> None:
        if self.metric in ARGUMENTS:
            self.arguments[self.metric] = self.query_one("#patch-argument", Input).value

    def action_focus_corrupt(self) -> None:
        self.query_one("#patch-corrupt", Input).focus()

    # running

    @on(Input.Submitted)
    def submitted(self) -> None:
        self.action_run()

    def action_run(self) -> None:
        self._remember_argument()
        corrupt = self.query_one("#patch-corrupt", Input).value.strip()
        corrupt_pair = self.query_one("#patch-corrupt-pair", Input).value.strip() or None if self.clean_pair else None
        if not self.clean.strip():
            self.notify("the explorer has no sentence: type one there first (escape, then /)", severity="warning")
            return
        if not corrupt:
            self.notify("the corrupted sentence is empty: type it (the clean one with a word changed), then Enter", severity="warning")
            return
        try:
            task, answers, classes = parse_argument(self.metric, self.arguments.get(self.metric, ""))
        except ValueError as error:
            self.notify(str(error), severity="error", timeout=8)
            return
        self.query_one(EffectGrid).focus()
        self._asked = {
            "clean": self.clean,
            "clean_pair": self.clean_pair,
            "corrupt": corrupt,
            "corrupt_pair": corrupt_pair,
            "metric": self.metric,
            "direction": self.direction,
            "arguments": dict(self.arguments),
        }
        clean, clean_pair, metric, direction = self.clean, self.clean_pair, self.metric, self.direction

        def job(cancel: Event) -> Iterable[Progress[PatchingResult]]:
            return self.backend.steps(
                api.patch,
                None,
                clean,
                corrupt,
                pair=clean_pair,
                corrupt_pair=corrupt_pair,
                metric=metric,
                answers=answers,
                classes=classes,
                task=task,
                direction=direction,
                cancel=cancel,
            )

        self.start_run(f"patching ({self.metric}, {self.direction})… · escape cancels", job)

    def kept_run(self, result: PatchingResult) -> KeptRun:
        return KeptRun(self._asked["corrupt"], "", "", result, self._asked)

    def done_text(self) -> str:
        result = self.result
        assert result is not None  # said once the run is done
        clean, corrupt = token_labels(result.tokens), token_labels(result.corrupt_tokens)
        differing = ", ".join(f"{clean[i]}→{corrupt[i]}" for i in result.differing)
        return f"{result.metric} · {result.direction} · {differing}"

    def keep_view(self) -> dict[str, Any]:
        """What the run was asked, and the head last looked at, to come back to it."""
        return self._asked | {"selected": self.selected}

    def action_open_head(self) -> None:
        self.job.cancel()
        self.dismiss(self.selected)

    def action_export(self) -> None:
        data = None if self.result is None else json_text(self.result.as_json() | {"model": self.backend.info.source})
        save_screen(self.app, self.name_kept, data, ".json", self.figure)

    def figure(self) -> Figure:
        """The first sweep run, on a diverging scale centred on 0 (the result's own figure)."""
        assert self.result is not None  # `e` exports only a result
        return self.result.figure()

    # drawing

    def on_head_grid_selected(self, message: HeadGrid.Selected) -> None:
        self.selected = (message.layer, message.head)
        self.draw()

    def draw(self) -> None:
        result = self.result
        if result is None or not self.is_mounted:
            return
        grid = self.query_one(EffectGrid)
        layer, head = self.selected
        if result.heads is not None:
            scale = grid_scale(result.heads)
            grid.show(result.heads, (-scale, scale), f"effect ({result.direction})", HeadMask.none(*result.heads.shape), self.selected)
        lines = []
        if result.heads is not None:
            lines.append((Text(f"head {layer}:{head}".ljust(16), style="bold"), effect_cell(float(result.heads[layer, head]))))
        if result.layers is not None:
            lines.append((Text(f"L{layer} attention".ljust(16)), effect_cell(float(result.layers[layer, 0]))))
            lines.append((Text(f"L{layer} feed-forward".ljust(16)), effect_cell(float(result.layers[layer, 1]))))
        details = Text("\n").join([label + cell for label, cell in lines] + [Text("Enter: this head's attention", style="dim")])
        self.query_one("#patch-head", Static).update(details)
        self.query_one("#patch-charts", Static).update(self.charts())

    def charts(self) -> Group:
        """What m is and its two values, the layers' writes, the residual stream, the scale."""
        result = self.result
        assert result is not None  # drawn only under a result
        width = self.query_one("#patch-side").content_size.width or 40
        parts: list[RenderableType] = [
            Text.assemble(("m", "bold"), f" = {result.metric_description}"),
            Text.assemble(
                "m(clean) ", (f"{result.clean_metric + 0.0:.4g}", "bold"), " · m(corrupt) ", (f"{result.corrupt_metric + 0.0:.4g}", "bold")
            ),
            Text(DIRECTION_NOTES[result.direction], style="dim"),
            *(Text(note, style="dim italic") for note in result.notes),
        ]
        if result.positions is not None:
            parts.append(Text("\nresidual stream (0 = embeddings)", style="bold"))
            wide = FULL_GRID_WIDTH + 6 * result.positions.shape[0] <= width
            labels = token_labels(result.tokens)  # RoBERTa's `Ġte` as `te` (model.labels)
            if wide:
                parts.append(positions_grid(result.positions, labels, set(result.differing)))
            else:
                parts += [
                    compact_positions(result.positions, labels, set(result.differing), self.glyphs),
                    strongest(result.positions, labels),
                ]
            parts.append(
                Text("* / bold: the tokens that differ", style="dim") if not wide else Text("bold: the tokens that differ", style="dim")
            )
        if result.layers is not None:
            parts += [Text("\neach layer's writes", style="bold"), layers_table(result.layers)]
        parts += [Text(), legend()]
        return Group(*parts)
