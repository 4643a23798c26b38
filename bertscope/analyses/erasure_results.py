"""Amnesic probing's result as plain data (no torch): what the CLI prints and the explorer would draw.

Computed by analyses.erasure; kept apart so the UI's contract can name it without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bertscope.analyses.importance.results import missing_heads
from bertscope.base.errors import InputError
from bertscope.data.probing_tasks import STRUCTURAL_TASKS, TASKS, TREEBANK_TASKS, WORD_TASKS
from bertscope.figures.notebook import Shown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MEASURES = ("mlm", "preserve", "class", "probe:TASK")
"""What erasure can measure the model losing, as a person writes it (`class` is the classification objective)."""


def parse_measure(measure: str) -> tuple[str, str | None]:
    """`mlm`, `preserve`, `class`/`classification` or `probe:TASK` as (objective, probe task)."""
    name, _, task = measure.partition(":")
    name = "classification" if name == "class" else name
    if name not in ("mlm", "preserve", "classification", "probe") or (name == "probe") != bool(task):
        raise InputError(f"unknown measure {measure!r}; use {', '.join(MEASURES)} (probe:upos, say)", setting="measure")
    return name, task or None


def check_measure(task: str, measure: str | None) -> None:
    """Refuse, from the arguments alone, a measure that erasing `task` cannot take.

    A `probe:OTHER` measure trains its probe on the sentences erasure reads for `task`, so it can only probe what
    they are labelled for: `task` itself, or (a treebank's words, which carry every tag) another word-level task.
    """
    if measure is None:
        return
    other = parse_measure(measure)[1]
    if other is None or other == task or (other in WORD_TASKS and task in WORD_TASKS):
        return
    if other in STRUCTURAL_TASKS:
        raise InputError(f"the probe measure takes classification tasks; {other!r} is a structural probe", setting="measure")
    takes = f"the task erased (probe:{task})"
    if task in WORD_TASKS:
        takes += " or another word-level task (" + ", ".join(f"probe:{word}" for word in WORD_TASKS if word != task) + ")"
    if other not in TASKS and other not in TREEBANK_TASKS:
        raise InputError(f"unknown task {other!r} in measure {measure!r}; a probe measure takes {takes}", setting="measure")
    raise InputError(
        f"measure {measure!r} probes {other!r}, whose labels the sentences erased for {task!r} do not carry; a probe measure takes {takes}",
        setting="measure",
    )


def check_measure_heads(measure: str | None, architecture: str, has_mlm_head: bool, is_classifier: bool) -> None:
    """Refuse a measure the model has no head for (torch-free: judged from config.json before it loads, and again
    on the loaded model before any work)."""
    if measure is None:
        return
    name = parse_measure(measure)[0]
    reasons = missing_heads(architecture, has_mlm_head, is_classifier)
    if name in reasons:
        working = ["preserve", "probe:TASK", *(["mlm"] if has_mlm_head else []), *(["class"] if is_classifier else [])]
        raise InputError(f"measure {measure!r} {reasons[name]}; measures that work for this model: {', '.join(working)}", setting="measure")


@dataclass(frozen=True)
class LiveErasure:
    """A property erased from one hidden-state layer of the explorer's passes (`E`): which, where, what it removed.

    The eraser itself (LEACE, torch) stays with the backend that fitted it; the explorer holds this
    description and hands it back with each pass that should run erased.
    """

    task: str
    layer: int  # hidden-state index: 0 the embeddings, l + 1 the output of layer l
    rank: int  # the directions removed
    sentences: int  # the training sentences it was fitted on

    def describe(self) -> str:
        return f"{self.task} erased at hidden state {self.layer} (rank {self.rank})"

    def short(self) -> str:
        """What a status line or a title says of it."""
        return f"{self.task} erased @{self.layer}"


@dataclass(frozen=True, repr=False)
class ErasureResult(Shown):
    """A property erased from one hidden-state layer inside the forward pass (Elazar et al. 2021, with LEACE).

    `guardedness`: per hidden-state layer from `layer` up, the test accuracy of a probe for `task` on the
    features of the model as it is (`accuracy_before`) and of a fresh probe on the features of the forward
    pass with the property erased at `layer` (`accuracy_after`: near `majority` at `layer` if the erasure
    holds, above it higher up where the model computes the property again). `measure`: the model's behaviour
    on the test split with no erasure, with the property erased and with as many random directions removed
    (Elazar et al.'s control), as `{"name", "metric", "none", "erased", "control", "loss": {...}}`.
    `rank`: the directions removed; `variance_share`: the share of the layer's variance (on the training
    split) that the erasure takes away.
    """

    task: str
    layer: int
    rank: int
    variance_share: float
    majority: float
    guardedness: list[dict[str, Any]]
    measure: dict[str, Any]
    counts: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        at = self.guardedness[0]
        parts = [
            f"{self.task} erased at layer {self.layer}: rank {self.rank} ({self.variance_share:.1%} of the variance)",
            f"probe {at['accuracy_before']:.3f} → {at['accuracy_after']:.3f} (majority {self.majority:.3f})",
        ]
        if len(self.guardedness) > 1:
            top = self.guardedness[-1]
            parts.append(f"layer {top['layer']}: {top['accuracy_before']:.3f} → {top['accuracy_after']:.3f}")
        m = self.measure
        parts.append(f"{m['name']} {m['none']:.3f} → {m['erased']:.3f} (random control {m['control']:.3f})")
        return " · ".join(parts)

    def table(self) -> list[dict[str, Any]]:
        """One row per hidden-state layer from the erased one up: the task's probe accuracy before and after."""
        return [dict(row) for row in self.guardedness]

    def as_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "layer": self.layer,
            "rank": self.rank,
            "variance_share": round(self.variance_share, 6),
            "majority": round(self.majority, 6),
            "guardedness": self.guardedness,
            "measure": self.measure,
            "counts": self.counts,
            "settings": self.settings,
            "notes": list(self.notes),
        }

    def figure(self) -> Figure:
        """The task's probe accuracy per layer (0 = embeddings) before and after the erasure, the majority class dashed."""
        from bertscope.figures.curves import ProbeCurve, probe_curves

        first = self.guardedness[0]["layer"]
        before = [math.nan] * first + [row["accuracy_before"] for row in self.guardedness]
        after = [math.nan] * first + [row["accuracy_after"] for row in self.guardedness]
        curves = [ProbeCurve("before erasure", before), ProbeCurve("after erasure", after, baselines={"majority": self.majority})]
        note = (
            f"{self.measure['name']}: {self.measure['none']:.3f} as it is, {self.measure['erased']:.3f} erased, "
            f"{self.measure['control']:.3f} with {self.rank} random directions removed"
        )
        if self.settings.get("mask"):
            note += f"; heads off {self.settings['mask']} ({self.settings.get('ablation', 'zero')} ablation)"
        return probe_curves(curves, "accuracy", title=f"{self.task} erased at layer {self.layer} (LEACE)", note=note)
