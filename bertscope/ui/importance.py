"""Head importance in the explorer: a grid overlay, the objective while toggling, prune to X%, the pruning curve.

`i` estimates every head's importance (gradient, Michel et al.) for the model's own task over
shipped sample data (`objective_choices`: token-classification on the sample treebank, similarity
on the sample pairs for a sentence-embedding model, mlm with an MLM head, else preserve), shades
the grid by it, and from then on measures the objective under every mask the user makes; `I`
chooses another objective where more than one applies, or the model's task on a file of the user's
(`file_objectives`: qa on SQuAD JSON, token-classification on CoNLL, similarity on an STS TSV,
classification on a SentEval TSV), read and checked through the API in a worker before it replaces
the objective measured. After the estimate each head is switched
off alone and the objective measured (Kovaleva et al. §6): the heads whose removal raises the
metric are marked `+` in the grid and listed in the pane. `P` masks the least important X% of heads; `C`
opens the pruning curve. `ObjectivePanel` owns the estimate and the measurements; the app asks
it for importance and tells it the mask. All model work runs in thread workers (ui.job_run)
through the backend; nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from threading import Event
from typing import TYPE_CHECKING, cast

import numpy as np
from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from bertscope import api
from bertscope.analyses.conditions import Conditions
from bertscope.analyses.importance.results import COUNTED_AS, HeadImportance, Measurement, PruningCurve, missing_heads
from bertscope.api import Corpus, corpus, objective_corpus, treebank
from bertscope.base.progress import Progress
from bertscope.model.masks import Ablation
from bertscope.model.results import ModelInfo
from bertscope.render.importance import curve_chart
from bertscope.ui.backend import Backend
from bertscope.ui.corpus_screen import RunScreen
from bertscope.ui.export import csv_text, save_screen
from bertscope.ui.focus import dismissed
from bertscope.ui.help import BACK_KEY, EXPORT_KEY, HELP_KEY
from bertscope.ui.job_run import JobRun
from bertscope.ui.kept import KeptResults, KeptRun
from bertscope.ui.prompt import PromptScreen
from bertscope.ui.widgets.footer import KeyFooter

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SAMPLE_SENTENCES = 64
IMPORTANCE_FIGURE = "importance"


RAISING_MARK = "+"  # a head whose removal raises the objective's metric (Kovaleva et al. §6), in the grid


def importance_overlay(importance: HeadImportance) -> tuple[np.ndarray, tuple[float, float], str]:
    """(values, range, label) to shade the head grid by importance."""
    values = importance.importance
    return values, (0.0, float(np.max(values)) or 1.0), f"importance ({importance.objective})"


ON_FILE = ":file"  # a choice's id for an objective measured on a file of the user's: `qa:file`

# The objectives measured on a file of the user's, each with the file it reads (as the CLI's --data reads it).
FILE_OBJECTIVES = {
    "qa": "a SQuAD-1.1 or 2.0 JSON file",
    "token-classification": "a CoNLL-2003 file (a token and its label a line) or a CoNLL-U file (its UPOS)",
    "similarity": "an STS TSV (sentence1, sentence2, score)",
    "classification": "a SentEval TSV (split<TAB>label<TAB>sentence)",
}


def file_objectives(info: ModelInfo) -> list[str]:
    """The task objectives this model has a head for, each measured on a file of the user's (no data ships for qa and
    classification): the model's own task, and similarity for a sentence-embedding model."""
    missing = missing_heads(info.architecture, info.has_mlm_head, is_classifier=info.architecture.endswith("ForSequenceClassification"))
    return [name for name in FILE_OBJECTIVES if name not in missing and (name != "similarity" or info.sentence_embedding)]


def objective_choices(info: ModelInfo) -> list[tuple[str, str]]:
    """The objectives `i` can measure on this model, each with what it is measured on: first those on the data the
    package ships, the model's own task first (the default), then its task on a file of the user's (`ON_FILE`)."""
    choices = []
    if info.architecture.endswith("ForTokenClassification"):
        choices.append(("token-classification", "its labels on the sample treebank (UPOS, or its own labels: agreement)"))
    if info.sentence_embedding:
        choices.append(("similarity", "Spearman's rho of the cosine on the 48 sample pairs"))
    if info.has_mlm_head:
        choices.append(("mlm", "masked words of the sample corpus"))
    if info.sentence_embedding:
        choices.append(("embedding", "how far the sample sentences' embeddings move"))
    choices.append(("preserve", "how far the output moves, on the sample corpus"))
    choices.extend((name + ON_FILE, f"on a file of yours: {FILE_OBJECTIVES[name]}") for name in file_objectives(info))
    return choices


def read_objective_file(name: str, path: str, limit: int) -> tuple[Corpus, bool]:
    """The first `limit` items of the user's file as objective `name` reads it (`api.objective_corpus`, as the CLI's
    --data), and whether the file has more."""
    read = objective_corpus(name, data=path)
    sentences = list(islice(read.sentences, limit + 1))
    return Corpus(sentences[:limit], read.source, read.report), len(sentences) > limit


def file_label(path: str) -> str:
    """How the pane names the user's file: as typed when short, else its name."""
    return path if len(path) <= 24 else Path(path).name


def head_by_head(
    backend: Backend, objective: str, sample: Corpus, ablation: Ablation, cancel: Event
) -> Iterator[Progress[list[tuple[float, tuple[int, int]]]]]:
    """Kovaleva et al. §6 on the explorer's data: each head switched off alone and the objective's metric measured
    exactly (`api.importance --method ablation`, whose `metric_changes` the CLI's JSON lists too); the last step carries
    the heads whose removal raises the metric, with how much, the most first."""
    total = backend.num_layers * backend.num_heads
    run = backend.steps(api.importance, None, backend.objective(objective, sample), method="ablation", ablation=ablation, cancel=cancel)
    for step in run:
        if not step.finished:
            yield Progress("heads off in turn", step.done, step.total)
            continue
        assert step.result is not None and step.result.metric_changes is not None  # ablation measures the metric per mask
        raising = [(change, (layer, head)) for layer, head, change in step.result.metric_changes.raising_heads()]
        yield Progress("done", total, total, raising)


class ObjectivePanel(Static):
    """Head importance of the model's objective, estimated once, and that objective under the explorer's mask.

    Hidden until importance is first asked for (`with_importance`); from then on every mask
    the app reports (`follow`) is measured, the newest measurement winning.
    """

    DEFAULT_CSS = """
    ObjectivePanel { border: round $panel-lighten-2; padding: 0 1; height: auto; display: none; }
    """

    def __init__(self, repaint: Callable[[], None] | None = None, *, id: str | None = None) -> None:
        """`repaint()`: draw the grid again (the heads whose removal helps are found after the estimate)."""
        super().__init__(id=id)
        self._repaint = repaint or (lambda: None)
        self.backend: Backend | None = None
        self.chosen: str | None = None  # the objective `I` chose; None: the model's own (objective_choices' first)
        self.data_file: str | None = None  # the user's file the chosen objective is measured on (None: shipped data)
        self._more_in_file = False  # the file has more items than the explorer measures
        self.raising: frozenset[tuple[int, int]] | None = None  # heads whose removal lowers the loss, once swept
        self._raising_order: list[tuple[int, int]] = []
        self._sweep_stage = ""
        self.importance: HeadImportance | None = None
        self.baseline: Measurement | None = None  # the objective with no head masked
        self.current: Measurement | None = None  # ... under the mask last measured
        self._conditions: Conditions | None = None  # the explorer's mask, ablation and erasure, last told
        self._sample: Corpus | None = None
        self._waiting: list[Callable[[HeadImportance], None]] | None = None  # callers of an estimate under way
        self.estimating = JobRun(self, self._estimate_stepped, name="importance", on_failed=self._estimate_failed, title="head importance")
        self.measuring = JobRun(self, self._measured, name="objective", title="head importance")
        self.sweeping = JobRun(self, self._swept, name="head by head", on_failed=self._sweep_failed, title="heads off in turn")
        self.reading = JobRun(self, self._file_read, name="objective file", title="objective on a file")
        self._after_read: Callable[[], None] = lambda: None

    def set_backend(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def objective(self) -> str:
        assert self.backend is not None  # asked only once the model is loaded
        return self.chosen or objective_choices(self.backend.info)[0][0]

    @property
    def sample(self) -> Corpus:
        """The objective's shipped data, read once: the sample pairs (similarity), the sample treebank's first sentences
        (token-classification), else the sample corpus's: what importance is estimated and measured on."""
        if self._sample is None:
            name = self.objective
            if name == "similarity":
                shipped = objective_corpus("similarity")
            elif name == "token-classification":
                shipped = treebank(limit=SAMPLE_SENTENCES)
            else:
                shipped = corpus(limit=SAMPLE_SENTENCES)
            self._sample = Corpus(list(shipped.sentences), shipped.source, shipped.report)
        return self._sample

    def marks(self) -> tuple[str, frozenset[tuple[int, int]]] | None:
        """The grid's mark for the heads whose removal raises the metric, once the sweep has found them."""
        return (RAISING_MARK, self.raising) if self.raising else None

    def choose(self, then: Callable[[], None]) -> None:
        """`I`: ask which objective to measure where more than one applies; a new one is estimated afresh (`then()`).
        An objective on a file asks for its path and replaces the current one only once the file is read and the
        model takes it (`_file_read`); a file it refuses leaves the current objective as it was."""
        assert self.backend is not None  # the screen asks once the model is loaded
        choices = objective_choices(self.backend.info)
        if len(choices) < 2:
            self.notify(f"only {choices[0][0]} applies to this model with the shipped data", timeout=4)
            return

        def chosen(choice: str | None) -> None:
            if choice is None:
                return
            if choice.endswith(ON_FILE):
                name = choice.removesuffix(ON_FILE)
                self.app.push_screen(ObjectiveFileScreen(name, FILE_OBJECTIVES[name]), lambda path: self._read_file(name, path, then))
                return
            self.reading.cancel()  # a file still being read is not wanted any more
            if choice == self.objective and self.data_file is None and self.importance is not None:
                return
            self._switch(choice, None, None, then)

        current = self.objective + (ON_FILE if self.data_file is not None else "")
        self.app.push_screen(ObjectiveChoiceScreen(choices, current), chosen)

    def _switch(self, name: str, data: tuple[Corpus, bool] | None, path: str | None, then: Callable[[], None]) -> None:
        """Measure objective `name` from now on, on `data` (a file's items, and whether it has more) or shipped data."""
        self.estimating.cancel()
        self.measuring.cancel()
        self.sweeping.cancel()
        self.chosen, self.data_file, self._waiting = name, path, None
        self._sample, self._more_in_file = data if data is not None else (None, False)
        self.importance = self.baseline = self.current = None
        self.raising, self._raising_order = None, []
        then()

    def _read_file(self, name: str, path: str | None, then: Callable[[], None]) -> None:
        """Read the user's file for `name` in a worker and have the model prepare the objective on it (which refuses
        labels it does not know); a failure is the API's one line, and the objective stays as it was."""
        if path is None:
            return
        backend = self.backend
        assert backend is not None  # `I` asks once the model is loaded

        def read(cancel: Event) -> Iterator[Progress[tuple[str, str, Corpus, bool]]]:
            yield Progress(f"reading {path}", 0, 1)
            data, more = read_objective_file(name, path, SAMPLE_SENTENCES)
            backend.objective(name, data)  # prepared once here, kept for the estimate; refuses what the model cannot take
            yield Progress("read", 1, 1, (name, path, data, more))

        self._after_read = then
        self.notify(f"reading {file_label(path)} for {name}…", timeout=3)
        self.reading.start(read)

    def _file_read(self, progress: Progress[tuple[str, str, Corpus, bool]]) -> None:
        if progress.finished:
            assert progress.result is not None  # the last step carries it
            name, path, data, more = progress.result
            self._switch(name, (data, more), path, self._after_read)

    def with_importance(self, then: Callable[[HeadImportance], None], conditions: Conditions) -> None:
        """Call `then(importance)` once importance is known, estimating it first (under the ablation) if needed."""
        self._conditions = conditions
        ablation = conditions.ablation
        if self.importance is not None:
            then(self.importance)
            return
        if self._waiting is not None:
            self._waiting.append(then)
            return
        self._waiting = [then]
        objective, sample = self.objective, self.sample
        self._draw(None)
        where = self._data_text() if self.data_file is not None else f"{len(list(sample.sentences))} sample sentences"
        self.notify(f"estimating head importance for {objective} on {where}…", timeout=4)
        backend = self.backend
        assert backend is not None  # set with the model, before `i` can ask
        self.estimating.start(
            lambda cancel: backend.steps(
                api.importance, None, backend.objective(objective, sample), method="gradient", ablation=ablation, cancel=cancel
            )
        )

    def cancel(self) -> str | None:
        """Escape: stop the estimate or the head-by-head sweep under way; what was stopped, or None."""
        if self.estimating.cancel():
            self._estimate_failed("cancelled")
            return "the head importance estimate"
        if self.sweeping.cancel():
            self._sweep_failed("cancelled")
            return "switching each head off in turn"
        return None

    def follow(self, conditions: Conditions) -> None:
        """The explorer's mask, ablation or erasure changed: measure the objective under them (once importance is known)."""
        self._conditions = conditions
        if self.importance is None:
            return
        self._draw(None, pending=conditions.changed)
        if not conditions.changed:
            self.measuring.cancel()  # the model as it is gives the baseline: nothing to measure
            return
        backend, objective, sample = self.backend, self.importance.objective, self.sample
        assert backend is not None  # importance is known, so the model is loaded
        mask, ablation, erasure = conditions.mask, conditions.ablation, conditions.live

        def measure(cancel: Event) -> Iterator[Progress[Measurement]]:
            yield Progress("measured", 1, 1, backend.measure(backend.objective(objective, sample), mask, ablation, erasure))

        self.measuring.start(measure)

    # what the workers report

    def _estimate_stepped(self, progress: Progress[HeadImportance]) -> None:
        if not progress.finished:
            self._draw(f"{progress.stage} {progress.done}/{progress.total}")
            return
        self.importance = importance = progress.result
        assert importance is not None and self._conditions is not None  # the last step carries it; the conditions came with the request
        self.baseline = Measurement(importance.baseline_loss, importance.baseline_metric)
        waiting, self._waiting = self._waiting or [], None
        for then in waiting:
            then(importance)
        self.follow(self._conditions)
        self._sweep(importance.objective, self._conditions.ablation)

    def _sweep(self, objective: str, ablation: Ablation) -> None:
        """Each head switched off in turn (exact ablation, Kovaleva et al. §6), to find those whose removal helps."""
        backend, sample = self.backend, self.sample
        assert backend is not None  # importance is known, so the model is loaded
        self._sweep_stage = "starting"
        self._draw(None)
        self.sweeping.start(lambda cancel: head_by_head(backend, objective, sample, ablation, cancel))

    def _swept(self, progress: Progress[list[tuple[float, tuple[int, int]]]]) -> None:
        if not progress.finished:
            self._sweep_stage = f"{progress.done}/{progress.total}"
            self._draw(None)
            return
        assert progress.result is not None  # the last step carries it
        self._raising_order = [head for _, head in progress.result]
        self.raising = frozenset(self._raising_order)
        self._draw(None)
        self._repaint()

    def _sweep_failed(self, reason: str) -> None:
        self._sweep_stage = ""
        self._draw(None)

    def _estimate_failed(self, reason: str) -> None:
        self._waiting = None
        self.display = False

    def _measured(self, progress: Progress[Measurement]) -> None:
        self.current = progress.result
        self._draw(None)

    # drawing

    def _draw(self, stage: str | None, pending: bool = False) -> None:
        """The baseline and the objective under the mask; `stage` of the estimate while there is no baseline."""
        self.display = True
        importance = self.importance
        on_file = f" on {file_label(self.data_file)}" if self.data_file is not None else ""
        self.border_title = f"objective: {importance.objective if importance is not None else self.objective}{on_file}"
        conditions = self._conditions
        metric = importance.metric if importance is not None else ""
        counted = self._data_text(importance)
        lines = [Text(f"{metric}, {counted}" if metric else counted, style="dim")]
        if self.baseline is None:
            lines.append(Text("estimating head importance…" + (f" {stage}" if stage else "")))
        else:
            baseline, current = self.baseline, None if pending else self.current
            changed = conditions is not None and conditions.changed
            erasure = conditions.live if conditions is not None else None
            masked = conditions is not None and conditions.masked is not None
            edited = "erased" if erasure is None or erasure.features is None else "edited"
            plain, label = ("no mask", "this mask") if erasure is None else ("as it is", f"mask+{edited}" if masked else edited)
            width = max(len(plain), len(label))
            lines.append(Text(f"{plain:<{width}} {baseline.metric:.4f}  loss {baseline.loss:.4g}"))
            if current is not None and changed:
                change = current.metric - baseline.metric
                style = "red" if change < -0.01 else ""
                lines.append(Text.assemble(f"{label:<{width}} {current.metric:.4f}  loss {current.loss:.4g}  ", (f"{change:+.4f}", style)))
            elif changed:
                lines.append(Text(f"{label:<{width}} …"))
            if erasure is not None:
                lines.append(Text(erasure.short(), style="dim"))
            lines.append(self._raising_line())
        if pending:
            lines.append(Text("measuring…", style="dim"))
        self.update(Group(*lines))

    def _data_text(self, importance: HeadImportance | None = None) -> str:
        """What the objective is measured on: `64 sentences` (shipped), `12 questions of dev.json`, `the first 64 ...`."""
        counted = importance.counted if importance is not None else None
        if counted is None:
            items = len(list(self.sample.sentences))
            counted = f"{items} {COUNTED_AS.get(self.objective, 'sentences')}"
        if self.data_file is None:
            return counted
        return f"{'the first ' if self._more_in_file else ''}{counted} of {file_label(self.data_file)}"

    def _raising_line(self) -> Text:
        """Kovaleva et al. §6: the heads whose removal raises the metric, marked in the grid; or how far the sweep is."""
        if self.raising is None:
            return Text(f"each head off in turn… {self._sweep_stage}" if self._sweep_stage else "", style="dim")
        if not self._raising_order:
            return Text("no head's removal raises the metric", style="dim")
        listed = " ".join(f"{layer}:{head}" for layer, head in self._raising_order[:8])
        more = f" +{len(self._raising_order) - 8}" if len(self._raising_order) > 8 else ""
        return Text.assemble((f"{RAISING_MARK} off, metric rises: ", "bold"), listed + more)


class ObjectiveChoiceScreen(ModalScreen[str | None]):
    """Which objective head importance measures: Enter takes the highlighted one, escape keeps the current."""

    BINDINGS = [Binding("escape", "dismiss_none", "cancel")]
    DEFAULT_CSS = """
    ObjectiveChoiceScreen { align: center middle; }
    ObjectiveChoiceScreen > Vertical {
        width: 76; max-width: 100%; height: auto; border: round $primary; background: $surface; padding: 0 1;
    }
    ObjectiveChoiceScreen Label { width: 100%; }
    ObjectiveChoiceScreen OptionList { height: auto; max-height: 12; }
    """

    def __init__(self, choices: list[tuple[str, str]], current: str) -> None:
        super().__init__()
        self.choices, self.current = choices, current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Head importance for which objective? (Enter chooses)")
            yield OptionList(
                *(Option(Text.assemble((choice.removesuffix(ON_FILE), "bold"), f": {what}"), id=choice) for choice, what in self.choices)
            )

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = [name for name, _ in self.choices].index(self.current)
        options.focus()

    @on(OptionList.OptionSelected)
    def selected(self, event: OptionList.OptionSelected) -> None:
        if self.is_active:
            self.dismiss(event.option.id)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class ObjectiveFileScreen(PromptScreen[str]):
    """Asks for the file an objective is measured on (read once Enter gives it; escape keeps the current objective)."""

    DEFAULT_CSS = "ObjectiveFileScreen > Vertical { width: 76; }"
    REFUSED = "warning"

    def __init__(self, objective: str, what: str) -> None:
        items = COUNTED_AS.get(objective, "sentences")
        question = f"{objective} on a file of yours: {what}; its first {SAMPLE_SENTENCES} {items} are measured"
        super().__init__(question, "the file's path, then Enter", "objective-file")
        self.objective, self.what = objective, what

    def read(self, text: str) -> str:
        path = text.strip()
        if not path:
            raise ValueError(f"give the path of {self.what}")
        return path


class PruneToScreen(PromptScreen[float]):
    """Asks for a percentage of heads to switch off, least important first."""

    def __init__(self) -> None:
        super().__init__(
            "Prune to X%: switch off the least important X% of the heads", "a percentage between 0 and 100, e.g. 30", "percent"
        )

    def read(self, text: str) -> float:
        try:
            value = float(text.strip().rstrip("%"))
        except ValueError:
            raise ValueError(f"{text!r} is not a number; give a percentage such as 30") from None
        if not 0 < value < 100:
            raise ValueError(f"{value:g}% is outside 0-100 (exclusive); give e.g. 30")
        return value / 100


class PruningCurveScreen(RunScreen[PruningCurve, str | None]):
    """The objective as ever more of the least important heads are removed; Enter masks the prunable set."""

    AUTO_FOCUS = "#curve"
    name_kept = "curve"
    status = "#curve-status"
    BINDINGS = [
        BACK_KEY,
        HELP_KEY,
        Binding("enter", "apply", "mask the prunable heads"),
        Binding("r", "reestimate", "re-estimate per step"),
        EXPORT_KEY,
    ]
    DEFAULT_CSS = """
    PruningCurveScreen #curve-status { height: auto; padding: 0 1; }
    PruningCurveScreen #curve { padding: 0 1; }
    """

    def __init__(
        self,
        backend: Backend,
        objective: str,
        sample: Corpus,
        importance: HeadImportance,
        ablation: Ablation,
        kept: KeptResults | None = None,
    ) -> None:
        super().__init__(kept)
        self.backend, self.objective, self.sample = backend, objective, sample
        self.importance, self.ablation = importance, ablation
        self.reestimate = False

    def compose(self) -> ComposeResult:
        yield Static("", id="curve-status")
        yield VerticalScroll(Static("", id="curve-content"), id="curve")
        yield KeyFooter()

    def on_mount(self) -> None:
        if dismissed(self):
            return
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None and kept.data == self.data_key and kept.ablation == self.ablation:
            self.result = cast(PruningCurve, kept.result)  # kept under this screen's name by `kept_run`
            self.reestimate = self.result.reestimate
            self.say(self.done_text())
            self.draw()
        else:
            self.start(reestimate=False)

    def start(self, reestimate: bool) -> None:
        self.reestimate = reestimate
        backend, objective, sample, ablation = self.backend, self.objective, self.sample, self.ablation
        ranking = None if reestimate else self.importance
        method = self.importance.method  # re-estimates rank heads as the first ranking did
        self.start_run(
            f"pruning curve for {objective}: starting…",
            lambda cancel: backend.steps(
                api.pruning_curve,
                None,
                backend.objective(objective, sample),
                ranking=ranking,
                method=method,
                ablation=ablation,
                reestimate=reestimate,
                cancel=cancel,
            ),
        )

    def step_text(self, progress: Progress) -> str:
        return f"pruning curve for {self.objective}: {progress.stage} ({progress.done}/{progress.total})"

    def kept_run(self, result: PruningCurve) -> KeptRun:
        return KeptRun(self.data_key, "", self.ablation, result)

    @property
    def data_key(self) -> str:
        """The objective and its data, which a kept curve must match: the same objective on another file is another curve."""
        return f"{self.objective} on {self.sample.source}"

    def done_text(self) -> Text:
        curve = self.result
        assert curve is not None  # said once the curve is measured
        best = curve.prunable()
        how = "re-estimated at each step" if curve.reestimate else "one ranking (r: re-estimate per step)"
        return Text.assemble(  # two lines that fit 80 columns
            (f"pruning curve · {curve.objective} · {curve.method} ({curve.ablation})", "bold"),
            f" · {how}\n",
            f"prunable within a drop of {curve.max_drop:g}: {best.fraction:.0%} ({best.heads_pruned} heads); Enter masks them",
        )

    def cancelled_text(self) -> str:
        return "cancelled; escape goes back"

    def draw(self) -> None:
        if self.result is not None:
            self.query_one("#curve-content", Static).update(curve_chart(self.result, width=24))

    def action_export(self) -> None:
        save_screen(self.app, "pruning-curve", self.table(), ".csv", self.figure)

    def figure(self) -> Figure:
        """The curve's own figure: the metric against the share of heads pruned, the prunable point starred."""
        assert self.result is not None  # `e` exports only a curve
        return self.result.figure()

    def table(self) -> str | None:
        """The curve as `prune --curve` measures it: one row per step."""
        curve = self.result
        if curve is None:
            return None
        rows = [
            [round(p.fraction, 6), p.heads_pruned, float(p.loss), float(p.metric), float(drop), p.mask]
            for p, drop in zip(curve.points, curve.drops())
        ]
        return csv_text(["fraction", "heads_pruned", "loss", "metric", "drop", "mask"], rows)

    def action_apply(self) -> None:
        if self.result is None:
            self.notify("the curve is still being measured", severity="warning")
            return
        self.dismiss(self.result.prunable().mask)

    def action_reestimate(self) -> None:
        if not self.running:
            self.start(reestimate=True)
