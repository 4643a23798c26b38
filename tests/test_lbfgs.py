"""The probes' L-BFGS on problems whose minimum is known."""

import pytest
import torch

from bertscope.analyses.probing.lbfgs import minimise, minimise_together


def test_an_ill_conditioned_quadratic_is_solved_to_the_tolerance():
    generator = torch.Generator().manual_seed(0)
    basis, _ = torch.linalg.qr(torch.randn(40, 40, generator=generator, dtype=torch.float64))
    hessian = basis @ torch.diag(torch.logspace(-2, 2, 40, dtype=torch.float64)) @ basis.T  # condition number 10^4
    target = torch.randn(40, generator=generator, dtype=torch.float64)

    def quadratic(x):
        residual = x - target
        return float(residual @ hessian @ residual / 2), hessian @ residual

    found = minimise(quadratic, torch.zeros(40, dtype=torch.float64), max_iter=1000, tolerance=1e-4)
    x, evaluations = found.x, found.evaluations
    assert found.converged and found.gradient <= 1e-4
    assert (hessian @ (x - target)).abs().max() <= 1e-4
    assert torch.allclose(x, target, atol=1e-2)  # |x - target| <= |gradient| / smallest eigenvalue
    assert evaluations < 400  # gradient descent would need tens of thousands


def test_the_iteration_limit_and_an_abandoned_run():
    calls = []

    def slow(x):
        calls.append(1)
        return float((x**4).sum()), 4 * x**3  # flat near 0: converges slowly

    found = minimise(slow, torch.ones(3, dtype=torch.float64), max_iter=5, tolerance=0.0)
    assert found.evaluations == len(calls) and 5 <= found.evaluations <= 5 * 31
    assert float((found.x**4).sum()) < 3
    assert found.ending == "iteration limit" and not found.converged and found.gradient > 0

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
    for number, found in enumerate(together):
        alone = minimise(lambda x, number=number: quadratic(number, x), starts[number], max_iter=1000, tolerance=1e-6)
        assert torch.equal(found.x, alone.x) and found.evaluations == alone.evaluations and found.ending == alone.ending
    assert sum(len(numbers) for numbers in asked) == sum(found.evaluations for found in together)
    assert asked[0] == [0, 1] and asked[-1] == [int(together[1].evaluations > together[0].evaluations)]  # the finished one is asked no more


def test_a_run_that_can_no_longer_lower_the_loss_says_it_stalled():
    """A gradient that does not vanish at the loss's minimum (as float noise makes it): the run stops and says so."""

    def noisy(x):
        return float(x.square().sum()), 2 * x + 0.01 * torch.sign(x)

    found = minimise(noisy, torch.full((4,), 3.0, dtype=torch.float64), max_iter=1000, tolerance=1e-4)
    assert found.ending == "stalled" and not found.converged
    assert found.gradient >= 0.01 and found.evaluations < 1000
