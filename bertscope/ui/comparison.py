"""The comparison screen (`c`): a second model with the same tokenizer is loaded and run beside the first; the head grid
is shaded by the cosine similarity of each head's attention in the two models, with CKA per layer beside it. The run
shows progress and stops on escape (ui.corpus_screen)."""

from __future__ import annotations

from collections.abc import Iterable
from threading import Event
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Group, RenderableType
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Static

from bertscope import api
from bertscope.analyses.geometry.results import ComparisonResult
from bertscope.api import Corpus
from bertscope.base.progress import Progress
from bertscope.base.theming import Colormap
from bertscope.model.masks import HeadMask
from bertscope.render.geometry import cka_heatmap
from bertscope.render.patterns import layer_bars
from bertscope.ui.backend import Backend
from bertscope.ui.corpus_screen import SAMPLE, CorpusRunScreen
from bertscope.ui.help import BACK_KEY, EXPORT_KEY, HELP_KEY, OPEN_HEAD_KEY, RUN_AGAIN_KEY
from bertscope.ui.kept import KeptResults
from bertscope.ui.widgets.footer import KeyFooter
from bertscope.ui.widgets.head_grid import HeadGrid
from bertscope.ui.widgets.job_progress import JobProgress
from bertscope.ui.widgets.pattern_grid import PatternGrid

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class ComparisonScreen(CorpusRunScreen[ComparisonResult]):
    """`c` in the explorer: this model against model B, head by head and layer by layer."""

    name_kept = "compare"
    AUTO_FOCUS = "#compare-grid"
    BINDINGS = [
        BACK_KEY,
        HELP_KEY,
        OPEN_HEAD_KEY,
        RUN_AGAIN_KEY,
        EXPORT_KEY,
        Binding("slash", "focus_model_b", "model B"),
    ]
    DEFAULT_CSS = """
    ComparisonScreen #compare-inputs { height: auto; }
    ComparisonScreen #model-b { width: 3fr; }
    ComparisonScreen #compare-corpus { width: 2fr; }
    ComparisonScreen .progress-line { height: auto; padding: 0 1; }
    ComparisonScreen .progress-text { padding-left: 2; width: 1fr; }
    ComparisonScreen #compare-body { height: 1fr; }
    ComparisonScreen #compare-grid { border: round $accent; padding: 0 1; height: auto; }
    ComparisonScreen #compare-side { width: 36; padding: 0 1; }
    ComparisonScreen #compare-side:focus { background: $boost; }
    """

    def __init__(
        self, backend: Backend, colormap: Colormap, glyphs: bool, selected: tuple[int, int], kept: KeptResults | None = None
    ) -> None:
        super().__init__(kept)
        self.backend, self.colormap, self.glyphs = backend, colormap, glyphs
        self.selected = selected

    def compose(self) -> ComposeResult:
        with Horizontal(id="compare-inputs"):
            yield Input(placeholder="model B: directory or Hugging Face name", id="model-b")
            yield Input(SAMPLE, placeholder=f"corpus file or {SAMPLE}, then Enter", id="compare-corpus")
        with Horizontal(classes="progress-line"):
            yield JobProgress()
            yield Static("/ types model B (same tokenizer as this model), then Enter", classes="progress-text")
        with Horizontal(id="compare-body"):
            with VerticalScroll(can_focus=False):
                yield PatternGrid(self.colormap, id="compare-grid")
                yield Static("", id="compare-head")
            yield VerticalScroll(Static("", id="compare-charts"), id="compare-side")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one(PatternGrid).set_up(
            "attention cosine A·B", self.backend.num_layers, self.backend.num_heads, self.colormap, self.glyphs
        )
        kept = self.kept.runs.get(self.name_kept)
        if kept is not None:
            model_b, corpus = kept.data.split("\n", 1)
            self.query_one("#model-b", Input).value = model_b
            self.query_one("#compare-corpus", Input).value = corpus
            self.restore()

    @on(Input.Submitted)
    def submitted(self) -> None:
        self.action_run()

    def figure(self) -> Figure:
        """Each head's attention cosine between A and B (CKA A × B where their heads differ)."""
        assert self.result is not None  # `e` exports only a result
        return self.result.figure()

    def export_data(self) -> dict[str, Any]:
        """The CLI's `compare --json`: per-head attention cosines, CKA between the layers of A and B."""
        assert self.result is not None  # `e` exports only a result
        return self.result.as_json()

    def action_run(self) -> None:
        other = self.query_one("#model-b", Input).value.strip()
        path = self.query_one("#compare-corpus", Input).value.strip()
        if not other or not path:
            self.notify("give model B and a corpus file, then Enter", severity="warning")
            return
        self.query_one(PatternGrid).focus()

        def analyse(chosen: Corpus, cancel: Event) -> Iterable[Progress[ComparisonResult]]:
            return self.backend.steps(api.compare, None, other, chosen, unit="token", max_rows=None, cancel=cancel)

        self.run_on_corpus(f"loading {other}…", path, analyse, f"{other}\n{path}")

    def done_text(self) -> str:
        result = self.result
        assert result is not None  # said once the run is done
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
            assert result.head_cosine_std is not None  # measured with the cosines
            details.update(
                f"head {layer}:{head}: cosine {result.head_cosine[layer, head]:.3f} ± {result.head_cosine_std[layer, head]:.3f}"
                f" over {result.sentences:,} sentences (scale {low:.1f}–1)"
            )
        else:
            details.update("the two models' heads do not line up; CKA only")
        matched = result.matched_cka()
        parts: list[RenderableType] = []
        if matched is not None:
            parts += [layer_bars({"CKA": matched}, "CKA of layer l in A and B (0 = embeddings)", width=12), Text()]
        parts.append(cka_heatmap(result.cka, self.colormap, title="CKA, A ↓ × B →", rows="A", cols="B", glyphs=self.glyphs))
        self.query_one("#compare-charts", Static).update(Group(*parts))

    def on_head_grid_selected(self, message: HeadGrid.Selected) -> None:
        self.selected = (message.layer, message.head)
        self.draw()

    def action_open_head(self) -> None:
        self.job.cancel()
        self.dismiss(self.selected)

    def action_focus_model_b(self) -> None:
        self.query_one("#model-b", Input).focus()
