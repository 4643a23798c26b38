"""A small L-BFGS minimiser for the linear probes' convex losses.

Why not `torch.optim.LBFGS`: constructing any torch optimizer imports `torch._dynamo`,
which takes 1-1.3 s in a fresh process on a 2-core machine (more than fitting every
layer's probe afterwards), and its closure interface is built around autograd, where the
probes compute their gradient by hand. For a convex loss, a backtracking line search on
the Armijo condition is enough: the curvature pairs of a convex function never turn
negative (Nocedal & Wright, Numerical Optimization, algorithms 7.4 and 7.5).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Literal

import torch

Objective = Callable[[torch.Tensor], tuple[float, torch.Tensor]]

SUFFICIENT_DECREASE = 1e-4  # Armijo's c1, the usual value
MAX_HALVINGS = 30  # a line search that halves the step this often is at float precision: stop
RELATIVE_CHANGE = 1e-10  # a step that changes the loss less than this (relative) means no progress is left

Ending = Literal["converged", "iteration limit", "stalled"]


@dataclass(frozen=True)
class Minimum:
    """Where a minimisation ended, and why.

    `ending`: `converged` (the gradient's size reached the tolerance), `iteration limit`, or
    `stalled` (no step lowered the loss any more at float precision before the tolerance was
    reached); `gradient` is the gradient's size at `x`, as the tolerance measures it.
    """

    x: torch.Tensor
    evaluations: int
    ending: Ending
    gradient: float

    @property
    def converged(self) -> bool:
        return self.ending == "converged"


def minimise(
    fun: Objective,
    x: torch.Tensor,
    *,
    max_iter: int,
    tolerance: float,
    history: int = 20,
    size: Callable[[torch.Tensor], float] | None = None,
) -> Minimum:
    """Minimise `fun(x) -> (loss, gradient)` from `x`; return where it ended (`Minimum`).

    Stops once the gradient's `size` is at most `tolerance` (default: its largest entry,
    scikit-learn's criterion for its `tol`; a caller that minimises in changed coordinates
    measures the gradient in the original ones), after `max_iter` iterations, or when a step
    no longer lowers the loss beyond float precision. `fun` may raise to abandon the run (cancelling).
    """
    (found,) = minimise_together(
        lambda points: [fun(point) for _, point in points], [x], max_iter=max_iter, tolerance=tolerance, history=history, sizes=[size]
    )
    return found


def minimise_together(
    fun: Callable[[list[tuple[int, torch.Tensor]]], list[tuple[float, torch.Tensor]]],
    starts: list[torch.Tensor],
    *,
    max_iter: int,
    tolerance: float,
    history: int = 20,
    sizes: list[Callable[[torch.Tensor], float] | None] | None = None,
) -> list[Minimum]:
    """Several independent minimisations, each step for step what `minimise` does alone, whose evaluations are asked
    for together: `fun([(i, x_i), ...])` gets the next point of every problem still running and returns their
    `(loss, gradient)` in that order. Problems that read the same data (a probe and its control task on the same
    features) then share each pass over it. Returns a `Minimum` per problem.
    """
    sizes = sizes or [None] * len(starts)
    runs = [_steps(x, max_iter, tolerance, history, size) for x, size in zip(starts, sizes, strict=True)]
    waiting = {index: next(run) for index, run in enumerate(runs)}  # problem -> the point it wants evaluated
    results: dict[int, Minimum] = {}
    while waiting:
        asked = list(waiting.items())
        for (index, _), answer in zip(asked, fun(asked), strict=True):
            try:
                waiting[index] = runs[index].send(answer)
            except StopIteration as finished:
                results[index] = finished.value
                del waiting[index]
    return [results[index] for index in range(len(runs))]


def _steps(
    x: torch.Tensor, max_iter: int, tolerance: float, history: int, size: Callable[[torch.Tensor], float] | None
) -> Generator[torch.Tensor, tuple[float, torch.Tensor], Minimum]:
    """`minimise` as a generator: yields each point to evaluate, is sent its `(loss, gradient)`, returns a `Minimum`."""
    size = size or (lambda gradient: float(gradient.abs().max()))
    loss, gradient = yield x
    evaluations = 1
    pairs: list[tuple[torch.Tensor, torch.Tensor, float]] = []  # (s_k, y_k, 1 / s_k·y_k), s the step, y the gradient's change
    ending: Ending = "iteration limit"
    for _ in range(max_iter):
        if size(gradient) <= tolerance:
            ending = "converged"
            break
        direction = _direction(gradient, pairs)
        slope = float(torch.dot(gradient, direction))
        if slope >= 0:  # rounding made the direction useless: start again from steepest descent
            pairs.clear()
            direction = _direction(gradient, pairs)
            slope = float(torch.dot(gradient, direction))
        step = 1.0
        for _ in range(MAX_HALVINGS):
            candidate = x + step * direction
            new_loss, new_gradient = yield candidate
            evaluations += 1
            if new_loss <= loss + SUFFICIENT_DECREASE * step * slope or size(new_gradient) <= tolerance:
                break
            step /= 2
        else:
            ending = "stalled"
            break
        moved, change = candidate - x, new_gradient - gradient
        curvature = float(torch.dot(moved, change))
        if curvature > 0:
            pairs.append((moved, change, 1.0 / curvature))
            if len(pairs) > history:
                pairs.pop(0)
        settled = abs(loss - new_loss) <= RELATIVE_CHANGE * max(1.0, abs(loss))
        x, loss, gradient = candidate, new_loss, new_gradient
        if settled:
            ending = "stalled"
            break
    final = size(gradient)
    if final <= tolerance:  # the last step reached it (or a settled step did)
        ending = "converged"
    return Minimum(x, evaluations, ending, final)


def _direction(gradient: torch.Tensor, pairs: list[tuple[torch.Tensor, torch.Tensor, float]]) -> torch.Tensor:
    """`-H g` by the two-loop recursion, `H` the L-BFGS estimate of the inverse Hessian.

    With no curvature pairs yet, a steepest-descent step scaled to move at most 1 in sum of
    absolute values (as torch's L-BFGS starts), since the loss's scale is not known.
    """
    if not pairs:
        return gradient * -min(1.0, 1.0 / float(gradient.abs().sum()))
    q = gradient.clone()
    alpha = []
    for s, y, rho in reversed(pairs):
        a = rho * float(torch.dot(s, q))
        alpha.append(a)
        q.add_(y, alpha=-a)
    _, last_change, last_rho = pairs[-1]
    q.div_(last_rho * float(torch.dot(last_change, last_change)))  # scale by s·y / y·y
    for (s, y, rho), a in zip(pairs, reversed(alpha), strict=True):
        q.add_(s, alpha=a - rho * float(torch.dot(y, q)))
    return q.neg_()
