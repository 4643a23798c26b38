"""The probing pane: what each layer knows, for several tasks side by side.

Pick a built-in task (or give a CoNLL-U / SentEval file and its task), run it in a worker
with per-stage progress, and compare the per-layer curves of every task run so far. `m`
re-scores the last task under the explorer's current head mask (and the property it erases,
`E`), so the pane shows what the masked heads (or the erasure) cost each layer. `d` adds
each layer's description length (Voita & Titov 2020): runs then fit the online code too, and
a compression column (uniform over online codelength, a word task's control task beside it)
stands by each accuracy curve; the curves already drawn without it are run again with it, one
after another (their features come from the cache).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from threading import Event
from typing import TYPE_CHECKING

import numpy as np
from rich.bar import Bar
from rich.console import RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer
from textual.widgets import Input, Select, Static

from bertscope import api
from bertscope.analyses.conditions import Conditions
from bertscope.analyses.probing.results import ProbeReport
from bertscope.api import ProbeData, built_in_treebank, probe_sentences
from bertscope.base.progress import Progress
from bertscope.data.corpus import Sentence
from bertscope.data.probing_tasks import STRUCTURAL_TASKS, TASKS, TREEBANK_TASKS, generate
from bertscope.ui.backend import Backend
from bertscope.ui.corpus_screen import RunScreen
from bertscope.ui.export import json_text, save_screen
from bertscope.ui.help import BACK_KEY, EXPORT_KEY, HELP_KEY
from bertscope.ui.kept import KeptResults, ProbeRun
from bertscope.ui.widgets.footer import KeyFooter
from bertscope.ui.widgets.job_progress import JobProgress

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BAR, MIN_BAR = 12, 6  # a curve's bars, and how narrow they may get on a narrow pane
TREEBANK_SENTENCES = 1000  # for tasks with no file; smaller than the CLI's default: the pane should answer within a minute on a CPU


def built_in_sentences(task: str) -> list[Sentence]:
    """What a task is probed on here without a file: the built-in task's generated sets, else (a treebank task) the
    generated treebank."""
    if task in TASKS:  # the CLI's sets, as attribution and patching train on: one probe, one number
        return generate(task)
    return list(built_in_treebank(TREEBANK_SENTENCES).sentences)


def probe_data(task: str, data: str = "") -> ProbeData:
    """What a task is probed on here, as the API takes it: the file, read as the CLI reads it (its notes on what it
    skipped go on to the report), else its `built_in_sentences`."""
    return probe_sentences(task, data=data) if data else ProbeData(built_in_sentences(task))


def trained_on(report: ProbeReport) -> str:
    """`trained on 2,000 sentences (dev 400, test 400)`: what a curve was measured with (the CLI prints the same)."""
    counts = report.counts
    return f"trained on {counts['train']:,} {counts.get('unit', 'sentences')} (dev {counts['dev']:,}, test {counts['test']:,})"


def folded(name: str, width: int) -> list[str]:
    """A title part in lines of `width`, broken after its underscores where it is too long (`sentence_` `length`)."""
    lines = [""]
    for piece in name.replace("_", "_\0").split("\0"):
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return lines


class ProbingScreen(RunScreen[ProbeReport, None]):
    """`p` in the explorer."""

    AUTO_FOCUS = "#curves"
    name_kept = "probing"
    status = "#probe-status"
    BINDINGS = [
        BACK_KEY,
        HELP_KEY,
        Binding("r,ctrl+r", "run", "run"),
        Binding("m", "rescore_masked", "re-score masked"),
        Binding("d", "toggle_codes", "MDL"),  # short, so that it fits at 80 columns: the help names it in full
        Binding("x", "clear", "clear curves"),
        EXPORT_KEY,
        Binding("slash", "focus_task", "task", show=False),
    ]
    DEFAULT_CSS = """
    ProbingScreen #probe-row { height: auto; }
    ProbingScreen #task { width: 36; }
    ProbingScreen #probe-data { width: 1fr; }
    ProbingScreen #probe-progress-line { height: auto; padding: 0 1; }
    ProbingScreen #probe-status { padding-left: 2; width: 1fr; }
    ProbingScreen #curves { padding: 0 1; height: 1fr; }
    """

    def __init__(self, backend: Backend, conditions: Conditions, kept: KeptResults | None = None) -> None:
        """`conditions`: the explorer's mask, ablation and erasure, which `m` applies."""
        super().__init__(kept)
        self.backend, self.conditions = backend, conditions
        self.reports: dict[str, ProbeReport] = self.kept.probes  # column title -> ProbeReport, in run order; kept on the app
        self._title = ""  # the column title of the run under way
        self._run = ProbeRun("", "")  # what it runs on
        self._filling = True  # whether `d` runs the curves without codes again (escape stops it, `d` starts it again)

    @property
    def _last(self) -> tuple[str, str] | None:
        return self.kept.last_probe

    def compose(self) -> ComposeResult:
        options = [(f"{task.name} ({task.group})", task.name) for task in TASKS.values()]
        options += [(f"{name} (treebank)", name) for name in TREEBANK_TASKS]  # a CoNLL-U file, else the built-in one
        with Horizontal(id="probe-row"):
            yield Select(options, value="bigram_shift", allow_blank=False, id="task")
            yield Input(placeholder="CoNLL-U/SentEval (empty: built-in)", id="probe-data")
        with Horizontal(id="probe-progress-line"):
            yield JobProgress(show_percentage=True, id="probe-progress")
            yield Static("r runs the chosen task (/ chooses another)", id="probe-status")
        yield ScrollableContainer(Static("", id="curves-content"), id="curves")
        yield KeyFooter()

    def on_mount(self) -> None:
        if self.reports:
            task, data = self._last or (next(iter(self.reports)), "")
            self.query_one("#task", Select).value = task
            self.query_one("#probe-data", Input).value = data
            self.query_one("#probe-status", Static).update(
                f"{len(self.reports)} curve(s) kept from before; m re-scores {task} under the explorer's mask"
            )
            self.draw()

    # running

    @on(Input.Submitted, "#probe-data")
    def data_submitted(self) -> None:
        self.query_one("#curves").focus()
        self.action_run()

    def action_focus_task(self) -> None:
        self.query_one("#task", Select).focus()

    def action_run(self, masked: bool = False) -> None:
        task = str(self.query_one("#task", Select).value)
        data = self.query_one("#probe-data", Input).value.strip()
        if masked and self._last is not None:
            task, data = self._last
        self.kept.last_probe = (task, data)
        mask = self.conditions.masked if masked else None
        erasure = self.conditions.live if masked else None
        title = (
            task
            + (f" · mask {mask.spec()}" if mask is not None else "")
            + (f" · {erasure.short()}" if erasure is not None else "")
            + ("" if not data else f" · {data.rsplit('/', 1)[-1]}")
        )
        self._filling = True
        self._start(title, ProbeRun(task, data, mask, self.conditions.ablation, erasure), "starting…")

    def _start(self, title: str, run: ProbeRun, saying: str) -> None:
        """Run `run` for the column `title`, with the online code where `d` is on."""
        self._title, self._run = title, run
        codes = self.kept.probe_codes

        def job(cancel: Event) -> Iterable[Progress[ProbeReport]]:
            chosen = probe_data(run.task, run.data)
            return self.backend.steps(
                api.probe, run.erasure, run.task, chosen, mask=run.mask, ablation=run.ablation, mdl=codes, cancel=cancel
            )

        self.start_run(f"{title}: {saying}", job)
        self.draw()  # a curve waiting for its codes says so

    def _without_codes(self) -> list[str]:
        """The curves shown without a description length that `d` can fit (a structural probe has none to fit)."""
        return [
            title
            for title, report in self.reports.items()
            if not report.mdl and report.task not in STRUCTURAL_TASKS and title in self.kept.probe_runs
        ]

    def _fill_codes(self) -> None:
        """With `d` on, run the next curve drawn without codes again with them, unless a run is under way."""
        missing = self._without_codes()
        if not (self.kept.probe_codes and self._filling and missing) or self.running:
            return
        title = missing[0]
        counted = f" ({len(missing)} to go)" if len(missing) > 1 else ""
        self._start(title, self.kept.probe_runs[title], f"fitting its description length{counted}… · escape stops")

    def action_rescore_masked(self) -> None:
        if self._last is None:
            self.notify("run a task first, then m re-scores it under the explorer's mask", severity="warning")
        elif not self.conditions.changed:
            self.notify("no heads are masked nor property erased in the explorer; switch some off (or E) first", severity="warning")
        else:
            self.action_run(masked=True)

    def action_toggle_codes(self) -> None:
        """`d`: description length beside accuracy (the online code: Voita & Titov 2020), or accuracy alone; the curves
        drawn without it are run again with it."""
        codes = self.kept.probe_codes = not self.kept.probe_codes
        if codes:
            self._filling = True
            self.notify("description length: runs also fit the online code, about as long again", timeout=5)  # the status
            # line says which curves drawn without it are fitted now: two lines here, over the data field, not the status
            self._fill_codes()
        else:
            self.notify("accuracy alone; runs no longer fit the online code", timeout=3)
        self.draw()

    def step_text(self, progress: Progress) -> str:
        return f"{self._title}: {progress.stage}"

    def done_text(self) -> str:
        assert self.result is not None  # said once the run is done
        return f"{self._title}: done, best layer {self.result.best_layer}"

    def cancelled_text(self) -> str:
        return "cancelled"

    def finished(self, result: ProbeReport) -> None:
        self.reports[self._title] = result  # its notes come as notifications with the step (JobRun)
        self.kept.probe_runs[self._title] = self._run
        self._fill_codes()

    def stopped(self) -> None:
        self._filling = False  # not again and again after a failure, nor after escape: `d` tries again
        self.draw()

    # drawing

    def draw(self) -> None:
        """One column per run: the per-layer score as a bar (0 = embeddings); nothing before the first."""
        if not self.reports:
            return
        table = Table(box=None, padding=(0, 1))
        table.add_column("layer", justify="right", style="dim")
        reports = list(self.reports.items())
        # Each curve takes its bar's column and its numbers' (" 0.800 *", 9 with padding); on a narrow pane the bars
        # and titles narrow, down to 6 cells, so that every curve's numbers and best-layer mark show.
        codes = self.kept.probe_codes
        room = (self.query_one("#curves").content_size.width or 1000) - 7  # less the layer column
        slots = len(reports) * (2 if codes else 1)  # a curve's columns: accuracy, and its compression beside it
        column = max(MIN_BAR, min(BAR, room // slots - 11))
        for title, report in reports:
            parts = title.split(" · ")  # task, mask, data: one line each, so a fold never cuts a word
            width = max(column, min(24, max(len(part) for part in parts), room // slots - 11))
            lines = [line for part in parts for line in folded(part, width)]
            table.add_column(Text("\n".join([*lines, report.metric]), overflow="fold"), width=width, no_wrap=False)
            table.add_column("", justify="left", no_wrap=True)
            if codes:
                table.add_column(Text("\n".join(["", *([""] * (len(lines) - 1)), "compression"])), width=column, no_wrap=False)
                table.add_column("", justify="left", no_wrap=True)
        coded = [report for _, report in reports if report.mdl]
        top = max([float(report.compression().max()) for report in coded] + [1.0])
        num_layers = len(reports[0][1].layers)
        for layer in range(num_layers):
            cells: list[RenderableType] = []
            for _, report in reports:
                value = report.layers[layer][report.metric]
                mark = " *" if layer == report.best_layer else ""
                cells += [Bar(1.0, 0.0, max(0.0, min(1.0, value)), width=column, color="magenta"), f"{value:.3f}{mark}"]
                if codes:
                    cells += self._code_cells(report, layer, top, column)
            table.add_row(str(layer), *cells)
        baselines = [
            Text(
                f"{title}: "
                + ", ".join(f"{k.replace('_', ' ')} {v:.3f}" for k, v in report.baselines.items())
                + f"; centre of gravity {report.center_of_gravity:.2f}; {trained_on(report)}",
                style="dim",
            )
            for title, report in reports
        ]
        if codes:
            baselines.insert(0, Text(self._codes_legend(), style="dim"))
        from rich.console import Group

        content = self.query_one("#curves-content", Static)
        # as wide as the table wants (the pane scrolls sideways), never squeezed into the screen's width
        wanted = Measurement.get(self.app.console, self.app.console.options.update_width(1000), table).maximum
        content.styles.width = max(wanted, self.query_one("#curves").content_size.width)
        content.update(Group(table, Text("layer 0 is the embeddings; * marks the best layer", style="dim"), *baselines))

    def _codes_legend(self) -> str:
        """What the compression columns hold, and what their marks mean where a curve has no codes."""
        parts = ["compression: uniform / online codelength (Voita & Titov 2020), * the best layer"]
        controlled = {"control" in report.layers[0]["mdl"] for report in self.reports.values() if report.mdl}
        if True in controlled:
            parts.append("(in brackets) the control task's")
        if False in controlled:  # Hewitt & Liang's control task gives each word type a label: it has no sentence form
            parts.append("a sentence task has no control task (it gives each word type a random label)")
        marks = {self._code_mark(report) for report in self.reports.values() if not report.mdl}
        if "…" in marks:
            parts.append("… : being fitted (escape stops)")
        if "—" in marks:
            parts.append("— : run without codes (d twice, or r, fits them)")
        if "n/a" in marks:
            parts.append("n/a: a structural probe regresses numbers, which have no codelength")
        return "; ".join(parts)

    def _code_mark(self, report: ProbeReport) -> str:
        """What a curve without codes shows in its compression column: being fitted, not fitted, or none to fit."""
        if report.task in STRUCTURAL_TASKS:
            return "n/a"
        waiting = self._filling and any(self.reports.get(title) is report for title in self._without_codes())
        return "…" if waiting else "—"

    def _code_cells(self, report: ProbeReport, layer: int, top: float, width: int) -> list[RenderableType]:
        """A layer's compression as a bar (up to the largest shown) and its number, the control task's beside it."""
        if not report.mdl:
            return ["", self._code_mark(report)]
        code = report.layers[layer]["mdl"]
        mark = " *" if layer == int(np.argmax(report.compression())) else ""
        control = f" ({code['control']['compression']:.2f})" if "control" in code else ""
        return [Bar(top, 0.0, code["compression"], width=width, color="cyan"), f"{code['compression']:.2f}{mark}{control}"]

    def action_clear(self) -> None:
        self.reports.clear()
        self.kept.probe_runs.clear()
        self.query_one("#curves-content", Static).update("")

    def action_export(self) -> None:
        save_screen(self.app, "probing", self.curves(), ".json", self.figure)

    def figure(self) -> Figure:
        """Every curve shown, on one plot, each named as its column here (with `d`: beside those with codes, their
        compression in a second panel, as `bertscope probe --mdl --figure` draws them)."""
        from bertscope.figures.curves import probe_curves

        reports = list(self.reports.items())
        coded = [(title, report) for title, report in reports if report.mdl]
        if self.kept.probe_codes and coded:
            curves = [replace(report.curve(), task=title) for title, report in coded]
            codes = [replace(report.compression_curve(), task=title) for title, report in coded]
            return probe_curves(curves, coded[0][1].metric, compression=codes)
        metric = reports[0][1].metric
        return probe_curves([replace(report.curve(), task=title) for title, report in reports], metric)

    def curves(self) -> str | None:
        """Every curve shown, as JSON: per run its title, task, metric, per-layer scores and baselines."""
        if not self.reports:
            return None
        runs = [
            {
                "title": title,
                "task": report.task,
                "metric": report.metric,
                "best_layer": report.best_layer,
                "center_of_gravity": report.center_of_gravity,
                "baselines": report.baselines,
                "layers": report.layers,
            }
            for title, report in self.reports.items()
        ]
        return json_text({"model": self.backend.info.source, "runs": runs})
