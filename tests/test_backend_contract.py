"""The explorer's contract (`bertscope.ui.backend.Backend`) is what the UI uses, and both backends keep it.

The UI is tested on `FakeBackend` and run on `SessionBackend`: if either drifts from the
protocol (a method missing, a keyword renamed, a default changed), the tests of one say
nothing about the other. These tests compare them member by member.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import bertscope.ui
from bertscope.core.model.results import ModelInfo
from bertscope.ui.backend import Backend
from tests.fake_backend import FakeBackend

ATTRIBUTES = sorted(name for name in Backend.__annotations__)  # plain attributes: num_layers, num_heads
MEMBERS = sorted(name for name in vars(Backend) if not name.startswith("_") and name not in ATTRIBUTES)


@pytest.fixture(scope="module", params=["SessionBackend", "FakeBackend"])
def backend(request):
    if request.param == "FakeBackend":
        return FakeBackend()
    from bertscope.session_backend import SessionBackend

    return SessionBackend(request.getfixturevalue("tiny_session"))


def parameters(function) -> list[tuple[str, str, object]]:
    """(name, kind, default) of each parameter: what a caller relies on (annotations are documentation)."""
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(function).parameters.values()]


def mismatches(backend) -> list[str]:
    problems = []
    for name in ATTRIBUTES:
        if not isinstance(getattr(backend, name, None), int):
            problems.append(f"{name}: missing or not an int")
    for name in MEMBERS:
        declared = inspect.getattr_static(Backend, name)
        actual = inspect.getattr_static(type(backend), name, None)
        if actual is None:
            problems.append(f"{name}: missing")
        elif isinstance(declared, property):
            if not isinstance(actual, property):
                problems.append(f"{name}: not a property")
        elif not callable(actual):
            problems.append(f"{name}: not a method")
        elif parameters(actual) != parameters(declared):
            problems.append(f"{name}: takes {parameters(actual)}, the contract says {parameters(declared)}")
    return problems


def test_the_contract_declares_the_explorers_needs():
    assert {"num_layers", "num_heads"} <= set(ATTRIBUTES)
    assert {"info", "encode", "forward", "attention_patterns", "probe", "head_importance", "measure_objective", "pruning_curve"} <= set(
        MEMBERS
    )


def test_both_backends_keep_the_contract(backend):
    assert mismatches(backend) == []
    assert isinstance(backend.info, ModelInfo)


def test_the_ui_uses_nothing_outside_the_contract():
    """Every `backend.NAME` in the UI's code is declared (the contract cannot fall behind the screens)."""
    used = set()
    for path in Path(bertscope.ui.__file__).parent.rglob("*.py"):
        used |= set(re.findall(r"\bbackend\.(\w+)", path.read_text()))
    assert used, "the pattern found no use of the backend: the test would pass vacuously"
    assert used - set(ATTRIBUTES) - set(MEMBERS) == set()


def test_a_drifted_backend_is_caught():
    """The check itself: a renamed keyword, a changed default and a missing method are each reported."""

    class Drifted(FakeBackend):
        def geometry(self, sentences, *, unit="auto", rows=None, mask=None, ablation="zero", cancel=None):  # max_rows renamed
            return super().geometry(sentences, mask=mask, ablation=ablation, cancel=cancel)

        def compare(self, other, sentences, *, unit="word", max_rows=None, cancel=None):  # another default
            return super().compare(other, sentences, cancel=cancel)

        measure_objective = None  # gone

    problems = mismatches(Drifted())
    assert [problem.split(":")[0] for problem in problems] == ["compare", "geometry", "measure_objective"]
