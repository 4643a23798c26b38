"""The explorer's own screen: type a sentence, walk the layer × head grid, switch heads off, see the effect.

The screen is the main view's keys and its layout; the work is in three rooms it holds. The heatmap pane
(ui.heatmap_pane) owns how the map shows and the maps it computes on demand; the conditions controller
(ui.conditions_controller) owns what every pass runs under (mask, ablation, erasure) and head importance under them;
the launchers (ui.launchers) open the other screens over this one, export the heatmap and fill the command palette.
The screen itself runs the sentence (`analyse`: the plain pass and the one under the conditions, in an exclusive
thread worker whose newest request wins; ui.job_run) and draws every pane from the result (`_repaint`), which moving
between heads of the same sentence does from the arrays in memory. For a long input, whose every layer's maps would
not fit (EVERY_LAYER_CELLS), only the shown layer's are held. What the screen shows is the session's state, which the
app keeps and saves (ui.app).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from textual import on
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input
from textual.worker import Worker, WorkerState

from bertscope.analyses.attention.headstats import FIGURES, figure_range
from bertscope.analyses.conditions import LiveEdits
from bertscope.analyses.mixing.results import METHOD_NAMES as MIXING_NAMES
from bertscope.base.progress import Progress
from bertscope.base.theming import DEFAULT_THEME
from bertscope.model.effects import layer_cosines
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import ForwardResult
from bertscope.ui.attribution import AttributionRow
from bertscope.ui.backend import Backend
from bertscope.ui.conditions_controller import ConditionsController
from bertscope.ui.explorer import Explorer
from bertscope.ui.focus import focus_main, leave_input
from bertscope.ui.heatmap_pane import MIXING_CELLS, HeatmapPane, layer_maps_of
from bertscope.ui.help import EXPORT_KEY, HELP_KEY
from bertscope.ui.importance import IMPORTANCE_FIGURE, ObjectivePanel, importance_overlay
from bertscope.ui.job_run import JobRun
from bertscope.ui.launchers import Launchers, palette_commands
from bertscope.ui.messages import Analysis
from bertscope.ui.state import ExplorerState, fit_to_model
from bertscope.ui.syntax import SYNTAX_FIGURE, SyntaxPanel
from bertscope.ui.task_pane import TaskPanel, pair_placeholder, predictions
from bertscope.ui.theme import heatmap_for
from bertscope.ui.widgets.attention_view import AttentionView
from bertscope.ui.widgets.footer import KeyFooter
from bertscope.ui.widgets.head_grid import FIGURE_LABELS, HeadGrid
from bertscope.ui.widgets.panels import EffectPanel, StatusLine, TokenPanel

# Attention cells (L·H·T²) up to which the explorer holds every layer's maps: weights and norms, before and
# under the mask, four arrays of at most 256 MB (BERT-base at 512 tokens: 38M). Above, a long input, it holds
# the shown layer's alone: a 2,000-token ModernBERT-base would need 4 × 4.2 GB.
EVERY_LAYER_CELLS = 64_000_000
TALL_SCREEN = 30  # rows from which the token pane lists five tokens rather than three
GRID_LABELS = FIGURE_LABELS | {"distance": "mean distance (tokens)"}


@dataclass(frozen=True, eq=False)
class AnalysisJob:
    """One request for the analysis worker: the model, the sentence and mask, and what can be reused."""

    backend: Backend
    text: str
    pair: str | None
    mask: HeadMask
    ablation: Ablation
    plain: ForwardResult | None  # the unmasked result to reuse, when only the mask changed
    layer: int  # the layer shown: a long input's maps are computed for it alone
    erasure: LiveEdits | None = None  # a property erased (`E`) and SAE features switched (`F`) inside the pass


def analysis_steps(job: AnalysisJob, cancel: threading.Event) -> Iterator[Progress[Analysis]]:
    """In the worker: the plain pass (unless reused), the masked one, and what the views show of them."""
    backend = job.backend
    plain = job.plain
    encoding = plain.encoding if plain is not None else backend.encode(job.text, job.pair)
    every_layer = backend.num_layers * backend.num_heads * len(encoding) ** 2 <= EVERY_LAYER_CELLS
    if plain is None:
        plain = backend.forward(encoding, attentions=every_layer, norms=every_layer, figures=True)
    if cancel.is_set():
        return
    current = plain
    if len(job.mask) or job.erasure is not None:
        current = backend.forward(
            encoding,
            attentions=every_layer,
            mask=job.mask,
            ablation=job.ablation,
            reuse=plain,
            norms=every_layer,
            figures=True,
            erasure=job.erasure,
        )
    if cancel.is_set():
        return
    assert current.figures is not None  # asked for above
    task_plain, task_current = predictions(backend, encoding, job.mask, job.ablation, job.erasure)
    analysis = Analysis(
        plain=plain,
        current=current,
        cosines=layer_cosines(current.hidden_states, plain.hidden_states),
        figures=current.figures,
        predictions_plain=backend.mask_predictions(plain),
        predictions_current=backend.mask_predictions(current),
        erasure=job.erasure,
        task_plain=task_plain,
        task_current=task_current,
    )
    if not every_layer:  # the first screen shows the chosen layer's maps at once
        analysis.layers[job.layer] = layer_maps_of(backend, analysis, job.layer)
    yield Progress("analysed", 1, 1, analysis)


class MainScreen(Screen[None]):
    """The sentence, the head grid, the heatmap and the effect of the mask; its main widget is the grid (ui.focus).

    The app tells it how the model's loading goes (`model_loading`) and that the model is there
    (`model_loaded`); the screen follows the app's theme.
    """

    AUTO_FOCUS = "#grid"
    BINDINGS = [
        # The app's quit, help and theme keys are named here too: the footer lists a screen's keys before the app's.
        Binding("ctrl+q", "app.quit", "quit", priority=True),
        HELP_KEY,
        Binding("slash", "focus_sentence", "sentence", show=False),
        Binding("x", "clear_mask", "unmask all"),
        Binding("a", "toggle_ablation", "ablation"),
        Binding("f", "next_figure", "figure"),
        Binding("v", "next_view", "view"),
        Binding("n", "next_cells", "cells"),
        Binding("t", "app.next_theme", "theme"),
        EXPORT_KEY,
        Binding("z", "zoom", "zoom"),
        Binding("s", "next_scale", "colour scale", show=False),
        Binding("d", "toggle_dense", "dense", show=False),
        Binding("o", "overview", "overview"),
        Binding("p", "probing", "probing"),
        Binding("b", "next_attribution", "attribution", show=False),
        Binding("B", "next_attribution_target", "explain what", show=False),
        Binding("i", "importance", "importance", show=False),
        Binding("I", "choose_objective", "importance for…", show=False),
        Binding("y", "syntax_relation", "tracks relation", show=False),
        Binding("Y", "syntax_direction", "relation direction", show=False),
        Binding("P", "prune_to", "prune to X%", show=False),
        Binding("C", "pruning_curve", "pruning curve", show=False),
        Binding("g", "geometry", "geometry", show=False),
        Binding("c", "compare", "compare models", show=False),
        Binding("X", "patching", "patching", show=False),
        Binding("E", "erase", "erase property", show=False),
        Binding("F", "features", "SAE features", show=False),
        Binding("escape", "cancel", "cancel", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.mounted = asyncio.Event()  # the app loads the model once the screen is up to show it
        self.analysis: Analysis | None = None
        self.analysing = JobRun(self, self._analysed, name="analysis", on_failed=lambda _reason: self._set_busy(False))
        self.conditions = ConditionsController(
            self, follow=self._follow_conditions, show_figure=self._follow_figure, show_status=self._update_status
        )
        self.launchers = Launchers(self, self.conditions, self._open_head)
        self._focus_before_zoom: Widget | None = None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """This screen's keys only while it is on top: under a dialog (the help), its footer shows the app's keys alone."""
        return self.is_active

    @property
    def explorer(self) -> Explorer:
        return cast(Explorer, self.app)

    @property
    def state(self) -> ExplorerState:
        """What the screen shows: the session's state, kept by the app and saved to the session file."""
        return self.explorer.state

    @state.setter
    def state(self, state: ExplorerState) -> None:
        self.explorer.state = state

    @property
    def heatmap_pane(self) -> HeatmapPane:
        return self.query_one(HeatmapPane)

    @property
    def backend(self) -> Backend | None:
        """The model, once the app has loaded it."""
        return self.explorer.backend

    # layout

    def compose(self) -> ComposeResult:
        colormap = heatmap_for(DEFAULT_THEME, True, self.explorer.theme_specs)
        with Horizontal(id="inputs"):
            yield Input(self.state.text, placeholder="a sentence, then Enter", id="sentence")
            yield Input(self.state.pair, placeholder="second segment (optional)", id="pair")
        yield AttributionRow(id="attribution")
        with Horizontal(id="body"):
            with VerticalScroll(id="side", can_focus=False):
                yield HeadGrid(colormap, id="grid")
                yield ObjectivePanel(self._repaint, id="objective")  # hidden until `i` (ui.importance)
                yield SyntaxPanel(self._repaint, id="syntax")  # shown with the grid's syntax figure (ui.syntax)
                yield TaskPanel(id="task")  # a fine-tuned model's prediction (ui.task_pane)
                yield TokenPanel(id="tokens")
                yield EffectPanel(id="effect")
            yield HeatmapPane(self._repaint, id="heatmap")
        yield StatusLine(id="status")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#grid").border_title = "heads"
        self.query_one("#tokens").border_title = "token"
        self.query_one("#effect").border_title = "effect of the mask"
        self.query_one("#heatmap").border_title = "attention"
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._restyle())
        self._restyle()
        self.mounted.set()

    # the model

    def model_loading(self, stage: str) -> None:
        """How the model's loading goes, in the status line."""
        self.query_one(StatusLine).set_facts(stage)

    def model_loaded(self, backend: Backend) -> None:
        """The model is there: fit the session's state to it and analyse the sentence."""
        self.state, warnings = fit_to_model(self.state, backend.num_layers, backend.num_heads)
        if self.state.figure not in FIGURES and self.state.figure not in (IMPORTANCE_FIGURE, SYNTAX_FIGURE):
            warnings.append(f"unknown grid figure {self.state.figure!r}; showing entropy")
            self.state = self.state.with_(figure="entropy")
        for warning in warnings:
            self.notify(warning, severity="warning", timeout=8)
        self.conditions.take_mask(backend)
        self.query_one(HeadGrid).set_shape(backend.num_layers, backend.num_heads)
        self.query_one(AttributionRow).set_model(backend.info)
        self.query_one("#pair", Input).placeholder = pair_placeholder(backend.info) or "second segment (optional)"
        self.query_one(ObjectivePanel).set_backend(backend)
        self.query_one(SyntaxPanel).set_backend(backend)
        self._follow_syntax()
        self._analyse(reuse_plain=False)
        self.conditions.restore_erasure(backend)

    # running the sentence

    def _analyse(self, reuse_plain: bool) -> None:
        """Ask for a new analysis of the current sentence and mask; the newest request wins."""
        mask = self.conditions.mask
        if self.backend is None or mask is None:
            return
        job = AnalysisJob(
            backend=self.backend,
            text=self.state.text,
            pair=self.state.pair or None,
            mask=mask,
            ablation=self.state.ablation,
            plain=self.analysis.plain if reuse_plain and self.analysis is not None else None,
            layer=self.state.layer,
            erasure=self.conditions.live,
        )
        self._set_busy(True)
        self.analysing.start(lambda cancel: analysis_steps(job, cancel))
        self.explorer.save_state()

    def _analysed(self, progress: Progress[Analysis]) -> None:
        if progress.result is None:
            return  # the job yields its result alone, as its one step
        self._set_busy(False)
        self.analysis = analysis = progress.result
        try:
            self.query_one(HeadGrid)
        except NoMatches:
            return  # the explorer is closing: its panes are gone before the run's result arrived
        current = analysis.current
        if current.encoding.truncated:
            self.notify(
                f"the input was cut by {current.encoding.truncated} tokens to the model's maximum of {len(current.tokens)}",
                severity="warning",
            )
        self._repaint()
        assert self.backend is not None  # an analysis runs on a loaded model
        self.query_one(AttributionRow).analysed(self.backend, current.encoding, current.mask, current.ablation, analysis.erasure)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Any unexpected failure of a worker becomes a notification, never a crash."""
        if event.state == WorkerState.ERROR:
            self._set_busy(False)
            error = event.worker.error
            self.notify(f"{type(error).__name__}: {error}", title="something went wrong", severity="error", timeout=30)

    # drawing

    def _restyle(self) -> None:
        """Draw again in the app's theme and glyphs."""
        self.query_one(HeadGrid).restyle(self.explorer.colormap(), self.explorer.glyphs)
        self._repaint()
        self.query_one(AttributionRow).repaint()

    def _repaint(self) -> None:
        """Redraw every pane from the arrays in memory (no model run)."""
        self._update_status()
        grid = self.query_one(HeadGrid)
        analysis, mask = self.analysis, self.conditions.mask
        if analysis is None or mask is None:
            return
        layer, head = self.state.layer, self.state.head
        length = len(analysis.current.tokens)
        figure = self.state.figure if self.state.figure in FIGURES else "entropy"
        objective = self.query_one(ObjectivePanel)
        importance = objective.importance
        syntax = self.query_one(SyntaxPanel).overlay() if self.state.figure == SYNTAX_FIGURE else None
        grid.marks = objective.marks() if self.state.figure == IMPORTANCE_FIGURE else None
        if self.state.figure == IMPORTANCE_FIGURE and importance is not None:
            grid.show(*importance_overlay(importance), mask, (layer, head))
        elif self.state.figure == SYNTAX_FIGURE:
            values, value_range, label = syntax if syntax is not None else (None, (0.0, 1.0), "")
            grid.show(values, value_range, label, mask, (layer, head))  # None: "computing…"
        else:
            grid.show(analysis.figures[figure], figure_range(figure, length), GRID_LABELS.get(figure, FIGURES[figure]), mask, (layer, head))
        erased = analysis.erasure.short() if analysis.erasure is not None else None
        changed = bool(len(analysis.current.mask)) or erased is not None
        self.query_one(TaskPanel).show(analysis.task_plain, analysis.task_current, changed)
        self.query_one(EffectPanel).show(
            analysis.cosines,
            len(analysis.current.mask),
            analysis.predictions_plain,
            analysis.predictions_current,
            analysis.labels,
            erased=erased,
        )
        pane = self.heatmap_pane
        weights = pane.draw(analysis)
        if weights is None:
            return
        self.state = self.state.with_(cursor=pane.cursor)
        row, cells = pane.cursor[0], pane.cells_shown()
        measure = MIXING_NAMES[cells] if cells in MIXING_CELLS else None
        self.query_one(TokenPanel).show(analysis.labels, weights[row], row, top=self._token_rows(), norms=cells == "norms", measure=measure)

    def _token_rows(self) -> int:
        """The tokens the token pane lists: five, or three on a short screen, where the effect pane's first lines
        would otherwise fall below it (80×24, a 6-layer grid)."""
        return 5 if self.size.height >= TALL_SCREEN else 3

    def on_resize(self) -> None:
        if self.analysis is not None and self.query_one(TokenPanel)._rows not in (
            None,
            min(self._token_rows(), len(self.analysis.current.tokens)),
        ):
            self._repaint()

    def _update_status(self) -> None:
        status = self.query_one(StatusLine)
        if self.backend is None:
            return
        info = self.backend.info
        mask, erasure = self.conditions.mask, self.conditions.live
        masked = len(mask) if mask is not None else 0
        status.set_facts(  # most important first: the line keeps those that fit, so what the passes run under comes
            info.source,  # before the device and the model's size, which do not change while it runs
            f"{masked} masked ({self.state.ablation})",
            *([erasure.short()] if erasure is not None else []),
            info.device,
            f"{info.num_layers}×{info.num_heads} heads",
            *([cells] if (cells := self.heatmap_pane.cells_status()) is not None else []),
            self.state.view,
            self.state.figure,
        )

    def _set_busy(self, busy: bool) -> None:
        self.query_one(StatusLine).set_busy(busy)

    # following what changed

    def _follow_conditions(self) -> None:
        """The mask, its ablation or the erasure changed: the sentence, the objective pane and the syntax figure run
        again under them (and the session is saved)."""
        self._analyse(reuse_plain=True)
        if self.conditions.mask is not None:
            self.query_one(ObjectivePanel).follow(self.conditions.current())
        self._follow_syntax()

    def _follow_figure(self) -> None:
        """The grid's figure changed: the syntax panel shows or hides with it, and the panes are drawn again."""
        self._follow_syntax()
        self._repaint()

    def _follow_syntax(self) -> None:
        """Show the syntax panel (running over the sample treebank under the mask and erasure) while the grid shows its figure."""
        panel = self.query_one(SyntaxPanel)
        if self.state.figure != SYNTAX_FIGURE or self.backend is None or self.conditions.mask is None:
            panel.hide()
            return
        panel.show_for(self.conditions.current())

    def _open_head(self, chosen: tuple[int, int] | None) -> None:
        if chosen is not None:
            self.state = self.state.with_(layer=chosen[0], head=chosen[1], view="head")
            self._repaint()
            self.explorer.save_state()

    # what the user does in the panes

    @on(Input.Submitted, "#sentence, #pair")
    def sentence_submitted(self) -> None:
        text = self.query_one("#sentence", Input).value
        pair = self.query_one("#pair", Input).value
        if not text.strip():
            self.notify("the sentence is empty; type one and press Enter", severity="warning")
            return
        focus_main(self)  # the next key is a command again
        self.state = self.state.with_(text=text, pair=pair)
        self._analyse(reuse_plain=False)

    def on_head_grid_selected(self, message: HeadGrid.Selected) -> None:
        self.state = self.state.with_(layer=message.layer, head=message.head)
        self._repaint()
        self.explorer.save_state()

    def on_head_grid_toggled(self, message: HeadGrid.Toggled) -> None:
        self.conditions.toggle_head(message.layer, message.head)

    def on_head_grid_layer_toggled(self, message: HeadGrid.LayerToggled) -> None:
        self.conditions.toggle_layer(message.layer)

    def on_attention_view_cursor_moved(self, message: AttentionView.CursorMoved) -> None:
        # the view's cursor, not the message's: keys that arrived after this message have moved it on
        self.state = self.state.with_(cursor=self.heatmap_pane.cursor)
        self._repaint()

    # the screen's own keys

    def action_focus_sentence(self) -> None:
        self.remove_class("-zoomed")  # the box is hidden while the heatmap is zoomed
        self.query_one("#sentence", Input).focus()

    def action_next_figure(self) -> None:
        names = list(FIGURES) + [SYNTAX_FIGURE] + ([IMPORTANCE_FIGURE] if self.query_one(ObjectivePanel).importance is not None else [])
        if self.state.figure not in names:
            self.state = self.state.with_(figure=names[-1])
        self.state = self.state.with_(figure=names[(names.index(self.state.figure) + 1) % len(names)])
        self._follow_figure()
        self.explorer.save_state()

    def action_syntax_relation(self) -> None:
        """`y`: shade the grid by the heads that track a relation, or go on to the next relation."""
        if self.state.figure != SYNTAX_FIGURE:
            self.state = self.state.with_(figure=SYNTAX_FIGURE)
            self._follow_figure()
            self.explorer.save_state()
            return
        self.query_one(SyntaxPanel).next_relation()

    def action_syntax_direction(self) -> None:
        """`Y`: dependent→head or head→dependent."""
        if self.state.figure == SYNTAX_FIGURE:
            self.query_one(SyntaxPanel).next_direction()

    def action_zoom(self) -> None:
        """The heatmap alone on the screen (inputs, grid and side panes hidden), and back."""
        zoomed = not self.has_class("-zoomed")
        self.set_class(zoomed, "-zoomed")
        if zoomed:
            self._focus_before_zoom = self.focused
            self.heatmap_pane.focus()
        elif self._focus_before_zoom is not None and self._focus_before_zoom.is_attached:
            self._focus_before_zoom.focus()

    def action_next_attribution(self) -> None:
        """Shade the sentence's tokens by another attribution method, or switch it off (the row says which)."""
        if self.query_one(AttributionRow).next_method() is None:
            self.notify("attribution off: b switches it on", timeout=2)

    def action_next_attribution_target(self) -> None:
        """Explain another decision: the MLM guess, the class, or a probe's decision (the row says which)."""
        row = self.query_one(AttributionRow)
        row.next_target()
        if row.method is None:
            self.notify(f"attribution will explain the {row.describe_target()}; b switches it on", timeout=3)

    def action_cancel(self) -> None:
        """Escape: leave the sentence box first; then cancel what is running."""
        if leave_input(self):
            return
        if self.query_one(AttributionRow).cancel():
            self.notify("attribution cancelled", timeout=3)
        self.conditions.cancel_erasure()
        self.heatmap_pane.cancel_mixing()
        stopped = self.query_one(ObjectivePanel).cancel()
        if stopped:
            self.notify(f"{stopped} cancelled", timeout=3)
        if self.analysing.cancel():
            self._set_busy(False)
            self.notify("cancelled; showing the last finished result", timeout=3)

    # the heatmap pane's keys (ui.heatmap_pane)

    def action_next_view(self) -> None:
        self.heatmap_pane.next_view()

    def action_next_cells(self) -> None:
        self.heatmap_pane.next_cells()

    def action_next_scale(self) -> None:
        self.heatmap_pane.next_scale()

    def action_toggle_dense(self) -> None:
        self.heatmap_pane.toggle_dense()

    # the conditions' keys (ui.conditions_controller)

    def action_clear_mask(self) -> None:
        self.conditions.clear_mask()

    def action_toggle_ablation(self) -> None:
        self.conditions.toggle_ablation()

    def action_importance(self) -> None:
        self.conditions.toggle_importance()

    def action_choose_objective(self) -> None:
        if self.backend is None:
            self.notify("the model is still loading", severity="warning")
            return
        self.query_one(ObjectivePanel).choose(self.conditions.toggle_importance)

    def action_prune_to(self) -> None:
        self.conditions.prune_to()

    def action_erase(self) -> None:
        self.conditions.erase()

    # the launchers' keys (ui.launchers)

    def action_export(self) -> None:
        self.launchers.export()

    def action_overview(self) -> None:
        self.launchers.overview()

    def action_probing(self) -> None:
        self.launchers.probing()

    def action_pruning_curve(self) -> None:
        self.launchers.pruning_curve()

    def action_geometry(self) -> None:
        self.launchers.geometry()

    def action_compare(self) -> None:
        self.launchers.compare()

    def action_patching(self) -> None:
        self.launchers.patching()

    def action_features(self) -> None:
        self.launchers.features()

    def system_commands(self) -> Iterator[SystemCommand]:
        """The command palette's entries for this screen's actions (ui.launchers)."""
        return palette_commands(self)
