"""A probing report as plain data (numpy, no torch): what the CLI prints and the explorer draws.

Computed by core.analyses.probing; kept apart so the UI's contract can name it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from bertscope.figures.notebook import Shown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from bertscope.figures.curves import ProbeCurve

ProbeKind = Literal["linear", "mlp"]  # what a probe is: a linear map, or a one-hidden-layer MLP


@dataclass(frozen=True, repr=False)
class ProbeReport(Shown):
    """Per layer (hidden-state indexing) scores of one task, with its baselines."""

    task: str
    metric: str
    layers: list[dict]
    best_layer: int
    center_of_gravity: float
    baselines: dict
    counts: dict
    notes: tuple[str, ...] = ()
    numerics: dict = field(default_factory=dict)  # how the features were computed and where the probes were fitted

    def summary(self) -> str:
        best = self.layers[self.best_layer][self.metric]
        parts = [f"{self.task}: best layer {self.best_layer}, {self.metric} {best:.3f}"]
        parts += [f"{name.replace('_', ' ')} {value:.3f}" for name, value in self.baselines.items()]
        if not np.isnan(self.center_of_gravity):
            parts.append(f"centre of gravity {self.center_of_gravity:.2f}")
        if "train" in self.counts:
            parts.append(f"{self.counts['train']:,} train / {self.counts['test']:,} test {self.counts.get('unit', '')}".rstrip())
        return " · ".join(parts)

    def table(self) -> list[dict[str, Any]]:
        """One row per hidden-state layer (0 = the embeddings): the probe's scores and its baselines' there."""
        return [dict(layer) for layer in self.layers]

    def figure(self, *others: ProbeReport) -> Figure:
        """The score per layer (0 = embeddings) with its baselines dashed and the best layer starred; `others`: more
        tasks on the same axes (one line each)."""
        from bertscope.figures.curves import probe_curves

        reports = (self, *others)
        metrics = list(dict.fromkeys(report.metric for report in reports))
        title = "probing " + ", ".join(report.task for report in reports)
        return probe_curves([report.curve() for report in reports], " / ".join(metrics), title=title)

    def curve(self) -> ProbeCurve:
        """The report as a figure's curve: the score per layer, the best layer, the majority class and, per layer, the
        random-init model and the control task."""
        from bertscope.figures.curves import ProbeCurve

        baselines: dict[str, float | list[float]] = {}
        if "majority" in self.baselines:
            baselines["majority"] = float(self.baselines["majority"])
        for name in ("random_init", "control"):
            column = f"{name}_{self.metric}"
            if all(column in layer for layer in self.layers):
                baselines[name] = [float(layer[column]) for layer in self.layers]
        values = [float(layer[self.metric]) for layer in self.layers]
        return ProbeCurve(self.task, values, self.best_layer, baselines)

    def as_json(self) -> dict:
        return {
            "task": self.task,
            "metric": self.metric,
            "layers": self.layers,
            "best_layer": self.best_layer,
            "center_of_gravity": None if np.isnan(self.center_of_gravity) else round(self.center_of_gravity, 4),
            "baselines": self.baselines,
            "counts": self.counts,
            "notes": list(self.notes),
            "numerics": self.numerics,
        }
