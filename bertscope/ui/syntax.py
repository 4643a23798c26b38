"""Heads that track syntax in the explorer: the grid's "tracks <relation>" figure (Clark et al. 2019 §4).

`f` reaches the figure, `y` goes to it or on to the next relation (most frequent first),
`Y` turns the direction (dependent→head, head→dependent). Each head is shaded by how often
the word it attends to most is the right one over the shipped sample treebank, under the
explorer's mask; the panel under the grid names the best head and the best fixed-offset
baseline beside it. `SyntaxPanel` owns the run and the result; the app asks it for the
figure and tells it the mask. Model work runs in a thread worker (ui.job_run) through the
backend; nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from rich.text import Text
from textual.widgets import Static

from bertscope import api
from bertscope.analyses.attention.syntax_results import DIRECTIONS, SyntaxResult
from bertscope.analyses.conditions import Conditions
from bertscope.api import treebank
from bertscope.base.progress import Progress
from bertscope.data.corpus import Sentence
from bertscope.ui.backend import Backend
from bertscope.ui.job_run import JobRun

SYNTAX_FIGURE = "syntax"
ARROWS = {"dependent_to_head": "dep→head", "head_to_dependent": "head→dep"}
MIN_COUNT = 20  # the sample treebank is small: fewer arcs than this and the panel says the figure is rough


def syntax_label(relation: str, direction: str) -> str:
    """The grid's legend for the figure, short enough for its 40 columns."""
    return f"tracks {relation} {ARROWS[direction]}"


def syntax_overlay(result: SyntaxResult, relation: str, direction: str) -> tuple[np.ndarray, tuple[float, float], str]:
    """(values, range, label) to shade the head grid by each head's accuracy for the relation."""
    return result.accuracy(relation, direction), (0.0, 1.0), syntax_label(relation, direction)


def counted_relations(result: SyntaxResult | None) -> list[str]:
    """The relations with at least one arc, most frequent first."""
    if result is None:
        return []
    return [name for name in result.by_frequency() if result.counts[result.index(name), 0] > 0]


def next_relation(result: SyntaxResult | None, current: str | None) -> str | None:
    """The relation after `current` (round), or the first one."""
    relations = counted_relations(result)
    if not relations:
        return None
    index = relations.index(current) + 1 if current in relations else 0
    return relations[index % len(relations)]


def kept_relation(result: SyntaxResult | None, current: str | None) -> str | None:
    """`current` while the result has it; else det (Clark et al.'s clearest case) or the most frequent."""
    relations = counted_relations(result)
    if current in relations:
        return current
    return "det" if "det" in relations else (relations[0] if relations else None)


class SyntaxPanel(Static):
    """The syntax figure's numbers under the grid, and the run over the sample treebank behind them.

    Hidden unless the grid shows the figure. The result follows the explorer's mask and erasure: a
    new mask or erasure starts a new run when the figure is shown (`show_for`), the counts streaming in.
    """

    DEFAULT_CSS = """
    SyntaxPanel { border: round $panel-lighten-2; padding: 0 1; height: auto; display: none; }
    """

    def __init__(self, on_changed: Callable[[], None], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.backend: Backend | None = None
        self.result: SyntaxResult | None = None
        self.finished = False
        self.relation: str | None = None
        self.direction = DIRECTIONS[0]
        self._on_changed = on_changed  # the app repaints the grid
        self._key: Conditions | None = None  # what the result's passes ran under
        self._sentences: list[Sentence] | None = None
        self.job = JobRun(self, self._stepped, name="syntax", on_failed=self._failed, title="syntactic heads")

    def set_backend(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def sentences(self) -> list[Sentence]:
        """The shipped sample treebank (164 sentences annotated by hand in UD v2)."""
        if self._sentences is None:
            self._sentences = list(treebank().sentences)
        return self._sentences

    def show_for(self, conditions: Conditions) -> None:
        """The figure is shown under these conditions: run over the treebank unless the result is for them already."""
        self.display = True
        if conditions == self._key and (self.finished or self.job.running):
            self._draw()
            return
        self._key, self.finished = conditions, False
        backend, sentences = self.backend, self.sentences
        assert backend is not None  # the main screen shows the figure only once the model is loaded
        self._draw("starting")
        self.job.start(
            lambda cancel: backend.steps(
                api.syntax, conditions.live, sentences, mask=conditions.masked, ablation=conditions.ablation, cancel=cancel
            )
        )

    def hide(self) -> None:
        self.display = False

    def next_relation(self) -> None:
        self.relation = next_relation(self.result, self.relation)
        self._draw()

    def next_direction(self) -> None:
        self.direction = DIRECTIONS[(DIRECTIONS.index(self.direction) + 1) % len(DIRECTIONS)]
        self._draw()

    def overlay(self) -> tuple[np.ndarray, tuple[float, float], str] | None:
        """The grid's figure, or None while no arc has been counted."""
        if self.result is None or self.relation is None:
            return None
        return syntax_overlay(self.result, self.relation, self.direction)

    # what the worker reports

    def _stepped(self, progress: Progress[SyntaxResult]) -> None:
        self.result = progress.partial
        self.finished = progress.finished
        self.relation = kept_relation(self.result, self.relation)
        self._draw(None if progress.finished else f"{progress.done}/{len(self.sentences)} sentences")

    def _failed(self, reason: str) -> None:
        self._key = None
        self._draw("stopped")

    # drawing

    def _draw(self, stage: str | None = None) -> None:
        result, relation, direction = self.result, self.relation, self.direction
        if result is None or relation is None:
            self.update(Text(f"syntactic heads: {stage or 'waiting'}…", style="dim"))
            return
        count = int(result.counts[result.index(relation), DIRECTIONS.index(direction)])
        layer, head, accuracy = result.best(relation, direction)
        offset, baseline = result.baseline(relation, direction)
        lines = Text.assemble(
            (f"tracks {relation} ", "bold"),
            ARROWS[direction],
            "\n",
            f"best {layer}:{head} {accuracy:.0%} · offset {offset:+d} {baseline:.0%}\n",
            (f"{count:,} arcs, {result.sentences:,} sample sentences" + (" (few)" if count < MIN_COUNT else ""), "dim"),
        )
        erasure = self._key.live if self._key is not None else None
        if erasure is not None:
            lines.append(f" · {erasure.short()}", style="dim")
        if stage:
            lines.append(f"\n{stage}…", style="dim")
        else:
            lines.append("\ny relation · Y direction", style="dim")
        self.update(lines)
        self._on_changed()
