"""Head importance in the explorer: a grid overlay, the objective while toggling, prune to X%, the pruning curve.

`i` estimates every head's importance (gradient, Michel et al.) for the model's natural
objective (mlm with an MLM head, else preserve) over the shipped sample corpus, shades the
grid by it, and from then on measures the objective under every mask the user makes. `P`
masks the least important X% of heads; `C` opens the pruning curve. All model work runs
in thread workers through the backend; nothing here imports torch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Label, Static
from textual.worker import get_current_worker

from bertscope.core.errors import BertscopeError
from bertscope.core.model.masks import HeadMask
from bertscope.render.importance import curve_chart
from bertscope.ui.export import csv_text, save_screen
from bertscope.ui.kept import KeptResults, KeptRun

SAMPLE_SENTENCES = 64
IMPORTANCE_FIGURE = "importance"


class ImportanceStepped(Message):
    """A batch of the importance estimate done; a backlog collapses to the newest."""

    def __init__(self, progress) -> None:
        super().__init__()
        self.progress = progress

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ImportanceStepped) and message.progress.result is None


class ImportanceFailed(Message):
    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class ObjectiveMeasured(Message):
    def __init__(self, measurement, spec: str, request: int) -> None:
        super().__init__()
        self.measurement, self.spec, self.request = measurement, spec, request


class ObjectivePanel(Static):
    """The objective with no head masked and under the current mask."""

    DEFAULT_CSS = """
    ObjectivePanel { border: round $panel-lighten-2; padding: 0 1; height: auto; display: none; }
    """

    def show(self, objective: str, sentences: int, metric: str, baseline, current, spec: str, pending: bool = False) -> None:
        self.display = True
        self.border_title = f"objective: {objective}"
        lines = [Text(f"{metric}, {sentences} sentences", style="dim")]
        if baseline is None:
            lines.append(Text("estimating head importance…"))
        else:
            lines.append(Text(f"no mask   {baseline.metric:.4f}  loss {baseline.loss:.4g}"))
            if current is not None and spec:
                change = current.metric - baseline.metric
                style = "red" if change < -0.01 else None
                lines.append(Text.assemble(f"this mask {current.metric:.4f}  loss {current.loss:.4g}  ", (f"{change:+.4f}", style)))
            elif spec:
                lines.append(Text("this mask …"))
        if pending:
            lines.append(Text("measuring…", style="dim"))
        self.update(Group(*lines))


class PruneToScreen(ModalScreen[float | None]):
    """Asks for a percentage of heads to switch off, least important first."""

    BINDINGS = [Binding("escape", "dismiss_none", "cancel")]
    DEFAULT_CSS = """
    PruneToScreen { align: center middle; }
    PruneToScreen > Vertical { width: 56; height: auto; border: round $primary; background: $surface; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Prune to X%: switch off the least important X% of the heads")
            yield Input(placeholder="a percentage between 0 and 100, e.g. 30", id="percent")

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip().rstrip("%")
        try:
            value = float(text)
        except ValueError:
            self.notify(f"{event.value!r} is not a number; give a percentage such as 30", severity="error")
            return
        if not 0 < value < 100:
            self.notify(f"{value:g}% is outside 0-100 (exclusive); give e.g. 30", severity="error")
            return
        self.dismiss(value / 100)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class CurveStepped(Message):
    def __init__(self, progress, run: int) -> None:
        super().__init__()
        self.progress, self.run = progress, run

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CurveStepped) and message.run == self.run and message.progress.curve is None


class PruningCurveScreen(Screen[str | None]):
    """The objective as ever more of the least important heads are removed; Enter masks the prunable set."""

    AUTO_FOCUS = "#curve"
    BINDINGS = [
        Binding("escape", "back", "back / cancel"),
        Binding("enter", "apply", "mask the prunable heads"),
        Binding("r", "reestimate", "re-estimate per step"),
        Binding("e", "export", "export"),
    ]
    DEFAULT_CSS = """
    PruningCurveScreen #curve-status { height: auto; padding: 0 1; }
    PruningCurveScreen #curve { padding: 0 1; }
    """

    def __init__(self, backend, objective: str, sentences, importance, ablation: str, kept: KeptResults | None = None) -> None:
        super().__init__()
        self.backend, self.objective, self.sentences = backend, objective, sentences
        self.importance, self.ablation = importance, ablation
        self.kept = kept if kept is not None else KeptResults()
        self.curve = None
        self.running = False
        self._run = 0
        self._cancel = threading.Event()

    def compose(self) -> ComposeResult:
        yield Static("", id="curve-status")
        yield VerticalScroll(Static("", id="curve-content"), id="curve")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        kept = self.kept.runs.get("curve")
        if kept is not None and kept.data == self.objective and kept.ablation == self.ablation:
            self.reestimate = kept.result.reestimate
            self.show(kept.result)
        else:
            self.start(reestimate=False)

    def start(self, reestimate: bool) -> None:
        self._cancel.set()
        self._cancel = threading.Event()
        self._run += 1
        self.running = True
        self.reestimate = reestimate
        self.query_one("#curve-status", Static).update(f"pruning curve for {self.objective}: starting…")
        self.compute(self._run, self._cancel, reestimate)

    @work(thread=True, exclusive=True, group="curve", exit_on_error=False)
    def compute(self, run: int, cancel: threading.Event, reestimate: bool) -> None:
        worker = get_current_worker()
        try:
            steps = self.backend.pruning_curve(
                self.objective, self.sentences, importance=None if reestimate else self.importance,
                ablation=self.ablation, reestimate=reestimate, cancel=cancel,
            )
            for progress in steps:
                if worker.is_cancelled or cancel.is_set():
                    return
                self.post_message(CurveStepped(progress, run))
        except BertscopeError as error:
            self.app.call_from_thread(self.notify, str(error), severity="error", timeout=10)

    def on_curve_stepped(self, message: CurveStepped) -> None:
        if message.run != self._run:
            return
        progress = message.progress
        status = self.query_one("#curve-status", Static)
        if progress.curve is None:
            status.update(f"pruning curve for {self.objective}: {progress.stage} ({progress.done}/{progress.total})")
            return
        self.running = False
        self.kept.runs["curve"] = KeptRun(self.objective, "", self.ablation, progress.curve)
        self.show(progress.curve)

    def show(self, curve) -> None:
        self.curve = curve
        status = self.query_one("#curve-status", Static)
        best = curve.prunable()
        how = "importance re-estimated at each step" if curve.reestimate else "one ranking (r: re-estimate at each step)"
        status.update(Text.assemble(
            (f"pruning curve · {curve.objective} · {curve.method} ({curve.ablation})", "bold"), f" · {how}\n",
            f"largest fraction within a drop of {curve.max_drop:g}: {best.fraction:.0%} ({best.heads_pruned} heads); "
            "Enter masks them in the explorer",
        ))
        self.query_one("#curve-content", Static).update(curve_chart(curve, width=24))

    def action_export(self) -> None:
        save_screen(self.app, "pruning-curve", self.table(), ".csv")

    def table(self) -> str | None:
        """The curve as `prune --curve` measures it: one row per step."""
        curve = self.curve
        if curve is None:
            return None
        rows = [[round(p.fraction, 6), p.heads_pruned, float(p.loss), float(p.metric), float(drop), p.mask]
                for p, drop in zip(curve.points, curve.drops())]
        return csv_text(["fraction", "heads_pruned", "loss", "metric", "drop", "mask"], rows)

    def action_apply(self) -> None:
        if self.curve is None:
            self.notify("the curve is still being measured", severity="warning")
            return
        self.dismiss(self.curve.prunable().mask)

    def action_reestimate(self) -> None:
        if not self.running:
            self.start(reestimate=True)

    def action_back(self) -> None:
        if self.running:
            self._cancel.set()
            self.workers.cancel_group(self, "curve")
            self.running = False
            self.query_one("#curve-status", Static).update("cancelled; escape goes back")
            return
        self.dismiss(None)


class ImportanceMixin:
    """Importance actions of the explorer app (mixed into ExplorerApp)."""

    importance = None  # HeadImportance of the model's objective, once estimated
    _objective_baseline = None
    _objective_current = None
    _objective_request = 0
    _importance_pending: list[Callable[[], None]] | None = None
    _importance_sentences: list | None = None

    def importance_objective(self) -> str:
        return "mlm" if self.backend.info.has_mlm_head else "preserve"

    def importance_sentences(self) -> list:
        if self._importance_sentences is None:
            from bertscope.core.data.corpus import read_sentences, sample_corpus

            self._importance_sentences = list(read_sentences(sample_corpus(), limit=SAMPLE_SENTENCES))
        return self._importance_sentences

    def grid_overlay(self):
        """(values, range, label) of the importance overlay when it is the chosen figure, else None."""
        if self.state.figure != IMPORTANCE_FIGURE or self.importance is None:
            return None
        values = self.importance.importance
        label = f"importance ({self.importance.objective})"
        return values, (0.0, float(np.max(values)) or 1.0), label

    # estimating

    def with_importance(self, then: Callable[[], None]) -> None:
        """Run `then` once importance is known, estimating it first if needed."""
        if self.backend is None or self.mask is None:
            self.notify("the model is still loading", severity="warning")
            return
        if self.importance is not None:
            then()
            return
        if self._importance_pending is not None:
            self._importance_pending.append(then)
            return
        self._importance_pending = [then]
        objective = self.importance_objective()
        self.query_one(ObjectivePanel).show(objective, len(self.importance_sentences()), "", None, None, "")
        self.notify(f"estimating head importance for {objective} on {len(self.importance_sentences())} sample sentences…", timeout=4)
        self.estimate_importance(objective, self.state.ablation)

    @work(thread=True, exclusive=True, group="importance", exit_on_error=False)
    def estimate_importance(self, objective: str, ablation: str) -> None:
        worker = get_current_worker()
        try:
            for progress in self.backend.head_importance(objective, self.importance_sentences(), method="gradient", ablation=ablation):
                if worker.is_cancelled:
                    return
                self.post_message(ImportanceStepped(progress))
        except BertscopeError as error:
            self.post_message(ImportanceFailed(str(error)))

    def on_importance_stepped(self, message: ImportanceStepped) -> None:
        result = message.progress.result
        if result is None:
            self.query_one("#status").set_facts(f"head importance: {message.progress.stage} {message.progress.done}/{message.progress.total}")
            return
        self.importance = result
        from bertscope.core.analyses.importance_results import Measurement

        self._objective_baseline = Measurement(result.baseline_loss, result.baseline_metric)
        pending, self._importance_pending = self._importance_pending or [], None
        self._update_status()
        for then in pending:
            then()
        self.measure_mask()

    def on_importance_failed(self, message: ImportanceFailed) -> None:
        self._importance_pending = None
        self.query_one(ObjectivePanel).display = False
        self.notify(message.reason, title="head importance", severity="error", timeout=10)

    # the objective under the current mask

    def measure_mask(self) -> None:
        """Measure the objective under the current mask (only once importance mode is on)."""
        if self.importance is None or self.mask is None:
            return
        self._objective_request += 1
        spec = self.mask.spec()
        self._show_objective(pending=bool(spec))
        if spec:
            self.measure_objective(self.importance.objective, self.mask, self.state.ablation, self._objective_request)

    @work(thread=True, exclusive=True, group="objective", exit_on_error=False)
    def measure_objective(self, objective: str, mask: HeadMask, ablation: str, request: int) -> None:
        worker = get_current_worker()
        try:
            measured = self.backend.measure_objective(objective, self.importance_sentences(), mask, ablation)
        except BertscopeError as error:
            self.post_message(ImportanceFailed(str(error)))
            return
        if not worker.is_cancelled:
            self.post_message(ObjectiveMeasured(measured, mask.spec(), request))

    def on_objective_measured(self, message: ObjectiveMeasured) -> None:
        if message.request == self._objective_request:
            self._objective_current = message.measurement
            self._show_objective(pending=False)

    def _show_objective(self, pending: bool) -> None:
        result = self.importance
        spec = self.mask.spec() if self.mask is not None else ""
        current = self._objective_current if not pending else None
        self.query_one(ObjectivePanel).show(result.objective, result.sentences, result.metric, self._objective_baseline, current, spec, pending)

    # actions

    def action_importance(self) -> None:
        """`i`: shade the grid by head importance (estimated on first use), or back to the previous figure."""
        if self.state.figure == IMPORTANCE_FIGURE and self.importance is not None:
            self.state = self.state.with_(figure=getattr(self, "_figure_before", "entropy"))
            self._repaint()
            return

        def show() -> None:
            if self.state.figure != IMPORTANCE_FIGURE:
                self._figure_before = self.state.figure
            self.state = self.state.with_(figure=IMPORTANCE_FIGURE)
            self._repaint()

        self.with_importance(show)

    def action_prune_to(self) -> None:
        """`P`: switch off the least important X% of the heads."""
        if self.backend is None or self.mask is None:
            self.notify("the model is still loading", severity="warning")
            return

        def chosen(fraction: float | None) -> None:
            if fraction is not None:
                self.with_importance(lambda: self.prune_to(fraction))

        self.push_screen(PruneToScreen(), chosen)

    def prune_to(self, fraction: float) -> None:
        total = self.mask.num_layers * self.mask.num_heads
        heads = self.importance.least_important(round(fraction * total))
        self.notify(f"masked the {len(heads)} least important heads ({fraction:.0%}) for {self.importance.objective}", timeout=4)
        self._set_mask(HeadMask(self.mask.num_layers, self.mask.num_heads, frozenset(heads)))

    def action_pruning_curve(self) -> None:
        """`C`: the objective as ever more of the least important heads are removed."""

        def open_screen() -> None:
            screen = PruningCurveScreen(
                self.backend, self.importance.objective, self.importance_sentences(), self.importance, self.state.ablation, self.kept
            )
            self.push_screen(screen, self._apply_curve_mask)

        self.with_importance(open_screen)

    def _apply_curve_mask(self, spec: str | None) -> None:
        if spec is not None:
            self._set_mask(HeadMask.parse(spec, self.mask.num_layers, self.mask.num_heads))
