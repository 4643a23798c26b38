"""A probing report as plain data (numpy, no torch): what the CLI prints and the explorer draws.

Computed by analyses.probing.run; kept apart so the UI's contract can name it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from bertscope.base.errors import InputError
from bertscope.figures.notebook import Shown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from bertscope.figures.curves import ProbeCurve

ProbeKind = Literal["linear", "mlp"]  # what a probe is: a linear map, or a one-hidden-layer MLP
MDL_STRUCTURAL = (
    "description length (mdl) is for classification tasks: the structural probes (depth, distance) regress "
    "numbers, which have no codelength without a noise model; probe upos, xpos, deprel or a sentence task"
)
MDL_COLUMNS = ("online_bits", "uniform_bits", "compression")  # a layer's "mdl" entry as table() columns


@dataclass(frozen=True, repr=False)
class ProbeReport(Shown):
    """Per layer (hidden-state indexing) scores of one task, with its baselines."""

    task: str
    metric: str
    layers: list[dict[str, Any]]
    best_layer: int
    center_of_gravity: float
    baselines: dict[str, Any]
    counts: dict[str, Any]
    notes: tuple[str, ...] = ()
    numerics: dict[str, Any] = field(default_factory=dict)  # how the features were computed and where the probes were fitted
    mdl: dict[str, Any] = field(default_factory=dict)  # the online code's choices (analyses.probing.mdl.report_codes); {} without one

    def summary(self) -> str:
        best = self.layers[self.best_layer][self.metric]
        parts = [f"{self.task}: best layer {self.best_layer}, {self.metric} {best:.3f}"]
        parts += [f"{name.replace('_', ' ')} {value:.3f}" for name, value in self.baselines.items()]
        if not np.isnan(self.center_of_gravity):
            parts.append(f"centre of gravity {self.center_of_gravity:.2f}")
        if self.mdl:
            compression = self.compression()
            best_code = int(np.argmax(compression))
            control = f" (control {self.compression(control=True)[best_code]:.2f})" if self.mdl.get("control") else ""
            parts.append(f"compression {compression[best_code]:.2f}{control} at layer {best_code}")
        if "train" in self.counts:
            parts.append(f"{self.counts['train']:,} train / {self.counts['test']:,} test {self.counts.get('unit', '')}".rstrip())
        return " · ".join(parts)

    def table(self) -> list[dict[str, Any]]:
        """One row per hidden-state layer (0 = the embeddings): the probe's scores and its baselines' there; with
        description lengths, `online_bits`, `uniform_bits`, `compression` and the control task's `control_online_bits`,
        `control_compression` (the blocks are in `layers` and the JSON)."""
        rows = []
        for layer in self.layers:
            row = {name: value for name, value in layer.items() if name != "mdl"}
            code = layer.get("mdl")
            if code is not None:
                row |= {name: code[name] for name in MDL_COLUMNS}
                if "control" in code:
                    row |= {f"control_{name}": code["control"][name] for name in ("online_bits", "compression")}
            rows.append(row)
        return rows

    def compression(self, control: bool = False) -> np.ndarray:
        """`[L+1]` each layer's compression (uniform over online codelength; the control task's with `control`)."""
        if not self.mdl:
            raise InputError("this report has no description lengths; probe with mdl=True", setting="mdl")
        codes = [layer["mdl"]["control"] if control else layer["mdl"] for layer in self.layers]
        return np.array([code["compression"] for code in codes], dtype=np.float64)

    def figure(self, *others: ProbeReport, mdl: bool = False, under: str = "") -> Figure:
        """The score per layer (0 = embeddings) with its baselines dashed and the best layer starred; `others`: more
        tasks on the same axes (one line each). `mdl`: under the scores, a second panel of the compression per layer
        (uniform over online codelength, Voita & Titov), the control task's dashed, 1 (the uniform code) as the floor.
        `under`: what the passes ran under ("mask 0:3 (zero)"), which the report does not hold, as the figure's note."""
        from bertscope.figures.curves import probe_curves

        reports = (self, *others)
        metrics = list(dict.fromkeys(report.metric for report in reports))
        tasks = ", ".join(report.task for report in reports)
        curves = [report.curve() for report in reports]
        note = under.removeprefix(" · ") or None
        if mdl:
            codes = [report.compression_curve() for report in reports]
            title = f"probing {tasks}: {' / '.join(metrics)} and description length"
            return probe_curves(curves, " / ".join(metrics), title=title, note=note, compression=codes)
        return probe_curves(curves, " / ".join(metrics), title=f"probing {tasks}", note=note)

    def compression_curve(self) -> ProbeCurve:
        """The report's compression per layer as a figure's curve, its best layer, the uniform code's 1 and the control
        task's compression."""
        from bertscope.figures.curves import ProbeCurve

        values = self.compression()
        baselines: dict[str, float | list[float]] = {"uniform_code": 1.0}
        if all("control" in layer["mdl"] for layer in self.layers):
            baselines["control"] = self.compression(control=True).tolist()
        return ProbeCurve(self.task, values.tolist(), int(np.argmax(values)), baselines)

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

    def as_json(self) -> dict[str, Any]:
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
        } | ({"mdl": self.mdl} if self.mdl else {})
