"""Every table whole at 80 columns (a pipe, a file, a small terminal) and as it was at 200 (bertscope.render.fit).

Rich squeezes a table wider than the console until numbers read `0.…`; `probe --task upos --mdl` did
at 80 columns, and a model with 16 heads or 24 layers would in any grid.
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from rich.console import Console

from bertscope.render.fit import FitTables, fitted
from bertscope.render.importance import importance_grid
from bertscope.render.patching import heads_grid, positions_grid
from bertscope.render.probing import probe_report
from tests.helpers.probes import report_with_every_column


def printed(renderable, width: int) -> str:
    """What a command's console (bertscope.cli.common.report_console) prints at `width`."""
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.push_render_hook(FitTables())
    console.print(renderable)
    return console.file.getvalue()


def assert_whole(text: str, width: int) -> None:
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, text
    assert "…" not in text, text


@pytest.mark.parametrize("mdl", [False, True])
def test_a_probe_table_is_whole_at_80_with_short_headers_and_a_legend(mdl):
    report = report_with_every_column(mdl)
    narrow = printed(probe_report(report, "bert-base-uncased", "en_ewt-ud-train.conllu"), 80)
    assert_whole(narrow, 80)
    for number in ("0.812", "0.734", "0.226", "0.850", "0.960"):  # every baseline and score, whole
        assert number in narrow
    assert "converged" in narrow and "iteration" in narrow  # the fit column's word wraps rather than being cut
    assert "rand: random init accuracy · ctrl: control accuracy · sel: selectivity" in narrow
    if mdl:  # the codes' columns, whole, under the scores' when they do not fit beside them
        assert "12,346" in narrow and "23,457" in narrow and "4.860" in narrow and "2.557" in narrow
        assert re.search(r"layer +bits +compr\. +c\.bits +c\.compr", narrow), narrow


def test_a_probe_table_keeps_its_long_headers_in_one_table_at_200():
    wide = printed(probe_report(report_with_every_column(mdl=True), "bert-base-uncased", "en_ewt-ud-train.conllu"), 200)
    assert_whole(wide, 200)
    header = next(line for line in wide.splitlines() if "selectivity" in line)
    assert all(name in header for name in ("layer", "accuracy", "f1", "fit", "bits", "compr.", "control bits", "control compr."))
    assert "rand:" not in wide


def test_a_grid_of_16_heads_and_24_layers_is_printed_in_blocks_of_heads_at_80():
    """BERT-large: the importance and patching grids are wider than 80 columns; each block repeats the layer."""
    rng = np.random.default_rng(0)
    for grid, width in ((importance_grid(rng.random((24, 16))), 80), (heads_grid(rng.random((24, 16)) - 0.5), 80)):
        text = printed(grid, width)
        assert_whole(text, width)
        headers = [line.split() for line in text.splitlines() if line.strip().startswith("L\\H")]
        assert len(headers) == 2 and headers[0][1] == "0" and headers[1][-1] == "15"  # heads 0 to 15, in two blocks
        assert [int(head) for header in headers for head in header[1:]] == list(range(16))
    tokens = ["[CLS]", *(f"word{i}" for i in range(10)), "[SEP]"]
    text = printed(positions_grid(rng.random((25, 12)), tokens), 80)
    assert_whole(text, 80)
    headers = [line.split()[1:] for line in text.splitlines() if line.startswith("token")]
    assert len(headers) >= 2 and [int(layer) for header in headers for layer in header] == list(range(25))


def test_a_table_that_fits_prints_as_it_did():
    table = importance_grid(np.arange(72, dtype=float).reshape(6, 12))
    plain = Console(file=io.StringIO(), width=80, color_system=None)
    plain.print(table)
    assert printed(table, 80) == plain.file.getvalue()
    assert fitted("some text") == "some text"
