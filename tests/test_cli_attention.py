"""`bertscope attention` for a person: colour scale and dense mode options (tiny BERT, no colours)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from rich.text import Text

from bertscope.cli import main

SENTENCE = "The keys to the cabinet are on the table."


def attention(*args: str):
    return CliRunner().invoke(main, ["attention", SENTENCE, "--layer", "0", "--head", "1", *args], catch_exceptions=False)


def legend(output: str) -> list[str]:
    return output.rstrip().splitlines()[-1].split()


@pytest.mark.parametrize("scale", ["max", "row", "fixed", "log"])
def test_scale_option_is_named_in_the_legend_with_its_numbers(tiny_bert_dir, scale):
    result = attention("--scale", scale, "--model", str(tiny_bert_dir))
    assert result.exit_code == 0, result.output
    weights = np.array(json.loads(attention("--json", "--model", str(tiny_bert_dir)).stdout)["attention"])
    words = legend(result.stdout)
    assert words[0] == scale
    expected_top = {"max": f"{weights.max():.2f}", "row": "max", "fixed": "1.00", "log": f"{weights.max():.2f}"}
    assert words[-1] == expected_top[scale]
    for token in ("cabinet", "table", "[SEP]"):
        assert token in result.stdout  # row labels at full length


def test_bad_scale_is_one_line_and_exit_status_2(tiny_bert_dir):
    result = attention("--scale", "linear", "--model", str(tiny_bert_dir))
    assert result.exit_code == 2 and "'linear' is not one of 'max', 'row', 'fixed', 'log'" in result.output


def test_dense_without_colours_falls_back_to_one_row_a_line(tiny_bert_dir):
    plain = attention("--model", str(tiny_bert_dir)).stdout.splitlines()
    dense = attention("--dense", "--model", str(tiny_bert_dir)).stdout.splitlines()
    assert len(dense) == len(plain)  # shade glyphs have no halves
    assert "▀" not in "\n".join(dense)


def test_dense_in_colour_halves_the_grid_lines(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLORTERM", "truecolor")
    monkeypatch.delenv("NO_COLOR", raising=False)
    tokens = json.loads(attention("--json", "--model", str(tiny_bert_dir)).stdout)["tokens"]
    plain = attention("--model", str(tiny_bert_dir)).stdout.splitlines()
    dense = attention("--dense", "--model", str(tiny_bert_dir)).stdout.splitlines()
    assert sum("▀" in line for line in dense) == (len(tokens) + 1) // 2
    assert len(plain) - len(dense) == len(tokens) // 2
    assert "\x1b[38;2;" in "\n".join(dense)  # half blocks coloured in front and behind
    words = [Text.from_ansi(line).plain.split() for line in dense]
    assert [tokens[2], tokens[3]] in [line[:2] for line in words]  # both rows' labels, whole, the upper first
