"""The geometry screen (`g`) and the comparison screen (`c`).

Geometry: a corpus streams through the model in a worker; then, per hidden-state layer, a
PCA scatter coloured by label (a layer slider moves through the layers from memory), the
layer × layer CKA heatmap and the TwoNN intrinsic dimension curve. Comparison: a second
model with the same tokenizer is loaded and run beside the first; the head grid is
shaded by the cosine similarity of each head's attention in the two models, with CKA per
layer beside it. Both runs show progress and stop on escape.
"""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, ProgressBar, Static

from bertscope.api import built_in_treebank, corpus
from bertscope.core.data.corpus import ReadReport, sample_corpus
from bertscope.core.model.masks import Ablation, HeadMask
from bertscope.core.progress import Progress
from bertscope.render.geometry import cka_heatmap, scatter
from bertscope.render.patterns import layer_bars
from bertscope.ui.export import json_text, save_screen
from bertscope.ui.focus import leave_input
from bertscope.ui.help import HELP_KEY
from bertscope.ui.job_run import JobRun
from bertscope.ui.kept import KeptResults, KeptRun
from bertscope.ui.overview import PatternGrid
from bertscope.ui.widgets.head_grid import HeadGrid

TREEBANK_SENTENCES = 500  # the geometry screen's corpus when none is given: words coloured by UPOS


class Scatter(Static, can_focus=True):
    """The geometry screen's main widget: it holds the focus so that arrows and `[` `]` move the layer."""


class _CorpusRunScreen(Screen[tuple[int, int] | None]):
    """What both screens share: a corpus field, a worker with progress, escape to cancel, then back.

    A finished run is kept on the app under `name_kept` (ui.kept) and shown again when the screen
    comes back; `e` saves the screen and `export_data()`.
    """

    name_kept = ""

    def __init__(self, kept: KeptResults | None = None) -> None:
        super().__init__()
        self.kept = kept if kept is not None else KeptResults()
        self.result = None
        self.job = JobRun(self, self.stepped, name="corpus-run", on_failed=self.failed)
        self._run_on = ("", "", "")  # (data, mask spec, ablation) of the run under way
        self._read = ReadReport()  # what reading its corpus skipped

    @property
    def running(self) -> bool:
        return self.job.running

    def restore(self) -> KeptRun | None:
        """Show the kept run, if there is one, and return it."""
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None:
            self.result = kept.result
            self.query_one(ProgressBar).update(total=1, progress=1)
            self.query_one(".progress-text", Static).update(f"{self.done_text()} · kept from before (r runs again)")
            self.call_after_refresh(self.draw)
        return kept

    def keep_view(self) -> dict:
        """What of the screen's view to keep with the result (overridden)."""
        return {}

    def run_on_corpus(self, describe: str, path: str, analyse, data: str = "", mask: str = "", ablation: str = "") -> None:
        """Read the corpus at `path` (empty: the built-in treebank), then run `analyse(sentences, cancel)` on it.

        `data`, `mask` and `ablation` say what the run is on, to keep with its result.
        """
        self._run_on = (data, mask, ablation)
        self._read = ReadReport()
        self.query_one(".progress-text", Static).update(describe)
        self.query_one(ProgressBar).update(total=None, progress=0)

        def job(cancel):
            chosen = corpus(data=path) if path else built_in_treebank(TREEBANK_SENTENCES)
            self._read = chosen.report  # filled as the sentences are read
            return analyse(list(chosen.sentences), cancel)

        self.job.start(job)

    def stepped(self, progress: Progress) -> None:
        bar = self.query_one(ProgressBar)
        if not progress.finished:
            total = f" of {progress.total:,}" if progress.total else ""
            self.query_one(".progress-text", Static).update(f"{progress.stage}: {progress.done:,}{total} · escape cancels")
            bar.update(total=progress.total, progress=progress.done)
            return
        self.result = progress.result
        self.kept.runs[self.name_kept] = KeptRun(*self._run_on, self.result, self.keep_view())
        bar.update(total=1, progress=1)
        self.query_one(".progress-text", Static).update(self.done_text())
        if self._read.skipped:
            self.notify(self._read.summary(), severity="warning", timeout=10)
        for note in getattr(self.result, "notes", ()):
            self.notify(note, timeout=6)
        self.draw()

    def failed(self, reason: str) -> None:
        self.query_one(".progress-text", Static).update("stopped: " + reason)

    def on_screen_suspend(self) -> None:
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None and kept.result is self.result:
            self.kept.runs[self.name_kept] = KeptRun(kept.data, kept.mask, kept.ablation, kept.result, self.keep_view())

    def on_unmount(self) -> None:
        self.on_screen_suspend()

    def action_export(self) -> None:
        save_screen(self.app, self.name_kept, None if self.result is None else json_text(self.export_data()), ".json")

    def export_data(self) -> dict:
        raise NotImplementedError

    def action_back(self) -> None:
        if leave_input(self):
            return
        if self.job.cancel():
            self.query_one(".progress-text", Static).update("cancelled (r runs again)")
            return
        self.dismiss(None)

    def done_text(self) -> str:
        raise NotImplementedError

    def draw(self) -> None:
        raise NotImplementedError


class GeometryScreen(_CorpusRunScreen):
    """`g` in the explorer: representation geometry per layer over a corpus."""

    name_kept = "geometry"
    AUTO_FOCUS = "#scatter"
    BINDINGS = [
        Binding("escape", "back", "back / cancel"),
        HELP_KEY,
        Binding("left,left_square_bracket", "layer(-1)", "layer −"),
        Binding("right,right_square_bracket", "layer(1)", "layer +"),
        Binding("f", "next_label", "colour by"),
        Binding("r", "run", "run again"),
        Binding("e", "export", "export"),
        Binding("slash", "focus_corpus", "corpus", show=False),
    ]
    DEFAULT_CSS = """
    GeometryScreen #geometry-corpus { width: 1fr; }
    GeometryScreen .progress-line { height: auto; padding: 0 1; }
    GeometryScreen .progress-text { padding-left: 2; width: 1fr; }
    GeometryScreen #geometry-body { height: 1fr; }
    GeometryScreen #scatter { width: 1fr; height: 1fr; }
    GeometryScreen #geometry-side { width: 36; padding: 0 1; }
    GeometryScreen #geometry-side:focus { background: $boost; }
    """

    def __init__(self, backend, mask: HeadMask, ablation: Ablation, colormap, glyphs: bool, kept: KeptResults | None = None) -> None:
        super().__init__(kept)
        self.backend, self.mask, self.ablation = backend, mask, ablation
        self.colormap, self.glyphs = colormap, glyphs
        self.shown_layer = backend.num_layers  # the last hidden state
        self.label: str | None = None

    def compose(self) -> ComposeResult:
        yield Input(placeholder="corpus file (text, CoNLL-U, SentEval), Enter · empty: built-in treebank", id="geometry-corpus")
        with Horizontal(classes="progress-line"):
            yield ProgressBar(total=None, show_eta=False, show_percentage=False)
            yield Static("", classes="progress-text")
        with Horizontal(id="geometry-body"):
            with Vertical(id="scatter-column"):
                yield Static("", id="layer-slider")
                yield Scatter("", id="scatter")
            yield VerticalScroll(Static("", id="geometry-charts"), id="geometry-side")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        kept = self.kept.runs.get(self.name_kept)
        if kept is None:
            self.action_run()
            return
        self.query_one("#geometry-corpus", Input).value = kept.data
        self.shown_layer = kept.view.get("layer", self.shown_layer)
        self.label = kept.view.get("label")
        self.restore()

    def keep_view(self) -> dict:
        return {"layer": self.shown_layer, "label": self.label}

    def export_data(self) -> dict:
        """The CLI's `geometry --json --points`: every layer's scatter coordinates, the CKA matrices, ID."""
        return self.result.as_json(self.backend.info.source, points=True) | {"layer_shown": self.shown_layer, "colour_by": self.label}

    def action_run(self) -> None:
        path = self.query_one("#geometry-corpus", Input).value.strip()
        mask = self.mask if len(self.mask) else None

        def analyse(sentences, cancel):
            return self.backend.geometry(sentences, mask=mask, ablation=self.ablation, cancel=cancel)

        describe = f"reading {path}…" if path else f"generating a treebank of {TREEBANK_SENTENCES:,} sentences…"
        self.run_on_corpus(describe, path, analyse, path, self.mask.spec(), self.ablation)

    @on(Input.Submitted, "#geometry-corpus")
    def corpus_submitted(self) -> None:
        self.query_one(Scatter).focus()
        self.action_run()

    def done_text(self) -> str:
        result = self.result
        mask = f" · mask {result.mask} ({result.ablation})" if result.mask else ""
        return f"{result.sentences:,} sentences · {result.size:,} of {result.seen:,} {result.unit}s{mask}"

    def action_layer(self, step: int) -> None:
        if self.result is None:
            return
        self.shown_layer = (self.shown_layer + step) % self.result.num_layers
        self.draw()

    def action_next_label(self) -> None:
        if self.result is None or not self.result.labels:
            self.notify("these rows carry no label to colour by", severity="warning")
            return
        names = list(self.result.labels)
        self.label = names[(names.index(self.label) + 1) % len(names)] if self.label in names else names[0]
        self.notify(f"colour by {self.label}", timeout=2)
        self.draw()

    def action_focus_corpus(self) -> None:
        self.query_one("#geometry-corpus", Input).focus()

    def on_resize(self) -> None:
        self.draw()

    def draw(self) -> None:
        result = self.result
        if result is None or not self.is_mounted:
            return
        self.shown_layer = min(self.shown_layer, result.num_layers - 1)
        if self.label not in result.labels:
            self.label = next(iter(result.labels), None)
        marks = "".join(f"[{layer}]" if layer == self.shown_layer else f" {layer} " for layer in range(result.num_layers))
        wide = self.query_one("#layer-slider", Static).content_size.width >= 9 + len(marks) + 15
        slider = Text.assemble(("layer ◀▶ ", "bold"), marks, (" 0 = embeddings" if wide else " 0 = emb.", "dim"))
        self.query_one("#layer-slider", Static).update(slider)
        area = self.query_one("#scatter", Static).size
        explained = result.explained[self.shown_layer]
        title = f"layer {self.shown_layer} · PC1 {explained[0]:.0%} PC2 {explained[1]:.0%}" + (f" · {self.label}" if self.label else "")
        labels = result.labels.get(self.label) if self.label else None
        self.query_one("#scatter", Static).update(
            scatter(
                result.projection[self.shown_layer],
                labels,
                width=max(area.width, 20),
                height=max(area.height, 8),
                title=title,
                glyphs=self.glyphs,
            )
        )
        dimension = result.intrinsic_dimension
        charts = Group(
            cka_heatmap(result.cka, self.colormap, title="linear CKA", glyphs=self.glyphs),
            Text(),
            layer_bars({"TwoNN ID": np.nan_to_num(dimension)}, "intrinsic dimension", scale=float(np.nanmax(dimension)) or 1.0, width=14),
            Text(),
            Text(
                f"layer {self.shown_layer}: ID {dimension[self.shown_layer]:.1f}"
                + (
                    f", {result.neighbourhood_overlap[self.shown_layer]:.0%} of {result.neighbours} neighbours kept "
                    f"in layer {self.shown_layer + 1}"
                    if self.shown_layer < result.num_layers - 1
                    else ""
                )
            ),
        )
        self.query_one("#geometry-charts", Static).update(charts)


class ComparisonScreen(_CorpusRunScreen):
    """`c` in the explorer: this model against model B, head by head and layer by layer."""

    name_kept = "compare"
    AUTO_FOCUS = "#compare-grid"
    BINDINGS = [
        Binding("escape", "back", "back / cancel"),
        HELP_KEY,
        Binding("enter", "open_head", "open head"),
        Binding("r", "run", "run again"),
        Binding("e", "export", "export"),
        Binding("slash", "focus_model_b", "model B"),
    ]
    DEFAULT_CSS = """
    ComparisonScreen #compare-inputs { height: auto; }
    ComparisonScreen #model-b { width: 1fr; }
    ComparisonScreen #compare-corpus { width: 1fr; }
    ComparisonScreen .progress-line { height: auto; padding: 0 1; }
    ComparisonScreen .progress-text { padding-left: 2; width: 1fr; }
    ComparisonScreen #compare-body { height: 1fr; }
    ComparisonScreen #compare-grid { border: round $accent; padding: 0 1; height: auto; }
    ComparisonScreen #compare-side { width: 36; padding: 0 1; }
    ComparisonScreen #compare-side:focus { background: $boost; }
    """

    def __init__(self, backend, colormap, glyphs: bool, selected: tuple[int, int], kept: KeptResults | None = None) -> None:
        super().__init__(kept)
        self.backend, self.colormap, self.glyphs = backend, colormap, glyphs
        self.selected = selected

    def compose(self) -> ComposeResult:
        with Horizontal(id="compare-inputs"):
            yield Input(placeholder="model B: a directory or a cached Hugging Face name, then Enter", id="model-b")
            yield Input(str(sample_corpus()), placeholder="corpus file, then Enter", id="compare-corpus")
        with Horizontal(classes="progress-line"):
            yield ProgressBar(total=None, show_eta=False, show_percentage=False)
            yield Static("/ types model B (same tokenizer as this model), then Enter", classes="progress-text")
        with Horizontal(id="compare-body"):
            with VerticalScroll(can_focus=False):
                yield PatternGrid(self.colormap, id="compare-grid")
                yield Static("", id="compare-head")
            yield VerticalScroll(Static("", id="compare-charts"), id="compare-side")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        grid = self.query_one(PatternGrid)
        grid.border_title = "attention cosine A·B"
        grid.set_shape(self.backend.num_layers, self.backend.num_heads)
        grid.restyle(self.colormap, self.glyphs)
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None:
            model_b, corpus = kept.data.split("\n", 1)
            self.query_one("#model-b", Input).value = model_b
            self.query_one("#compare-corpus", Input).value = corpus
            self.restore()

    @on(Input.Submitted)
    def submitted(self) -> None:
        self.action_run()

    def export_data(self) -> dict:
        """The CLI's `compare --json`: per-head attention cosines, CKA between the layers of A and B."""
        return self.result.as_json()

    def action_run(self) -> None:
        other = self.query_one("#model-b", Input).value.strip()
        path = self.query_one("#compare-corpus", Input).value.strip()
        if not other or not path:
            self.notify("give model B and a corpus file, then Enter", severity="warning")
            return
        self.query_one(PatternGrid).focus()

        def analyse(sentences, cancel):
            return self.backend.compare(other, sentences, cancel=cancel)

        self.run_on_corpus(f"loading {other}…", path, analyse, f"{other}\n{path}")

    def done_text(self) -> str:
        result = self.result
        return f"{result.sentences:,} sentences · {result.tokens:,} tokens · B = {result.model_b}"

    def draw(self) -> None:
        result = self.result
        if result is None:
            return
        grid = self.query_one(PatternGrid)
        details = self.query_one("#compare-head", Static)
        if result.head_cosine is not None:
            low = max(0.0, min(float(np.floor(np.nanmin(result.head_cosine) * 10) / 10), 0.9))
            grid.show(result.head_cosine, (low, 1.0), "cosine", HeadMask.none(*result.head_cosine.shape), self.selected)
            layer, head = self.selected
            details.update(
                f"head {layer}:{head}: cosine {result.head_cosine[layer, head]:.3f} ± {result.head_cosine_std[layer, head]:.3f}"
                f" over {result.sentences:,} sentences (scale {low:.1f}–1)"
            )
        else:
            details.update("the two models' heads do not line up; CKA only")
        matched = result.matched_cka()
        parts = []
        if matched is not None:
            parts += [layer_bars({"CKA": matched}, "CKA of layer l in A and B (0 = embeddings)", width=12), Text()]
        parts.append(cka_heatmap(result.cka, self.colormap, title="CKA, A ↓ × B →", rows="A", cols="B", glyphs=self.glyphs))
        self.query_one("#compare-charts", Static).update(Group(*parts))

    def on_head_grid_selected(self, message: HeadGrid.Selected) -> None:
        message.stop()
        self.selected = (message.layer, message.head)
        self.draw()

    def on_head_grid_toggled(self, message: HeadGrid.Toggled) -> None:
        message.stop()

    def on_head_grid_layer_toggled(self, message: HeadGrid.LayerToggled) -> None:
        message.stop()

    def action_open_head(self) -> None:
        self.job.cancel()
        self.dismiss(self.selected)

    def action_focus_model_b(self) -> None:
        self.query_one("#model-b", Input).focus()
