"""Which heads matter: importance by gradient or by ablation, and pruning curves.

- `gradient` (Michel et al. 2019): I_h = E_x |∂L(x)/∂ξ_h| at ξ = 1, from one backward pass
  per batch through float head gates, one gate row per sentence so each sentence's
  gradient is its own. For `preserve`, whose gradient is 0 at the unmasked model, it is
  the first-order movement E‖∂h/∂ξ_h‖² / ‖h‖², estimated with a random projection per
  sentence (see objectives.PreserveObjective.gradient_target).
- `ablation`: the exact change of the loss when one head is switched off (single-head
  ablation) and when one whole layer is (leave-one-layer-out, Kovaleva et al. 2019), with
  many masks batched as rows of one forward pass; and the change of the metric from the same
  passes, so that the heads and layers whose removal raises it are found (Kovaleva et al. §6).

Per-layer ℓ2 normalisation (Michel et al.) divides each layer's scores by their ℓ2 norm.
Pruning removes the least important heads in steps, measuring the objective at each, and
optionally estimates importance again under the heads already removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
import torch

from bertscope import runtime as distributed
from bertscope.analyses.importance.objectives import Objective, ProbeObjective, Scores, Tally
from bertscope.analyses.importance.results import (
    METHODS,
    CurvePoint,
    HeadImportance,
    Measurement,
    MetricChanges,
    PruningCurve,
    check_fraction,
)
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress
from bertscope.data.batching import MAX_TOKENS
from bertscope.model.masks import Ablation, HeadMask, check_ablation
from bertscope.model.pruning import pruned_heads_of

if TYPE_CHECKING:
    from bertscope.model.session import Session

__all__ = [
    "CurvePoint",
    "HeadImportance",
    "Measurement",
    "PruningCurve",
    "check_fraction",
    "head_importance",
    "gradient_importance",
    "ablation_importance",
    "measure",
    "pruning_curve",
    "normalize_per_layer",
]

MAX_ROWS = 256  # sentences × masks per forward pass in ablation sweeps
MAX_ROW_TOKENS = 2 * MAX_TOKENS  # ... and at most this many padded tokens, so long sentences do not raise the peak


@contextlib.contextmanager
def _no_weight_gradients(model: torch.nn.Module) -> Iterator[None]:
    """Only the gates need gradients: weights that do not require them keep the backward pass lean."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def _base_gates(session: Session, base: HeadMask | None, rows: int | None = None) -> torch.Tensor:
    gates = torch.as_tensor(base.gates() if base is not None else np.ones((session.num_layers, session.num_heads), np.float32))
    gates = gates.to(session.device)
    return gates if rows is None else gates.expand(rows, -1, -1).clone()


def pruned_set(session: Session) -> frozenset[tuple[int, int]]:
    return frozenset((layer, head) for layer, heads in pruned_heads_of(session.model.config).items() for head in heads)


def measure(objective: Objective, mask: HeadMask | None = None, ablation: Ablation = "zero") -> Measurement:
    """The objective's loss (mean over sentences) and metric under `mask`."""
    gates = objective.session.gate_tensor(mask)
    tally = Tally(objective)
    with torch.inference_mode():
        for batch in objective.batches:
            tally.add(objective.scores(objective.reference(batch), gates, ablation))
    return tally.measurement()[0]


def gradient_importance(
    objective: Objective,
    *,
    ablation: Ablation = "zero",
    normalize: bool = True,
    base: HeadMask | None = None,
    seed: int = 0,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[HeadImportance]]:
    """Michel et al.'s gradient importance, one forward and one backward pass per batch."""
    ablation = check_ablation(ablation)
    session = objective.session
    total = np.zeros((session.num_layers, session.num_heads), dtype=np.float64)
    generator = torch.Generator().manual_seed(seed)
    batches = objective.batches
    tally = Tally(objective)
    with _no_weight_gradients(session.model):
        for batch in batches:
            if cancel is not None and cancel.is_set():
                return
            gates = _base_gates(session, base, batch.size).requires_grad_(True)
            target, square, scores = objective.gradient_target(batch, gates, ablation, generator)
            (gradient,) = torch.autograd.grad(target, gates)
            gradient = gradient.double()
            total += (gradient.pow(2) if square else gradient.abs()).sum(0).cpu().numpy()
            tally.add(scores)
            yield Progress("gradients", batches.done, len(batches))
    baseline, summed = tally.measurement(total=total)
    raw = summed["total"] / max(objective.sentences, 1)
    if base is not None and objective.compares_with_unmasked:
        baseline = measure(objective, base, ablation)  # movement from the unmasked model, not from the masked one
    yield Progress("done", len(batches), len(batches), _result(objective, "gradient", ablation, normalize, raw, None, baseline, base))


def ablation_importance(
    objective: Objective,
    *,
    ablation: Ablation = "zero",
    normalize: bool = True,
    base: HeadMask | None = None,
    layers: bool = True,
    max_rows: int = MAX_ROWS,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[HeadImportance]]:
    """Exact loss change of switching off each head (and each whole layer), masks batched as rows."""
    ablation = check_ablation(ablation)
    session = objective.session
    num_layers, num_heads = session.num_layers, session.num_heads
    start = _base_gates(session, base)
    gone = pruned_set(session) | (base.off if base is not None else frozenset())
    heads = [(layer, head) for layer in range(num_layers) for head in range(num_heads) if (layer, head) not in gone]
    masks = []
    for layer, head in heads:
        gates = start.clone()
        gates[layer, head] = 0.0
        masks.append(gates)
    if layers:
        for layer in range(num_layers):
            gates = start.clone()
            gates[layer] = 0.0
            masks.append(gates)
    deltas = np.zeros(len(masks), dtype=np.float64)
    metric_sums, metric_counts = np.zeros(len(masks)), np.zeros(len(masks))  # each mask's metric, summed as the tally's
    paired: list[list[np.ndarray]] = [[] for _ in masks]  # ... or its rank metric's pairs
    tally = Tally(objective)
    batches = objective.batches
    with torch.inference_mode():
        for batch in batches:
            if cancel is not None and cancel.is_set():
                return
            batch = objective.reference(batch)
            plain = objective.scores(batch, start if base is not None else None, ablation)
            tally.add(plain)
            tokens = batch.size * int(batch.inputs["input_ids"].shape[1])
            per_pass = max(1, min(max_rows // batch.size, MAX_ROW_TOKENS // tokens))
            for first in range(0, len(masks), per_pass):
                chunk = masks[first : first + per_pass]
                gates = torch.stack(chunk).repeat_interleave(batch.size, dim=0)  # row k·B + b: mask k on sentence b
                scores = objective.scores(batch.repeated(len(chunk)), gates, ablation)
                losses = scores.loss.view(len(chunk), batch.size)
                deltas[first : first + len(chunk)] += (losses - plain.loss[None]).sum(1).double().cpu().numpy()
                _add_metrics(scores, len(chunk), slice(first, first + len(chunk)), metric_sums, metric_counts, paired)
            yield Progress("ablations", batches.done, len(batches))
    baseline, summed = tally.measurement(deltas=deltas, metric_sums=metric_sums, metric_counts=metric_counts)
    deltas = summed["deltas"] / max(objective.sentences, 1)
    metric_changes = _metric_changes(objective, summed, paired, baseline.metric)
    raw = np.zeros((num_layers, num_heads), dtype=np.float64)
    head_changes = np.zeros((num_layers, num_heads), dtype=np.float64)
    for (layer, head), delta, change in zip(heads, deltas[: len(heads)], metric_changes[: len(heads)]):
        raw[layer, head], head_changes[layer, head] = delta, change
    layer_deltas = deltas[len(heads) :] if layers else None
    result = _result(objective, "ablation", ablation, normalize, raw, layer_deltas, baseline, base)
    changes = MetricChanges(head_changes, metric_changes[len(heads) :] if layers else None)
    yield Progress("done", len(batches), len(batches), dataclasses.replace(result, metric_changes=changes))


def _add_metrics(scores: Scores, masks: int, where: slice, sums: np.ndarray, counts: np.ndarray, paired: list[list[np.ndarray]]) -> None:
    """Add a pass's metric (rows mask-major: k·B + b) to each of its `masks` masks' sums, counts or pairs."""
    both = torch.stack([scores.metric_sum.view(masks, -1).sum(1), scores.metric_count.view(masks, -1).sum(1)]).double().cpu().numpy()
    sums[where] += both[0]
    counts[where] += both[1]
    if scores.paired is not None:
        rows = scores.paired.detach().double().cpu().numpy()
        for index, part in zip(range(where.start, where.stop), rows.reshape(masks, -1, rows.shape[-1])):
            paired[index].append(part)


def _metric_changes(objective: Objective, summed: dict[str, Any], paired: list[list[np.ndarray]], baseline: float) -> np.ndarray:
    """Each mask's metric over the whole corpus minus the unablated one's (positive: switching it off raises the metric)."""
    every = [paired]
    if objective.ranked:  # every rank's pairs (a collective: every rank takes part)
        every = distributed.gather(paired)
    metrics = []
    for index in range(len(paired)):
        pairs = np.concatenate([part for ranks in every for part in ranks[index]] or [np.zeros((0, 2))]) if objective.ranked else None
        metrics.append(objective.corpus_metric(float(summed["metric_sums"][index]), float(summed["metric_counts"][index]), pairs))
    return np.asarray(metrics, dtype=np.float64) - baseline


def head_importance(objective: Objective, method: str = "gradient", **options: Any) -> Iterator[Progress[HeadImportance]]:
    """Importance by `method` (gradient or ablation); a generator of progress, the last item with the result."""
    if method not in METHODS:
        raise InputError(f"unknown importance method {method!r}; use one of: {', '.join(METHODS)}")
    if method == "gradient":
        options.pop("layers", None)
        options.pop("max_rows", None)
        return gradient_importance(objective, **options)
    options.pop("seed", None)
    return ablation_importance(objective, **options)


def _result(
    objective: Objective,
    method: str,
    ablation: Ablation,
    normalize: bool,
    raw: np.ndarray,
    layers: np.ndarray | None,
    baseline: Measurement,
    base: HeadMask | None,
) -> HeadImportance:
    session = objective.session
    pruned = pruned_set(session)
    raw = raw.copy()
    for layer, head in pruned | (base.off if base is not None else frozenset()):
        raw[layer, head] = 0.0
    scores = normalize_per_layer(raw) if normalize else raw
    notes = [*objective.notes, *objective.measured_notes()]
    if isinstance(objective, ProbeObjective):
        notes.append(f"the probe's dev accuracy on layer {objective.layer}: {objective.probe_accuracy:.3f}")
    return HeadImportance(
        objective=objective.name,
        method=method,
        ablation=ablation,
        normalized=normalize,
        importance=scores.astype(np.float64),
        raw=raw,
        layers=None if layers is None else np.asarray(layers, dtype=np.float64),
        baseline_loss=baseline.loss,
        baseline_metric=baseline.metric,
        metric=objective.metric,
        sentences=objective.sentences,
        pruned=pruned,
        base_mask=base.spec() if base is not None else "",
        notes=tuple(notes),
    )


def normalize_per_layer(scores: np.ndarray) -> npt.NDArray[np.floating[Any]]:
    """Each layer's scores divided by their ℓ2 norm (Michel et al.); a layer of zeros stays zero."""
    norms = np.linalg.norm(scores, axis=1, keepdims=True)
    return cast(npt.NDArray[np.floating[Any]], np.divide(scores, norms, out=np.zeros_like(scores), where=norms > 0))


def pruning_curve(
    objective: Objective,
    *,
    importance: HeadImportance | None = None,
    method: str = "gradient",
    ablation: Ablation = "zero",
    step: float = 0.1,
    reestimate: bool = False,
    normalize: bool = True,
    max_drop: float = 0.01,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[PruningCurve]]:
    """Remove the least important heads `step` of all heads at a time, measuring the objective at each step.

    With `reestimate`, importance is estimated again under the heads removed so far before
    each step (Michel et al.'s iterative pruning); otherwise the first ranking is used.
    """
    check_fraction(step, "step")
    session = objective.session
    total_heads = session.num_layers * session.num_heads
    already = len(pruned_set(session))
    counts = sorted(
        {already} | {min(total_heads, round(k * step * total_heads)) for k in range(1, int(1 / step + 1e-9) + 1)} | {total_heads}
    )
    counts = [c for c in counts if c >= already]
    steps = len(counts)
    mask = HeadMask.none(session.num_layers, session.num_heads)
    points = []
    for index, count in enumerate(counts):
        if cancel is not None and cancel.is_set():
            return
        extra = count - already - len(mask)
        if extra > 0:
            if importance is None or (reestimate and index > 1):
                for progress in head_importance(
                    objective, method, ablation=ablation, normalize=normalize, base=mask if len(mask) else None, cancel=cancel
                ):
                    importance = progress.result
                if importance is None:
                    return  # cancelled
            chosen = importance.least_important(extra, mask)
            mask = HeadMask(mask.num_layers, mask.num_heads, mask.off | frozenset(chosen))
        measured = measure(objective, mask if len(mask) else None, ablation)
        points.append(CurvePoint(count / total_heads, count, measured.loss, measured.metric, mask.spec()))
        yield Progress(f"{count} of {total_heads} heads removed", index + 1, steps)
    curve = PruningCurve(objective.name, objective.metric, method, ablation, reestimate, tuple(points), max_drop, tuple(objective.notes))
    yield Progress("done", steps, steps, curve)
