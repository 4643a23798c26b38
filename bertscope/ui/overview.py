"""The model overview: every head's attention pattern and statistics over a corpus.

The layer × head grid is coloured by each head's dominant pattern class (Kovaleva et al.)
or shaded by any statistic; beside it, per layer, the attention to [CLS], [SEP] and
punctuation (Clark et al., Fig. 1). A CoNLL-U corpus also gives the heads that track
dependency relations (Clark et al. §4): a table of the best head per relation against the
fixed-offset baseline, and a shading of the grid by one relation (`y` the next, `Y` the
direction). The corpus streams through the model in a worker with
live progress and can be cancelled; Enter opens the selected head in the explorer. The same
passes take the shares of value-weighted norms ‖αf‖ (Kobayashi et al.), which `n` shows in
place of the weights' (1.05× the cost of the weights alone, benchmarks/norms.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from threading import Event
from typing import TYPE_CHECKING, cast

import numpy as np
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Static

from bertscope import api
from bertscope.analyses.attention.patterns_results import NORM_SHARES, PATTERNS, STATISTICS, PatternResult
from bertscope.analyses.attention.syntax_results import DIRECTIONS, SyntaxResult
from bertscope.analyses.conditions import Conditions, conditions_note
from bertscope.api import Corpus, treebank
from bertscope.base.progress import Progress
from bertscope.base.theming import Colormap
from bertscope.data.corpus import detect_format
from bertscope.model.masks import HeadMask
from bertscope.render.patterns import layer_bars, layer_pattern_table
from bertscope.render.syntax import syntax_table
from bertscope.ui.backend import Backend
from bertscope.ui.corpus_screen import SAMPLE, CorpusRunScreen, corpus_path
from bertscope.ui.export import csv_text, save_screen
from bertscope.ui.help import BACK_KEY, EXPORT_KEY, FOCUS_CORPUS_KEY, HELP_KEY, OPEN_HEAD_KEY, RUN_AGAIN_KEY
from bertscope.ui.job_run import JobRun
from bertscope.ui.kept import KeptResults, KeptRun
from bertscope.ui.state import erasure_spec
from bertscope.ui.syntax import SYNTAX_FIGURE, kept_relation, next_relation, syntax_label, syntax_overlay
from bertscope.ui.theme import rich_colour
from bertscope.ui.widgets.footer import KeyFooter
from bertscope.ui.widgets.head_grid import FIGURE_LABELS, HeadGrid
from bertscope.ui.widgets.job_progress import JobProgress
from bertscope.ui.widgets.pattern_grid import PatternGrid

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SHADINGS = ("pattern", *STATISTICS)  # and SYNTAX_FIGURE, once a CoNLL-U corpus gave heads that track syntax
SYNTAX_ROWS = 8  # relations in the overview's table, most frequent first
SYNTAX_MIN_COUNT = 20
STATISTIC_NAMES = FIGURE_LABELS | {"block": "attn within segment", "distance": "mean distance"}


def packed(items: list[str], width: int) -> Text:
    """Items two spaces apart, wrapped between items only: a name never parts from its number."""
    lines, line = [], ""
    for item in items:
        if line and len(line) + 2 + len(item) > width:
            lines.append(line)
            line = item
        else:
            line = f"{line}  {item}" if line else item
    lines.append(line)
    return Text("\n".join(lines))


def layer_numbers(values: dict[str, np.ndarray], title: str) -> Table:
    """Per layer, the attention (or the norms' share) to [CLS], [SEP] and punctuation as numbers (for a narrow pane)."""
    table = Table(box=None, padding=(0, 1), title=title, title_justify="left")
    table.add_column("layer", justify="right", style="dim")
    for name in values:
        table.add_column(name, justify="right")
    for layer in range(len(next(iter(values.values())))):
        table.add_row(str(layer), *(f"{series[layer]:.2f}" for series in values.values()))
    return table


class OverviewScreen(CorpusRunScreen[PatternResult]):
    """`o` in the explorer: patterns and statistics of every head over a corpus, and the heads that track syntax beside
    them when the corpus is a treebank."""

    name_kept = "overview"
    AUTO_FOCUS = "#overview-grid"
    BINDINGS = [
        BACK_KEY,
        HELP_KEY,
        OPEN_HEAD_KEY,
        Binding("f", "next_shading", "shading"),
        Binding("n", "toggle_norms", "weights/norms"),
        RUN_AGAIN_KEY,
        Binding("y", "syntax_relation", "relation", show=False),
        Binding("Y", "syntax_direction", "direction", show=False),
        EXPORT_KEY,
        FOCUS_CORPUS_KEY,
    ]
    DEFAULT_CSS = """
    OverviewScreen #corpus-row { height: auto; }
    OverviewScreen #corpus { width: 1fr; }
    OverviewScreen .progress-line { height: auto; padding: 0 1; }
    OverviewScreen .progress-text { padding-left: 2; width: 1fr; }
    OverviewScreen #overview-body { height: 1fr; }
    OverviewScreen #overview-left { width: auto; min-width: 36; height: 1fr; }
    OverviewScreen #charts { width: 1fr; min-width: 30; }
    OverviewScreen #overview-grid { border: round $accent; padding: 0 1; height: auto; }
    OverviewScreen #head-details { padding: 0 1; height: auto; }
    OverviewScreen #charts { padding: 0 1; }
    OverviewScreen #charts:focus { background: $boost; }
    """

    def __init__(
        self,
        backend: Backend,
        conditions: Conditions,
        colormap: Colormap,
        glyphs: bool,
        selected: tuple[int, int],
        kept: KeptResults | None = None,
    ) -> None:
        """`conditions`: the explorer's mask, ablation and erasure, which every pass here runs with."""
        super().__init__(kept)
        self.backend, self.conditions = backend, conditions
        self.colormap, self.glyphs = colormap, glyphs
        self.selected = selected
        self.shading = "pattern"
        self.norms = False  # the shares of value-weighted norms ‖αf‖ (Kobayashi et al.) instead of the weights
        self.syntax: SyntaxResult | None = None  # heads that track syntax, for a CoNLL-U corpus
        self.relation: str | None = None
        self.direction = DIRECTIONS[0]
        self.syntax_job = JobRun(self, self.syntax_stepped, name="syntax", title="syntactic heads")
        self._path = ""  # the corpus of the run under way

    def compose(self) -> ComposeResult:
        with Horizontal(id="corpus-row"):
            yield Input(SAMPLE, placeholder=f"a corpus file (text, CoNLL-U or SentEval) or {SAMPLE}, then Enter", id="corpus")
        with Horizontal(classes="progress-line"):
            yield JobProgress()
            yield Static("", classes="progress-text")
        with Horizontal(id="overview-body"):
            with VerticalScroll(id="overview-left", can_focus=False):
                yield PatternGrid(self.colormap, id="overview-grid")
                yield Static("", id="head-details")
            yield VerticalScroll(Static("", id="charts-content"), id="charts")  # tab, then arrows: the syntax table at 80×24
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one(PatternGrid).set_up(
            "heads over the corpus", self.backend.num_layers, self.backend.num_heads, self.colormap, self.glyphs
        )
        kept = self.kept.runs.get(self.name_kept)
        if kept is None:
            self.action_run()
            return
        self.query_one("#corpus", Input).value = kept.data
        kept_syntax = self.kept.runs.get("overview-syntax")
        if kept_syntax is not None and kept_syntax.data == kept.data:
            self.syntax = cast(SyntaxResult, kept_syntax.result)  # kept by `syntax_stepped`
            self.relation = kept_relation(self.syntax, None)
        self.restore()

    # running

    def action_run(self) -> None:
        self._path = path = self.query_one("#corpus", Input).value.strip()
        if not path:
            self.notify("give a corpus file, then Enter", severity="warning")
            return

        def analyse(chosen: Corpus, cancel: Event) -> Iterable[Progress[PatternResult]]:
            under = self.conditions
            return self.backend.steps(api.patterns, under.live, chosen, mask=under.mask, ablation=under.ablation, norms=True, cancel=cancel)

        self.run_on_corpus(f"reading {path}…", path, analyse, path, self.conditions)
        self._run_syntax(corpus_path(path))

    def _run_syntax(self, path: str) -> None:
        """Heads that track syntax beside the patterns, when the corpus is a treebank (CoNLL-U)."""
        self.syntax = None
        if self.shading == SYNTAX_FIGURE:
            self.shading = "pattern"
        try:
            has_trees = detect_format(path) == "conllu"
        except Exception:  # a missing file: the patterns run says so
            has_trees = False
        if not has_trees:
            self.syntax_job.cancel()
            return

        def job(cancel: Event) -> Iterable[Progress[SyntaxResult]]:
            under = self.conditions
            return self.backend.steps(api.syntax, under.live, treebank(data=path), mask=under.mask, ablation=under.ablation, cancel=cancel)

        self.syntax_job.start(job)

    def syntax_stepped(self, progress: Progress[SyntaxResult]) -> None:
        self.syntax = progress.partial
        self.relation = kept_relation(self.syntax, self.relation)
        if progress.finished:
            self.kept.runs["overview-syntax"] = KeptRun.of(self._path, self.conditions, progress.result)
        self.draw()

    @on(Input.Submitted, "#corpus")
    def corpus_submitted(self) -> None:
        self.query_one(PatternGrid).focus()
        self.action_run()

    def step_text(self, progress: Progress) -> str:
        return self._run_text(progress.done, "running (escape cancels)")

    def done_text(self) -> str:
        assert self.result is not None  # said once the run is done
        return self._run_text(self.result.sentences, "done")

    def _run_text(self, sentences: int, state: str) -> str:
        assert self.result is not None  # every step of the run carries the statistics so far
        truncated = f" · {self.result.truncated:,} tokens cut" if self.result.truncated else ""
        return f"{sentences:,} sentences · {state}{truncated}{self.conditions.note()}"

    def kept_text(self, kept: KeptRun) -> str:
        result = cast(PatternResult, kept.result)  # kept under this screen's name
        return f"{result.sentences:,} sentences · kept from before (r runs again){kept.mask_note()}"

    def cancelled_text(self) -> str:
        done = self.result.sentences if self.result is not None else 0
        return f"cancelled after {done:,} sentences (r runs again)"

    def cancel_run(self) -> bool:
        self.syntax_job.cancel()
        return super().cancel_run()

    # drawing

    def draw(self) -> None:
        result = self.result
        if result is None:
            return
        grid = self.query_one(PatternGrid)
        if self.shading == "pattern":
            grid.show_classes(result.dominant, self._class_colours(), self.selected, "pattern")
        elif self.shading == SYNTAX_FIGURE and self.syntax is not None and self.relation is not None:
            values, value_range, label = syntax_overlay(self.syntax, self.relation, self.direction)
            grid.show(values, value_range, label, HeadMask.none(*values.shape), self.selected)
        else:
            values = result.statistics[self._shown(self.shading)]
            high = 1.0 if self.shading not in ("entropy", "distance") else max(float(values.max()), 1e-6)
            grid.show(values, (0.0, high), self._label(self.shading), result.mask or HeadMask.none(*values.shape), self.selected)
        layer, head = self.selected
        items = [f"{name} {share:.0%}" for name, share in zip(PATTERNS, result.pattern_shares[layer, head]) if share > 0]
        if result.off[layer, head]:
            items.insert(0, f"switched off ({result.ablation}): no pattern")
        items += [
            f"{'‖αf‖ ' * (self._shown(name) != name)}{name} {result.statistics[self._shown(name)][layer, head]:.2f}" for name in STATISTICS
        ]
        if self.syntax is not None and self.relation is not None:
            items.append(
                f"{syntax_label(self.relation, self.direction)} {self.syntax.accuracy(self.relation, self.direction)[layer, head]:.0%}"
            )
        width = self.query_one("#head-details").content_size.width or 36
        details = Text.assemble((f"head {layer}:{head}", "bold"), "\n", packed(items, width))
        self.query_one("#head-details", Static).update(details)
        # three bars and their numbers side by side; where the bars would be too short, the numbers alone
        layers = {name: result.layer_statistics(self._shown(name)) for name in ("cls", "sep", "punct")}
        title = "‖αf‖ (value-weighted norms) per layer" if self._showing_norms else "attention per layer"
        bar_width = min(6, (self.query_one("#charts").content_size.width - 31) // 3)
        per_layer = (
            layer_bars(layers, title, width=bar_width)
            if bar_width >= 5
            else layer_numbers(layers, title.replace(" (value-weighted norms)", " norms"))
        )
        charts: list[RenderableType] = [
            per_layer,
            Text(),
            layer_pattern_table(result.layer_pattern_shares(), PATTERNS, short=True, off=bool(result.off.any())),
        ]
        if self.syntax is not None and self.syntax.relations:
            relations = self.syntax.by_frequency()[:SYNTAX_ROWS]
            done = "" if not self.syntax_job.running else f" · {self.syntax.sentences:,} sentences so far"
            charts += [
                Text(),
                Text(f"heads that track syntax (Clark et al.){done}", style="bold"),
                syntax_table(self.syntax.rows(relations, SYNTAX_MIN_COUNT), min_count=SYNTAX_MIN_COUNT, short=True),
            ]
        self.query_one("#charts-content", Static).update(Group(*charts))

    @property
    def _showing_norms(self) -> bool:
        return self.norms and self.result is not None and self.result.has_norms

    def _shown(self, statistic: str) -> str:
        """The statistic drawn for `statistic`: its share of norm in norms mode, where it has one."""
        return f"norm_{statistic}" if self._showing_norms and statistic in NORM_SHARES else statistic

    def _label(self, statistic: str) -> str:
        name = STATISTIC_NAMES[statistic]
        return name.replace("attn", "‖αf‖", 1) if self._shown(statistic) != statistic else name

    def _class_colours(self) -> dict[str, str]:
        theme = self.app.current_theme
        colours = [theme.primary, theme.secondary, theme.accent, theme.success, theme.panel or theme.surface]
        fallback = ["#b452cd", "#2aa198", "#268bd2", "#859900", "#3a3a3a"]
        return {name: rich_colour(colour, spare) for name, colour, spare in zip(PATTERNS, colours, fallback)}

    # what the user does

    def on_head_grid_selected(self, message: HeadGrid.Selected) -> None:
        self.selected = (message.layer, message.head)
        self.draw()

    def action_toggle_norms(self) -> None:
        """`n`: the shares of value-weighted norms ‖αf‖ instead of the weights (grid, head, per layer), and back."""
        if self.result is not None and not self.result.has_norms:
            self.notify("this run was kept from before bertscope took norms in the overview; r runs it again", severity="warning")
            return
        self.norms = not self.norms
        self.query_one(PatternGrid).border_title = "heads · ‖αf‖ norms" if self.norms else "heads over the corpus"  # 24 columns
        self.draw()

    def action_next_shading(self) -> None:
        shadings = SHADINGS + ((SYNTAX_FIGURE,) if self.syntax is not None and self.relation is not None else ())
        self.shading = shadings[(shadings.index(self.shading) + 1) % len(shadings)] if self.shading in shadings else "pattern"
        self.draw()

    def action_syntax_relation(self) -> None:
        """`y`: shade the grid by the heads that track a relation, or go on to the next relation."""
        if self.syntax is None:
            self.notify("heads that track syntax need a CoNLL-U corpus; give one above", severity="warning")
            return
        if self.shading == SYNTAX_FIGURE:
            self.relation = next_relation(self.syntax, self.relation)
        self.shading = SYNTAX_FIGURE
        self.draw()

    def action_syntax_direction(self) -> None:
        """`Y`: dependent→head or head→dependent."""
        if self.syntax is not None:
            self.direction = DIRECTIONS[(DIRECTIONS.index(self.direction) + 1) % len(DIRECTIONS)]
            self.draw()

    def action_open_head(self) -> None:
        self.cancel_run()
        self.dismiss(self.selected)

    def action_focus_corpus(self) -> None:
        self.query_one("#corpus", Input).focus()

    def action_export(self) -> None:
        save_screen(self.app, self.name_kept, self.table(), ".csv", self.figure)

    def figure(self) -> Figure:
        """The grid as shaded here: the pattern classes, a statistic (its share of norm after `n`), or a relation's heads."""
        result, syntax, relation = self.result, self.syntax, self.relation
        assert result is not None  # `e` exports only a result
        under = conditions_note(*self.result_conditions())  # the syntax heads ran with the patterns, under the same
        if self.shading == SYNTAX_FIGURE and syntax is not None and relation is not None:
            return syntax.figure([relation], self.direction, under=under)
        return result.figure(None if self.shading == "pattern" else self._shown(self.shading), under=under)

    def table(self) -> str | None:
        """The per-head table: dominant pattern, the share of each pattern, every statistic (the shares of norm too); for
        a run under a mask or an erasure, what it ran under on every row (a CSV has nowhere else to say it)."""
        result = self.result
        if result is None:
            return None
        header, rows = result.head_table()
        mask, ablation, erasure = self.result_conditions()
        if mask or erasure is not None:
            under = [mask, ablation if mask else "", erasure_spec(erasure.erasure if erasure is not None else None)]
            header, rows = [*header, "mask", "ablation", "erased"], [[*row, *under] for row in rows]
            if erasure is not None and erasure.features is not None:
                header, rows = [*header, "sae features"], [[*row, erasure.features.short()] for row in rows]
        return csv_text(header, rows)
