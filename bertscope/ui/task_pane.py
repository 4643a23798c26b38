"""The prediction pane: what a fine-tuned model predicts for the input, before and after the mask.

As the effect pane shows an MLM's guesses at a [MASK], this pane shows a token classifier's label
under each word, an extractive QA model's answer span in the context (the second box) and its
score, or a sentence-embedding model's cosine between the two boxes' embeddings; under a mask or
an erasure, the prediction of the model as it is, then under them, what changed highlighted. The
backend computes them (`Backend.task_prediction`, model.task_heads) in the sentence's worker; the
pane is hidden for a model with no such task.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding, ModelInfo
from bertscope.model.task_results import AnswerSpan, SegmentSimilarity, TaskPrediction, WordLabels
from bertscope.ui.backend import Backend, Live
from bertscope.ui.widgets.panels import RowsPanel, update_keeping_layout

NARROW = 37  # the pane's text width in the side pane at 80 columns, before it has a size of its own
CHANGED = "bold reverse"


def predictions(
    backend: Backend, encoding: Encoding, mask: HeadMask, ablation: Ablation, erasure: Live
) -> tuple[TaskPrediction | None, TaskPrediction | None]:
    """In the sentence's worker: the prediction of the model as it is, and under the mask and erasure (the same
    object when neither changes anything)."""
    plain = backend.task_prediction(encoding)
    if plain is None or not (len(mask) or erasure is not None):
        return plain, plain
    return plain, backend.task_prediction(encoding, mask, ablation, erasure)


def pair_placeholder(info: ModelInfo) -> str | None:
    """What the second box asks for where the model's prediction needs it (a QA model's context, a sentence to
    compare for an embedding model), or None (the box's own placeholder)."""
    if info.architecture.endswith("ForQuestionAnswering"):
        return "the question's context"
    if info.sentence_embedding:
        return "a sentence to compare"
    return None


class TaskPanel(RowsPanel):
    """The fine-tuned model's prediction for the input, before → after the mask."""

    DEFAULT_CSS = """
    TaskPanel { border: round $panel-lighten-2; padding: 0 1; height: auto; display: none; }
    """

    _shown: tuple[TaskPrediction | None, TaskPrediction | None, bool, tuple[str, str] | None] | None = None

    def show(self, before: TaskPrediction | None, after: TaskPrediction | None, changed: bool, hint: tuple[str, str] | None = None) -> None:
        """`changed`: a mask or an erasure is in force (the after side shows); `hint`: the title and what to type
        when there is no prediction for lack of a second segment."""
        self._shown = (before, after, changed, hint)
        if before is None or after is None:
            self.display = hint is not None
            if hint is not None:
                self.border_title = hint[0]
                update_keeping_layout(self, Text(hint[1], style="dim"), rows="hint")
            return
        self.display = True
        if isinstance(before, WordLabels) and isinstance(after, WordLabels):
            self.border_title = "entity labels" + (" · before → after" if changed else "")
            content = self._labels(before, after, changed)
        elif isinstance(before, AnswerSpan) and isinstance(after, AnswerSpan):
            self.border_title = "answer" + (" · before → after" if changed else "")
            content = self._answer(before, after, changed)
        elif isinstance(before, SegmentSimilarity) and isinstance(after, SegmentSimilarity):
            self.border_title = "similarity of the two boxes"
            content = self._similarity(before, after, changed)
        else:
            return
        update_keeping_layout(self, content, rows=(type(before).__name__, changed, self._width()))

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def _width(self) -> int:
        return self.content_size.width or NARROW

    def _labels(self, before: WordLabels, after: WordLabels, changed: bool) -> RenderableType:
        """The words in columns, each word's label under it, and under a mask the labels after it, those that
        changed highlighted; as many columns a block as fit the pane."""
        moved = sum(a != b for a, b in zip(before.labels, after.labels))
        lines: list[RenderableType] = []
        if changed:
            sure_before, sure_after = (sum(p.probabilities) / max(len(p.probabilities), 1) for p in (before, after))
            lines.append(
                Text.assemble(
                    (f"{moved} of {len(before.words)} changed", "bold"),
                    (f" · mean p {sure_before:.3f} → {sure_after:.3f}", "dim"),
                )
            )
        width, block = self._width(), list[int]()
        blocks: list[list[int]] = []
        used = 0
        for index, word in enumerate(before.words):
            column = max(len(word), len(before.labels[index]), len(after.labels[index])) + 1
            if block and used + column > width:
                blocks.append(block)
                block, used = [], 0
            block.append(index)
            used += column
        if block:
            blocks.append(block)
        for block in blocks:
            words, labels, labels_after = Text(no_wrap=True, overflow="crop"), Text(no_wrap=True), Text(no_wrap=True)
            for index in block:
                column = max(len(before.words[index]), len(before.labels[index]), len(after.labels[index])) + 1
                words.append(before.words[index].ljust(column), style="dim")
                labels.append(before.labels[index].ljust(column))
                differs = before.labels[index] != after.labels[index]
                labels_after.append(after.labels[index], style=CHANGED if differs else "")
                labels_after.append(" " * (column - len(after.labels[index])))
            lines += [words, labels] + ([labels_after] if changed else [])
        return Group(*lines)

    def _answer(self, before: AnswerSpan, after: AnswerSpan, changed: bool) -> RenderableType:
        """The answer, under a mask the answer then (highlighted if it moved), and their scores on a line of their own."""
        lines = [Text(_said(before))]
        if not changed:
            lines.append(Text(f"score {before.score:.2f} · p {before.probability:.2f}", style="dim"))
            return Group(*lines)
        differs = (before.start, before.end, before.no_answer) != (after.start, after.end, after.no_answer)
        lines.append(Text.assemble("→ ", (_said(after), CHANGED if differs else "")))
        scores = f"score {before.score:.2f} → {after.score:.2f} · p {before.probability:.2f} → {after.probability:.2f}"
        lines.append(Text(scores, style="dim"))
        return Group(*lines)

    def _similarity(self, before: SegmentSimilarity, after: SegmentSimilarity, changed: bool) -> RenderableType:
        pooling = before.pooling.split(" (")[0]
        if not changed:
            return Group(Text(f"cosine {before.cosine:.4f}", style="bold"), Text(pooling, style="dim"))
        change = after.cosine - before.cosine
        return Group(
            Text.assemble((f"cosine {before.cosine:.4f} → {after.cosine:.4f}", "bold"), f" ({change:+.4f})"),
            Text(pooling, style="dim"),
        )


def _said(answer: AnswerSpan) -> str:
    """The answer as the pane writes it: quoted, with its tokens; or that the model answers nothing."""
    if answer.no_answer:
        return f"no answer ([CLS] {answer.null_score:.2f})"
    return f'"{answer.text}" ({answer.start}–{answer.end})'
