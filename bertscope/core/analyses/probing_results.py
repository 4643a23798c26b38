"""A probing report as plain data (numpy, no torch): what the CLI prints and the explorer draws.

Computed by core.analyses.probing; kept apart so the UI's contract can name it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from bertscope.figures.notebook import Shown

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
