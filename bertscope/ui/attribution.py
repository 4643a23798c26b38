"""The attribution row under the sentence: which tokens a decision rests on, shaded.

`b` cycles the method (off, gradient, gradient × input, integrated gradients, attention
rollout and flow, and the other context-mixing measures rolled out); `B` cycles what is
explained: the MLM guess at the first [MASK] (models with an MLM head), the predicted class
(classifiers), or the decision of a probe for each built-in task (any model; the probe is
trained once, in the background, and cached). The backend computes; this widget runs it in
its own thread worker, newest request wins, `escape` cancels, and progress (a probe's
training, integration steps) shows in the row.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text
from textual.widgets import Static

from bertscope import api
from bertscope.analyses.attribution_results import METHODS, Attribution, Target
from bertscope.analyses.conditions import LiveEdits
from bertscope.base.progress import Progress
from bertscope.data.probing_tasks import TASKS
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding, ModelInfo
from bertscope.render.attribution import METHOD_NAMES, shaded_sentence, short_describe
from bertscope.ui.backend import Backend
from bertscope.ui.job_run import JobRun
from bertscope.ui.theme import rich_colour

DEFAULT_PROBE = "subject_number"  # reads the head noun past an attractor: the example sentence's question


def targets_for(info: ModelInfo) -> list[Target]:
    """What the loaded model can explain, the most natural first."""
    targets = []
    if info.has_mlm_head:
        targets.append(Target(kind="mlm"))
    if info.num_labels:
        targets.append(Target(kind="class"))
    names = [DEFAULT_PROBE] + [name for name in TASKS if name != DEFAULT_PROBE]
    targets.extend(Target(kind="probe", probe=name) for name in names)
    return targets


def target_name(target: Target) -> str:
    if target.kind == "probe":
        return f"{target.probe} probe"
    return "MLM guess at the [MASK]" if target.kind == "mlm" else "predicted class"


class AttributionRow(Static):
    """One line saying what is explained and how, then the sentence's tokens shaded by score."""

    DEFAULT_CSS = """
    AttributionRow { height: auto; padding: 0 1; display: none; }
    AttributionRow.-on { display: block; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.method: str | None = None  # None: attribution is off
        self.targets: list[Target] = [Target(kind="probe", probe=DEFAULT_PROBE)]
        self.target_index = 0
        self.result: Attribution | None = None
        self.job = JobRun(self, self.explained, name="attribution", on_failed=self.failed, title="attribution")
        # (backend, encoding, mask, ablation, erasure) of the newest analysis
        self._last: tuple[Backend, Encoding, HeadMask, Ablation, LiveEdits | None] | None = None

    @property
    def target(self) -> Target:
        return self.targets[self.target_index]

    @property
    def running(self) -> bool:
        return self.job.running

    def set_model(self, info: ModelInfo) -> None:
        self.targets = targets_for(info)
        self.target_index = 0

    def next_method(self) -> str | None:
        """Cycle off → each method → off; the method now on (None: off)."""
        order = [None, *METHODS]
        self.method = order[(order.index(self.method) + 1) % len(order)]
        self.set_class(self.method is not None, "-on")
        self.result = None  # another method: the old shading would mislead
        self._restart()
        return self.method

    def next_target(self) -> None:
        self.target_index = (self.target_index + 1) % len(self.targets)
        self.result = None  # another decision: the old shading would mislead
        self._restart()

    def describe_target(self) -> str:
        return target_name(self.target)

    def analysed(self, backend: Backend, encoding: Encoding, mask: HeadMask, ablation: Ablation, erasure: LiveEdits | None = None) -> None:
        """A new sentence, mask or erasure is on screen: explain it again if attribution is on."""
        self._last = (backend, encoding, mask, ablation, erasure)
        if self.result is not None and self.result.tokens != encoding.tokens:
            self.result = None  # never shade a new sentence with an old one's scores
        self._restart()

    def cancel(self) -> bool:
        """Stop the running computation; True when there was one."""
        if not self.job.cancel():
            return False
        self._draw_status("cancelled; b or B to choose again", self.result)
        return True

    def _restart(self) -> None:
        self.job.cancel()
        if self.method is None or self._last is None:
            return
        backend, encoding, mask, ablation, erasure = self._last
        method, target = self.method, self.target
        self._draw_status(f"{METHOD_NAMES[method]} of the {target_name(target)}…", self.result)
        self.job.start(
            lambda cancel: backend.steps(
                api.attribute, erasure, encoding, method=method, probe=target.probe, mask=mask, ablation=ablation, cancel=cancel
            )
        )

    def explained(self, progress: Progress[Attribution]) -> None:
        if not progress.finished:
            self._draw_status(f"{progress.stage}: {progress.done}/{progress.total}", self.result)
            return
        self.result = progress.result
        self.repaint()

    def failed(self, reason: str) -> None:
        self._draw_status("could not explain this: B for another target", self.result)

    def repaint(self) -> None:
        """Redraw from the last result (after a theme change, too)."""
        if self.result is not None:
            line = short_describe(self.result)
            error = self.result.completeness_error
            if error is not None and error == error and error >= 0.05:
                line += " (more: bertscope attribute --steps)"
            self._draw(Text(line, style="dim", no_wrap=True, overflow="ellipsis"), self.result)

    def _draw_status(self, status: str, result: Attribution | None) -> None:
        self._draw(Text(status, style="italic", no_wrap=True, overflow="ellipsis"), result)

    def _draw(self, header: Text, result: Attribution | None) -> None:
        theme = self.app.current_theme
        parts: list[RenderableType] = [header]
        if result is not None:
            parts.append(
                shaded_sentence(
                    result.tokens,
                    result.scores,
                    result.encoding.special,
                    background=rich_colour(theme.background, "#000000"),
                    foreground=rich_colour(theme.foreground, "#e6e3f0"),
                    glyphs=getattr(self.app, "glyphs", False),
                )
            )
        self.update(Group(*parts))
