"""Results as a notebook shows them: a one-line repr, an HTML view with a table, a DataFrame.

The results come from the UI's fake backend (every analysis, known numbers, no torch) and,
for the masked LM, from a tiny seeded model; the Python guide (docs/python.md) runs in Jupyter
in tests/test_doc_examples.py.
"""

from __future__ import annotations

import base64
import builtins
import html
import re

import pandas
import pytest

from bertscope.api import built_in_treebank
from bertscope.base.errors import BertscopeError
from bertscope.figures.notebook import HTML_ROWS, html_table
from tests.fake_backend import HEADS, LAYERS, FakeBackend

SENTENCES = ["The keys to the cabinet are on the table.", "A dog barked.", "It rained all day."]


def last(stream):
    return list(stream)[-1].result


def fake_results() -> dict[str, object]:
    backend = FakeBackend()
    treebank = list(built_in_treebank(30).sentences)
    curve_importance = last(backend.importance("preserve", SENTENCES))
    return {
        "forward": backend.forward("the cat sat on the mat", attentions=True),
        "patterns": last(backend.patterns(SENTENCES)),
        "syntax": last(backend.syntax(treebank[:3])),
        "probe": last(backend.probe("sentence_length")),
        "importance": curve_importance,
        "curve": last(backend.pruning_curve("preserve", SENTENCES, ranking=curve_importance)),
        "geometry": last(backend.geometry(SENTENCES * 4)),
        "compare": last(backend.compare("model-b", SENTENCES)),
        "patch": last(backend.patch("the cat sat", "the dog sat", sweep=("heads",))),
        "attribution": last(backend.attribute("the cat sat on the [mask]")),
    }


@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    return fake_results()


@pytest.fixture(scope="module")
def mlm_results(tiny_mlm_session) -> dict[str, object]:
    import bertscope

    return {
        "fill": bertscope.fill(tiny_mlm_session, "Paris is the capital of [MASK].", top=3),
        "cloze": bertscope.cloze(tiny_mlm_session, ["Paris is the capital of [MASK].\tfrance", "Rome is in [MASK].\titaly"]),
    }


def test_every_result_has_a_short_repr_naming_its_headline(results, mlm_results):
    for name, result in {**results, **mlm_results}.items():
        text = repr(result)
        assert text.startswith(type(result).__name__ + "("), (name, text)
        assert "\n" not in text and len(text) < 320, (name, text)
        assert "array(" not in text, (name, text)  # never the arrays themselves


def test_the_reprs_say_the_numbers_a_reader_looks_for(results, mlm_results):
    assert f"{LAYERS} layers × {HEADS} heads" in repr(results["forward"])
    assert "best layer 3, accuracy 0.800" in repr(results["probe"])  # the fake's layer l scores 0.5 + 0.1 l
    assert "majority 0.500" in repr(results["probe"])
    assert f"most important {LAYERS - 1}:{HEADS - 1}" in repr(results["importance"])  # the fake's last head matters most
    shares = results["patterns"].dominant.ravel()
    assert f"heterogeneous {int((shares == 4).sum())}" in repr(results["patterns"])
    assert "[MASK] at" in repr(mlm_results["fill"])
    assert "2 queries" in repr(mlm_results["cloze"])


def test_a_model_handle_shows_what_model_it_is(tiny_session):
    text = repr(tiny_session)
    assert text.startswith("Session(") and "BERT" in text and "layers ×" in text and "cpu float32" in text
    assert " at 0x" not in text


def test_every_table_becomes_a_dataframe_of_plain_columns(results, mlm_results):
    sizes = {
        "forward": 8,  # one row per token of "the cat sat on the mat" with [CLS] and [SEP]
        "patterns": LAYERS * HEADS,
        "importance": LAYERS * HEADS,
        "compare": LAYERS * HEADS,
        "patch": LAYERS * HEADS,
        "probe": LAYERS + 1,
        "geometry": LAYERS + 1,
        "syntax": 6,  # three relations, two directions
    }
    for name, result in {**results, **mlm_results}.items():
        frame = result.to_pandas()
        assert isinstance(frame, pandas.DataFrame) and len(frame), name
        if name in sizes:
            assert len(frame) == sizes[name], (name, len(frame))
        for column in frame.columns:
            assert not any(isinstance(value, (list, dict)) for value in frame[column]), (name, column)


def test_dataframes_hold_the_results_numbers(results):
    patterns = results["patterns"].to_pandas()
    head = patterns[(patterns["layer"] == 1) & (patterns["head"] == 2)].iloc[0]
    assert head.cls == pytest.approx(float(results["patterns"].statistics["cls"][1, 2]))
    importance = results["importance"].to_pandas().sort_values("importance")
    assert tuple(importance.iloc[0][["layer", "head"]]) == results["importance"].least_important(1)[0]
    curve = results["curve"].to_pandas()
    assert list(curve.metric) == [point.metric for point in results["curve"].points]


def test_the_html_view_has_the_headline_and_the_first_rows(results):
    view = results["patterns"]._repr_html_()
    assert html.escape(results["patterns"].summary()) in view
    assert view.count("<tr>") == min(LAYERS * HEADS, HTML_ROWS) + 1  # the header and the first rows
    long = html_table([{"layer": layer, "score": 0.5} for layer in range(HTML_ROWS + 5)])
    assert long.count("<tr>") == HTML_ROWS + 1 and "5 more rows: to_pandas() has them all" in long
    for name, result in results.items():  # each draws its figure into the view
        assert f'<img alt="{type(result).__name__} figure" src="data:image/png;base64,' in result._repr_html_(), name
    probe = results["probe"]._repr_html_()
    assert re.search(r"<th>accuracy</th>", probe) and "0.8" in probe


def test_to_pandas_without_pandas_says_what_to_install(results, monkeypatch):
    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas":
            raise ImportError("no pandas here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(BertscopeError, match="pip install pandas"):
        results["probe"].to_pandas()


def test_a_figure_displays_in_jupyter_as_it_is(tmp_path, monkeypatch):
    """Issue 54: a cell whose last line is `result.figure()` showed `<Figure size 520x400 with 2 Axes>` unless
    `%matplotlib inline` had run. It shows the picture, with no magic: one kernel on this interpreter, the fake's results."""
    import json
    import sys
    from pathlib import Path

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    kernels = tmp_path / "jupyter" / "kernels" / "bertscope-test"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(
        json.dumps(
            {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "test", "language": "python"}
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    root = Path(__file__).resolve().parent.parent  # where `tests.fake_backend` imports from
    cells = [
        f"import sys\nsys.path.insert(0, {str(root)!r})\nfrom tests.fake_backend import FakeBackend\n"
        "result = list(FakeBackend().patterns(['a b', 'c d']))[-1].result",
        "result.figure()",
        "FakeBackend().forward('the cat sat', attentions=True).figure(layer=0, head=1)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    kernel = KernelManager(kernel_name="bertscope-test", transport="ipc", ip=str(tmp_path / "kernel"))  # no race for TCP ports
    NotebookClient(notebook, km=kernel, timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell in notebook.cells[1:]:
        (shown,) = [output for output in cell.outputs if output.output_type == "execute_result"]
        assert "image/png" in shown.data, (cell.source, shown.data.get("text/plain"))
        assert base64.b64decode(shown.data["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")
        assert not [output for output in cell.outputs if output.output_type == "display_data"]  # the one picture, not two
