"""A probing report as plain data (numpy, no torch): what the CLI prints and the explorer draws.

Computed by core.analyses.probing; kept apart so the UI's contract can name it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

ProbeKind = Literal["linear", "mlp"]  # what a probe is: a linear map, or a one-hidden-layer MLP


@dataclass(frozen=True)
class ProbeReport:
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
