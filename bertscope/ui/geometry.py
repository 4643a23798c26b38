"""The geometry screen (`g`): a corpus streams through the model in a worker; then, per hidden-state layer, a PCA
scatter coloured by label (a layer slider moves through the layers from memory), the layer × layer CKA heatmap and the
TwoNN intrinsic dimension curve. The run shows progress and stops on escape (ui.corpus_screen)."""

from __future__ import annotations

from collections.abc import Iterable
from threading import Event
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Input, Static

from bertscope import api
from bertscope.analyses.conditions import Conditions, conditions_note
from bertscope.analyses.geometry.results import GeometryResult
from bertscope.api import Corpus
from bertscope.base.progress import Progress
from bertscope.base.theming import Colormap
from bertscope.render.geometry import cka_heatmap, scatter
from bertscope.render.patterns import layer_bars
from bertscope.ui.backend import Backend
from bertscope.ui.corpus_screen import CorpusRunScreen
from bertscope.ui.help import BACK_KEY, EXPORT_KEY, FOCUS_CORPUS_KEY, HELP_KEY, RUN_AGAIN_KEY
from bertscope.ui.kept import KeptResults, erasure_json
from bertscope.ui.widgets.footer import KeyFooter
from bertscope.ui.widgets.job_progress import JobProgress

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TREEBANK_SENTENCES = CorpusRunScreen.treebank_sentences  # the geometry screen's corpus when none is given


class Scatter(Static, can_focus=True):
    """The geometry screen's main widget: it holds the focus so that arrows and `[` `]` move the layer."""


class GeometryScreen(CorpusRunScreen[GeometryResult]):
    """`g` in the explorer: representation geometry per layer over a corpus."""

    name_kept = "geometry"
    AUTO_FOCUS = "#scatter"
    BINDINGS = [
        BACK_KEY,
        HELP_KEY,
        Binding("left,left_square_bracket", "layer(-1)", "layer −"),
        Binding("right,right_square_bracket", "layer(1)", "layer +"),
        Binding("f", "next_label", "colour by"),
        RUN_AGAIN_KEY,
        EXPORT_KEY,
        FOCUS_CORPUS_KEY,
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

    def __init__(
        self,
        backend: Backend,
        conditions: Conditions,
        colormap: Colormap,
        glyphs: bool,
        kept: KeptResults | None = None,
    ) -> None:
        """`conditions`: the explorer's mask, ablation and erasure, which every pass here runs with."""
        super().__init__(kept)
        self.backend, self.conditions = backend, conditions
        self.colormap, self.glyphs = colormap, glyphs
        self.shown_layer = backend.num_layers  # the last hidden state
        self.label: str | None = None

    def compose(self) -> ComposeResult:
        yield Input(placeholder="corpus file (text, CoNLL-U, SentEval), Enter · empty: built-in treebank", id="geometry-corpus")
        with Horizontal(classes="progress-line"):
            yield JobProgress()
            yield Static("", classes="progress-text")
        with Horizontal(id="geometry-body"):
            with Vertical(id="scatter-column"):
                yield Static("", id="layer-slider")
                yield Scatter("", id="scatter")
            yield VerticalScroll(Static("", id="geometry-charts"), id="geometry-side")
        yield KeyFooter()

    def on_mount(self) -> None:
        kept = self.kept.runs.get(self.name_kept)
        if kept is None:
            self.action_run()
            return
        self.query_one("#geometry-corpus", Input).value = kept.data
        self.shown_layer = kept.view.get("layer", self.shown_layer)
        self.label = kept.view.get("label")
        self.restore()

    def keep_view(self) -> dict[str, Any]:
        return {"layer": self.shown_layer, "label": self.label}

    def figure(self) -> Figure:
        """The scatter of the layer shown, coloured as here."""
        assert self.result is not None  # `e` exports only a result
        under = conditions_note(*self.result_conditions())  # the mask, and an erasure, which the result does not hold
        return self.result.figure("scatter", layer=self.shown_layer, label=self.label, under=under)

    def export_data(self) -> dict[str, Any]:
        """The CLI's `geometry --json --points`: every layer's scatter coordinates, the CKA matrices, ID."""
        assert self.result is not None  # `e` exports only a result
        shown = {"layer_shown": self.shown_layer, "colour_by": self.label}
        return self.result.as_json(self.backend.info.source, points=True) | erasure_json(self.result_erasure()) | shown

    def action_run(self) -> None:
        path = self.query_one("#geometry-corpus", Input).value.strip()
        under = self.conditions

        def analyse(chosen: Corpus, cancel: Event) -> Iterable[Progress[GeometryResult]]:
            return self.backend.steps(
                api.geometry, under.live, chosen, max_rows=None, mask=under.masked, ablation=under.ablation, cancel=cancel
            )

        describe = f"reading {path}…" if path else f"generating a treebank of {TREEBANK_SENTENCES:,} sentences…"
        self.run_on_corpus(describe, path, analyse, path, under)

    @on(Input.Submitted, "#geometry-corpus")
    def corpus_submitted(self) -> None:
        self.query_one(Scatter).focus()
        self.action_run()

    def done_text(self) -> str:
        result = self.result
        assert result is not None  # said once the run is done
        conditions = conditions_note(result.mask, result.ablation, self.result_erasure())
        return f"{result.sentences:,} sentences · {result.size:,} of {result.seen:,} {result.unit}s{conditions}"

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
