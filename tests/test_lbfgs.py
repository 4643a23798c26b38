"""The probes' L-BFGS on problems whose minimum is known."""

import pytest
import torch

from bertscope.core.analyses.lbfgs import minimise, minimise_together


def test_an_ill_conditioned_quadratic_is_solved_to_the_tolerance():
    generator = torch.Generator().manual_seed(0)
    basis, _ = torch.linalg.qr(torch.randn(40, 40, generator=generator, dtype=torch.float64))
    hessian = basis @ torch.diag(torch.logspace(-2, 2, 40, dtype=torch.float64)) @ basis.T  # condition number 10^4
    target = torch.randn(40, generator=generator, dtype=torch.float64)

    def quadratic(x):
        residual = x - target
        return float(residual @ hessian @ residual / 2), hessian @ residual

    x, evaluations = minimise(quadratic, torch.zeros(40, dtype=torch.float64), max_iter=1000, tolerance=1e-4)
    assert (hessian @ (x - target)).abs().max() <= 1e-4
    assert torch.allclose(x, target, atol=1e-2)  # |x - target| <= |gradient| / smallest eigenvalue
    assert evaluations < 400  # gradient descent would need tens of thousands


def test_the_iteration_limit_and_an_abandoned_run():
    calls = []

    def slow(x):
        calls.append(1)
        return float((x**4).sum()), 4 * x**3  # flat near 0: converges slowly

    x, evaluations = minimise(slow, torch.ones(3, dtype=torch.float64), max_iter=5, tolerance=0.0)
    assert evaluations == len(calls) and 5 <= evaluations <= 5 * 31
    assert float((x**4).sum()) < 3

    def cancelled(x):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        minimise(cancelled, torch.zeros(2), max_iter=10, tolerance=1e-4)


def test_problems_minimised_together_each_take_their_own_steps():
    """Evaluations asked for together (one pass over shared data) change nothing in any problem's run."""
    generator = torch.Generator().manual_seed(1)
    problems = []
    for size, spread in ((30, 2), (12, 4)):  # a quick one and a slow one
        basis, _ = torch.linalg.qr(torch.randn(size, size, generator=generator, dtype=torch.float64))
        hessian = basis @ torch.diag(torch.logspace(-spread / 2, spread / 2, size, dtype=torch.float64)) @ basis.T
        problems.append((hessian, torch.randn(size, generator=generator, dtype=torch.float64)))

    def quadratic(number, x):
        hessian, target = problems[number]
        return float((x - target) @ hessian @ (x - target) / 2), hessian @ (x - target)

    asked = []

    def both(points):
        asked.append([number for number, _ in points])
        return [quadratic(number, x) for number, x in points]

    starts = [torch.zeros(len(target), dtype=torch.float64) for _, target in problems]
    together = minimise_together(both, starts, max_iter=1000, tolerance=1e-6)
    for number, (x, evaluations) in enumerate(together):
        alone, alone_evaluations = minimise(lambda x, number=number: quadratic(number, x), starts[number], max_iter=1000, tolerance=1e-6)
        assert torch.equal(x, alone) and evaluations == alone_evaluations
    assert sum(len(numbers) for numbers in asked) == sum(evaluations for _, evaluations in together)
    assert asked[0] == [0, 1] and asked[-1] == [int(together[1][1] > together[0][1])]  # the finished one is asked no more
