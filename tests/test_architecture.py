"""The package's layers hold: no import circles, nothing imported from a higher layer.

The layers, lowest first, are `benchmarks/structure.py`'s LAYERS: base (errors, progress,
theming), data, model, analyses, the public API, render, ui, cli.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

STRUCTURE = Path(__file__).resolve().parent.parent / "benchmarks" / "structure.py"


def load_structure():
    spec = importlib.util.spec_from_file_location("bertscope_structure", STRUCTURE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_circles():
    structure = load_structure()
    assert structure.circles(structure.import_graph()) == []


def test_nothing_is_imported_from_a_higher_layer():
    structure = load_structure()
    assert structure.upward(structure.import_graph()) == []


def test_the_checker_sees_a_circle_and_an_upward_import():
    structure = load_structure()
    graph = {"bertscope.data.a": {"bertscope.analyses.b"}, "bertscope.analyses.b": {"bertscope.data.a"}}
    assert structure.circles(graph) == [["bertscope.analyses.b", "bertscope.data.a"]]
    assert structure.upward(graph) == [("bertscope.data.a", "bertscope.analyses.b")]
