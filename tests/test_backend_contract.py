"""The explorer's contract (`bertscope.ui.backend.Backend`) is what the UI uses, and both backends keep it.

The UI is tested on `FakeBackend` and run on `SessionBackend`: if either drifts from the
protocol (a method missing, a keyword renamed, a default changed), the tests of one say
nothing about the other. These tests compare them member by member, and the fake's answer
to each analysis the UI names (`backend.steps(api.NAME, ...)`) with the API's function.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import bertscope.ui
from bertscope import api
from bertscope.model.results import ModelInfo
from bertscope.ui.backend import Backend
from tests.fake_backend import FakeBackend

ATTRIBUTES = sorted(name for name in Backend.__annotations__)  # plain attributes: num_layers, num_heads
MEMBERS = sorted(name for name in vars(Backend) if not name.startswith("_") and name not in ATTRIBUTES)
UI_FILES = sorted(Path(bertscope.ui.__file__).parent.rglob("*.py"))


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


def analyses_asked() -> dict[str, set[str]]:
    """Each analysis the UI asks for (`backend.steps(api.NAME, erasure, ...)`), with the keywords it passes."""
    asked: dict[str, set[str]] = {}
    for path in UI_FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "steps" and node.args:
                named = node.args[0]
                assert isinstance(named, ast.Attribute) and isinstance(named.value, ast.Name) and named.value.id == "api", (
                    f"{path.name}:{node.lineno}: the UI names an analysis as api.NAME"
                )
                asked.setdefault(named.attr, set()).update(keyword.arg for keyword in node.keywords if keyword.arg)
    return asked


def answer_mismatches(backend, asked: dict[str, set[str]]) -> list[str]:
    """Where `backend`'s answers differ from the API's functions: each parameter (but the erasure, which the backend
    applies) named, kinded and defaulted as the API's, and every keyword the UI passes taken."""
    problems = []
    for name, keywords in sorted(asked.items()):
        answer = getattr(backend, name, None)
        if answer is None:
            problems.append(f"{name}: no answer")
            continue
        api_parameters = {p[0]: p for p in parameters(getattr(api, name))[1:]}  # after the model
        ours = [p for p in parameters(answer) if p[0] != "erasure"]
        problems += [f"{name}: takes {p}, the API {api_parameters.get(p[0])}" for p in ours if api_parameters.get(p[0]) != p]
        problems += [f"{name}: lacks {keyword}=, which the UI passes" for keyword in sorted(keywords - {p[0] for p in ours})]
    return problems


def test_the_contract_declares_the_explorers_needs():
    assert {"num_layers", "num_heads"} <= set(ATTRIBUTES)
    assert {"info", "encode", "forward", "layer_maps", "steps", "fit_erasure", "objective", "measure"} <= set(MEMBERS)


def test_the_contract_is_small():
    """The explorer speaks the API: the contract's own methods take at most 45 parameters in all."""
    count = sum(len(parameters(getattr(Backend, name))) - 1 for name in MEMBERS if not isinstance(vars(Backend)[name], property))
    assert count <= 45


def test_both_backends_keep_the_contract(backend):
    assert mismatches(backend) == []
    assert isinstance(backend.info, ModelInfo)


def test_the_ui_uses_nothing_outside_the_contract():
    """Every `backend.NAME` in the UI's code is declared (the contract cannot fall behind the screens)."""
    used = set()
    for path in UI_FILES:
        used |= set(re.findall(r"\bbackend\.(\w+)", path.read_text()))
    assert used, "the pattern found no use of the backend: the test would pass vacuously"
    assert used - set(ATTRIBUTES) - set(MEMBERS) == set()


def test_the_fake_answers_each_analysis_the_ui_asks_for_as_the_api_takes_it():
    asked = analyses_asked()
    assert {"patterns", "syntax", "probe", "geometry", "compare", "importance", "pruning_curve", "patch", "mixing", "attribute"} <= set(
        asked
    )
    assert answer_mismatches(FakeBackend(), asked) == []


def test_a_drifted_backend_is_caught():
    """The check itself: a renamed keyword, a changed default, a missing method and a keyword the UI passes that the fake
    lacks are each reported."""

    class Drifted(FakeBackend):
        def geometry(self, texts=None, *, data=None, unit="auto", rows=4000, mask=None, ablation="zero", cancel=None):  # max_rows renamed
            return super().geometry(texts, data=data, mask=mask, ablation=ablation, cancel=cancel)

        def compare(self, model_b, texts=None, *, data=None, unit="word", max_rows=4000, cancel=None):  # another default
            return super().compare(model_b, texts, cancel=cancel)

        measure = None  # gone

    problems = mismatches(Drifted())
    assert [problem.split(":")[0] for problem in problems] == ["measure"]
    answers = answer_mismatches(Drifted(), analyses_asked())
    assert [problem.split(":")[0] for problem in answers] == ["compare", "geometry", "geometry"]
    assert "lacks max_rows=" in answers[-1]
