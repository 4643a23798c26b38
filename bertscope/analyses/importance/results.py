"""Head importance results and pruning curves as plain data (numpy, no torch), for the CLI and the UI.

Computed by analyses.importance.run; kept apart so the explorer and its fake test backend can use
them without importing torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.base.errors import InputError
from bertscope.figures.notebook import Shown
from bertscope.model.masks import Ablation, HeadMask

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from bertscope.model.families import Family

OBJECTIVES = ("mlm", "classification", "probe", "preserve", "token-classification", "qa", "similarity", "embedding")
"""What importance is measured on (analyses.importance.objectives)."""
METHODS = ("gradient", "ablation")
"""How importance is measured: Michel et al.'s gate gradient, or the exact loss change of switching a head off."""
WEIGHTS = ("sliced", "zeroed")
"""How a pruned copy keeps its heads' weights (analyses.importance.pruned_export): sliced out, or zeroed."""


# What an objective's `sentences` count, where an item is not one sentence (the JSON keeps the key `sentences`).
COUNTED_AS = {"similarity": "sentence pairs", "qa": "questions"}


def finite(value: float) -> float | None:
    """A float for JSON: NaN and infinities become None."""
    return value if math.isfinite(value) else None


RAISES = 1e-9  # a metric change above this counts as a rise (below: float noise of an unchanged metric)


@dataclass(frozen=True, eq=False, repr=False)
class MetricChanges:
    """How the objective's metric changes when each head `[L, H]` and each whole layer `[L]` (None: not ablated) is
    switched off alone: the metric under that ablation minus the unablated one's. Kovaleva et al. (2019, §6) found
    heads and layers of fine-tuned BERT whose removal raises the task's metric."""

    heads: np.ndarray
    layers: np.ndarray | None = None

    def raising_heads(self, pruned: frozenset[tuple[int, int]] = frozenset()) -> list[tuple[int, int, float]]:
        """(layer, head, change) of every head whose removal raises the metric, the largest rise first."""
        found = [(int(layer), int(head), float(self.heads[layer, head])) for layer, head in zip(*np.nonzero(self.heads > RAISES))]
        return sorted((entry for entry in found if entry[:2] not in pruned), key=lambda entry: (-entry[2], entry[:2]))

    def raising_layers(self) -> list[tuple[int, float]]:
        """(layer, change) of every layer whose removal raises the metric, the largest rise first."""
        if self.layers is None:
            return []
        found = [(int(layer), float(self.layers[layer])) for layer in np.flatnonzero(self.layers > RAISES)]
        return sorted(found, key=lambda entry: (-entry[1], entry[0]))


@dataclass(frozen=True, eq=False, repr=False)
class HeadImportance(Shown):
    """`[L, H]` importance of every head for one objective (higher: the objective needs it more).

    `importance` is what heads are ranked by (ℓ2-normalised per layer if `normalized`);
    `raw` is before normalisation. `layers` `[L]` is the loss change when each whole layer
    is switched off (ablation only). Heads in `pruned` are physically gone from the model.
    """

    objective: str
    method: str
    ablation: Ablation
    normalized: bool
    importance: np.ndarray
    raw: np.ndarray
    layers: np.ndarray | None
    baseline_loss: float
    baseline_metric: float
    metric: str
    sentences: int
    pruned: frozenset[tuple[int, int]] = frozenset()
    base_mask: str = ""
    notes: tuple[str, ...] = ()
    metric_changes: MetricChanges | None = None  # ablation only: the metric's change with each head or layer off

    @property
    def shape(self) -> tuple[int, int]:
        return self.importance.shape

    def order(self) -> list[tuple[int, int]]:
        """Heads still in the model, least important first (ties: lower layer, then head)."""
        num_layers, num_heads = self.shape
        heads = [(layer, head) for layer in range(num_layers) for head in range(num_heads) if (layer, head) not in self.pruned]
        return sorted(heads, key=lambda lh: (self.importance[lh], lh))

    def least_important(self, count: int, keep: HeadMask | None = None) -> list[tuple[int, int]]:
        """The `count` least important heads not already in `keep`'s switched-off set."""
        already = keep.off if keep is not None else frozenset()
        return [head for head in self.order() if head not in already][:count]

    @property
    def counted(self) -> str:
        """What it was measured over, named as the objective reads it: `48 sentence pairs`, `120 questions`."""
        return f"{self.sentences:,} {COUNTED_AS.get(self.objective, 'sentences')}"

    def summary(self) -> str:
        num_layers, num_heads = self.shape
        order = self.order()
        most = ", ".join(f"{layer}:{head}" for layer, head in reversed(order[-3:]))
        return (
            f"{self.objective} · {self.method} ({self.ablation}) · {num_layers}×{num_heads} heads · most important {most} · "
            f"{self.metric} {self.baseline_metric:.4g} unmasked, over {self.counted}"
        )

    def table(self) -> list[dict[str, Any]]:
        """One row per head: its importance (ranked by), before normalising, and whether it was pruned."""
        num_layers, num_heads = self.shape
        return [
            {
                "layer": layer,
                "head": head,
                "importance": float(self.importance[layer, head]),
                "raw": float(self.raw[layer, head]),
                "pruned": (layer, head) in self.pruned,
            }
            for layer in range(num_layers)
            for head in range(num_heads)
        ]

    def figure(self) -> Figure:
        """Each head's importance (layers down, heads across), pruned heads marked ×."""
        from bertscope.figures.grids import head_grid

        if self.method == "ablation":
            label = "loss change with the head switched off"
        else:  # Michel et al.'s gate gradient; for preserve, the first-order movement of the output
            label = "importance E‖∂h/∂ξ_h‖²" if self.objective == "preserve" else "importance I_h = E|∂L/∂ξ_h|"
        label += " (ℓ2-normalised per layer)" if self.normalized else ""
        title = f"head importance · {self.objective} · {self.method} ({self.ablation})"
        note = f"over {self.sentences:,} sentences" + ("; × pruned" if self.pruned else "")
        note += f"; with heads {self.base_mask} off ({self.ablation})" if self.base_mask else ""
        return head_grid(self.importance, label, title=title, masked=self.pruned, note=note)

    def _add_metric_changes(self, heads: list[dict[str, Any]], payload: dict[str, Any], changes: MetricChanges) -> None:
        """Each head's and layer's metric change beside its importance, and those whose removal raises the metric."""
        for entry in heads:
            entry["metric_change"] = finite(round(float(changes.heads[int(entry["layer"]), int(entry["head"])]), 8))
        if changes.layers is not None:
            for layer_entry in payload.get("layers", []):
                layer_entry["metric_change"] = finite(round(float(changes.layers[int(layer_entry["layer"])]), 8))

    def as_json(self, model: str) -> dict[str, Any]:
        num_layers, num_heads = self.shape
        heads: list[dict[str, Any]] = []
        for layer in range(num_layers):
            for head in range(num_heads):
                entry = {"layer": layer, "head": head, "importance": round(float(self.importance[layer, head]), 8)}
                if self.normalized:
                    entry["raw"] = round(float(self.raw[layer, head]), 8)
                if (layer, head) in self.pruned:
                    entry["pruned"] = True
                heads.append(entry)
        payload = {
            "model": model,
            "objective": self.objective,
            "method": self.method,
            "ablation": self.ablation,
            "normalized": self.normalized,
            "sentences": self.sentences,
            "metric": self.metric,
            "baseline": {"loss": finite(self.baseline_loss), "metric": finite(self.baseline_metric)},
            "heads": heads,
            "notes": list(self.notes),
        }
        if self.base_mask:
            payload["mask"] = self.base_mask
        if self.layers is not None:
            payload["layers"] = [{"layer": layer, "importance": round(float(v), 8)} for layer, v in enumerate(self.layers)]
        changes = self.metric_changes
        if changes is not None:
            self._add_metric_changes(heads, payload, changes)
            payload["raises_metric"] = {
                "heads": [
                    {"layer": layer, "head": head, "metric_change": round(change, 8)}
                    for layer, head, change in changes.raising_heads(self.pruned)
                ],
                "layers": [{"layer": layer, "metric_change": round(change, 8)} for layer, change in changes.raising_layers()],
            }
        return payload


@dataclass(frozen=True)
class Measurement:
    """The objective over all its sentences under one mask."""

    loss: float
    metric: float


@dataclass(frozen=True)
class CurvePoint:
    fraction: float  # of all heads of the model
    heads_pruned: int
    loss: float
    metric: float
    mask: str


@dataclass(frozen=True, eq=False, repr=False)
class PruningCurve(Shown):
    """The objective as ever more of the least important heads are removed."""

    objective: str
    metric: str
    method: str
    ablation: Ablation
    reestimate: bool
    points: tuple[CurvePoint, ...]
    max_drop: float
    notes: tuple[str, ...] = field(default=())

    def drops(self) -> list[float]:
        start = self.points[0].metric
        return [start - point.metric for point in self.points]

    def prunable(self, max_drop: float | None = None) -> CurvePoint:
        """The last point before the metric first falls more than `max_drop` below the unpruned model's."""
        limit = self.max_drop if max_drop is None else max_drop
        best = self.points[0]
        for point, drop in zip(self.points, self.drops()):
            if not drop <= limit + 1e-12:
                break
            best = point
        return best

    def summary(self) -> str:
        first, last, best = self.points[0], self.points[-1], self.prunable()
        return (
            f"{self.objective} · {self.metric} {first.metric:.4g} unpruned, {last.metric:.4g} at {last.fraction:.0%} of the heads · "
            f"prunable within a drop of {self.max_drop:g}: {best.fraction:.0%} ({best.heads_pruned} heads)"
        )

    def table(self) -> list[dict[str, Any]]:
        """One row per point of the curve: how much was pruned, the loss, the metric, its drop, the mask."""
        return [
            {"fraction": p.fraction, "heads_pruned": p.heads_pruned, "loss": p.loss, "metric": p.metric, "drop": drop, "mask": p.mask}
            for p, drop in zip(self.points, self.drops())
        ]

    def figure(self) -> Figure:
        """The metric against the share of heads pruned, the largest drop allowed dashed, the prunable point starred."""
        from bertscope.figures.curves import pruning_curve

        best = self.points.index(self.prunable())
        how = "importance re-estimated at every step" if self.reestimate else "one ranking for all steps"
        return pruning_curve(
            [point.fraction for point in self.points],
            [point.metric for point in self.points],
            metric=self.metric,
            prunable=best,
            max_drop=self.max_drop,
            heads=[point.heads_pruned for point in self.points],
            title=f"pruning curve · {self.objective} · {self.method} ({self.ablation})",
            note=f"least important heads removed first; {how}",
        )

    def as_json(self, model: str) -> dict[str, Any]:
        best = self.prunable()
        return {
            "model": model,
            "objective": self.objective,
            "metric": self.metric,
            "method": self.method,
            "ablation": self.ablation,
            "reestimate": self.reestimate,
            "max_drop": self.max_drop,
            "points": [
                {
                    "fraction": round(p.fraction, 6),
                    "heads_pruned": p.heads_pruned,
                    "loss": finite(p.loss),
                    "metric": finite(p.metric),
                    "drop": finite(d),
                    "mask": p.mask,
                }
                for p, d in zip(self.points, self.drops())
            ],
            "prunable": {"fraction": round(best.fraction, 6), "heads_pruned": best.heads_pruned, "mask": best.mask},
            "notes": list(self.notes),
        }


def missing_heads(architecture: str, has_mlm_head: bool, is_classifier: bool) -> dict[str, str]:
    """The objectives that need a head this model lacks, each with why (torch-free: erasure's measures say it too)."""
    reasons = {}
    if not has_mlm_head:
        reasons["mlm"] = f"needs a model with an MLM head; {architecture} has none"
    if not is_classifier:
        reasons["classification"] = f"needs a sequence-classification model; {architecture} is not one"
    if not architecture.endswith("ForTokenClassification"):  # as Session.is_token_classifier reads it
        reasons["token-classification"] = f"needs a token-classification model; {architecture} is not one"
    if not architecture.endswith("ForQuestionAnswering"):  # as Session.is_question_answerer reads it
        reasons["qa"] = f"needs an extractive question-answering model (…ForQuestionAnswering); {architecture} is not one"
    return reasons


def check_objective_heads(name: str, architecture: str, has_mlm_head: bool, is_classifier: bool) -> None:
    """Refuse an objective the model has no head for, naming those that work (torch-free: judged from config.json
    before the model loads, and again on the loaded model)."""
    missing = missing_heads(architecture, has_mlm_head, is_classifier)
    if name in missing:
        working = ", ".join(objective for objective in OBJECTIVES if objective not in missing)
        raise InputError(f"objective {name!r} {missing[name]}; objectives that work for this model: {working}", setting="objective")


def check_fraction(value: float, what: str = "fraction") -> float:
    if not 0.0 < value < 1.0:
        raise InputError(f"{what} {value:g} must lie strictly between 0 and 1 (e.g. 0.3 for 30% of the heads)")
    return float(value)


def check_weights(weights: str) -> None:
    """How a pruned copy keeps its heads' weights: sliced out, or zeroed."""
    if weights not in WEIGHTS:
        raise InputError(f"unknown pruned-model weights {weights!r}; use one of: {', '.join(WEIGHTS)}", setting="weights")


def check_pruned_copy(weights: str, family: Family, already_pruned: bool) -> None:
    """Refuse a pruned copy this model cannot have, before any head is scored: what it needs is in the model's
    family and config (torch-free: the CLI judges it from config.json before the model loads)."""
    check_weights(weights)
    if weights == "sliced" and not family.physical_pruning:
        raise InputError(
            f"{family.name} heads cannot be sliced out of its weights; write a copy with the heads' weights zeroed instead",
            setting="weights",
        )
    if weights == "zeroed" and already_pruned:
        raise InputError(
            "a zeroed copy keeps every head's weights, but this model has heads sliced out already; "
            "write it sliced, or start from the unpruned model",
            setting="weights",
        )


@dataclass(frozen=True)
class PairedTiming:
    """A sliced copy's encoder forward timed against the original's, in pairs over the same batch.

    Each round runs both back to back (in alternating order), so what slows the machine
    during a round slows both and cancels in that round's ratio. The spread is the lowest
    and highest ratio of the rounds: only when every round falls on the same side of 1 is
    the difference more than noise (by chance alone: 2 in 2**7 for seven rounds).
    """

    seconds_before: tuple[float, ...]  # the original's forward, one per round
    seconds_after: tuple[float, ...]  # the copy's, paired with them
    sentences: int  # in the timed batch

    def __post_init__(self) -> None:
        if not self.seconds_before or len(self.seconds_before) != len(self.seconds_after):
            raise ValueError("paired timing needs one time of each model per round, and at least one round")
        if min(self.seconds_before + self.seconds_after) <= 0:
            raise ValueError("a forward cannot take no time")

    @property
    def rounds(self) -> int:
        return len(self.seconds_before)

    @property
    def ratios(self) -> tuple[float, ...]:
        """How many times as fast the copy was, round by round."""
        return tuple(before / after for before, after in zip(self.seconds_before, self.seconds_after, strict=True))

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.ratios), max(self.ratios)

    @property
    def verdict(self) -> str:
        """faster, slower, or within noise (the rounds disagree on the side of 1)."""
        low, high = self.spread
        return "faster" if low > 1 else "slower" if high < 1 else "within noise"

    def describe(self) -> str:
        """The measurement in words, its spread beside it."""
        low, high = self.spread
        where = f"{self.rounds} paired rounds on {self.sentences} sentences"
        if self.verdict == "within noise":
            return f"encoder forward: no measurable difference ({low:.2f}–{high:.2f}× over {where})"
        return f"encoder forward {self.speedup:.2f}× as fast (median of {where}, {low:.2f}–{high:.2f}×)"

    def as_json(self) -> dict[str, Any]:
        return {
            "speedup": round(self.speedup, 4),
            "speedup_spread": [round(value, 4) for value in self.spread],
            "speedup_rounds": self.rounds,
            "timing": self.verdict,
            "timed_sentences": self.sentences,
            "encoder_seconds_before": round(statistics.median(self.seconds_before), 6),
            "encoder_seconds_after": round(statistics.median(self.seconds_after), 6),
        }


SAME_ARITHMETIC = "runs the same arithmetic as the original (heads zeroed, not removed)"


@dataclass(frozen=True)
class PrunedModel:
    """What `write_pruned_model` wrote and measured."""

    directory: Path
    pruned: dict[int, list[int]]
    parameters_before: int
    parameters_after: int
    max_abs_difference: float  # pruned model vs the original masked with `zero`, on the timing sentences
    format: str = "sliced"
    timing: PairedTiming | None = None  # None for a zeroed copy: the same shapes run the same arithmetic, nothing to time

    @property
    def speedup(self) -> float | None:
        """The median paired ratio of encoder forwards (None: zeroed, the same arithmetic)."""
        return None if self.timing is None else self.timing.speedup

    def describe_speed(self) -> str:
        return SAME_ARITHMETIC if self.timing is None else self.timing.describe()

    def timing_json(self) -> dict[str, Any]:
        """The speed keys of the JSON, the same set for both formats (null where a zeroed copy is not timed)."""
        if self.timing is not None:
            return self.timing.as_json()
        return (
            dict.fromkeys(("speedup", "speedup_spread", "speedup_rounds"))
            | {"timing": "same arithmetic"}
            | dict.fromkeys(("timed_sentences", "encoder_seconds_before", "encoder_seconds_after"))
        )


@dataclass(frozen=True)
class Pruning:
    """What `prune` removed and what it cost the objective (`written`: the model saved, if any)."""

    objective: str
    metric: str
    source: str
    mask: HeadMask
    importance: HeadImportance
    loss_after: float
    metric_after: float
    written: PrunedModel | None
    method: str = "gradient"  # how the heads were ranked
    ablation: Ablation = "zero"  # ... under which ablation
    fraction: float = 0.0
    notes: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """What was pruned and why, as the copy's bertscope-pruning.json and the CLI's JSON both say it."""
        return {
            "objective": self.objective,
            "method": self.method,
            "ablation": self.ablation,
            "fraction": self.fraction,
            "data": self.source,
            "metric": self.metric,
            "before": {"loss": self.importance.baseline_loss, "metric": self.importance.baseline_metric},
            "after": {"loss": self.loss_after, "metric": self.metric_after},
        }

    def as_json(self, model: str) -> dict[str, Any]:
        """The CLI's `prune --fraction --json`: the record, the heads, and the copy written (if any)."""
        record = self.record()
        payload = {"model": model, "data": record["data"]}
        payload |= {key: record[key] for key in ("objective", "method", "ablation", "fraction")}
        payload |= {"heads_pruned": len(self.mask.off), "heads_total": self.mask.num_layers * self.mask.num_heads}
        payload |= {"mask": self.mask.spec()} | {key: record[key] for key in ("metric", "before", "after")}
        written = self.written
        if written is not None:
            payload |= {
                "output": str(written.directory),
                "weights": written.format,
                "parameters_before": written.parameters_before,
                "parameters_after": written.parameters_after,
                **written.timing_json(),
                "max_abs_difference_vs_masked": written.max_abs_difference,
            }
        return payload
