"""Each command's report is whole at 80 columns (its output piped to a file, a small terminal) and at 200.

Rich takes the width from COLUMNS where the output is not a terminal, as in a pipe. On the tiny
models the tables are narrow; tests/test_fit.py holds the wide ones (16 heads, 24 layers) to 80
columns. `probe` prints a report with every column it can have (fitting one takes a minute).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bertscope.cli import main
from tests.helpers.probes import report_with_every_column

SENTENCE = "The keys to the cabinet are on the table."

COMMANDS = {
    "info": ["info"],
    "attention": ["attention", SENTENCE, "--layer", "1", "--head", "2"],
    "patterns": ["patterns", "--limit", "6", "--norms"],
    "importance": ["importance", "-O", "preserve", "--method", "ablation", "--limit", "3"],
    "prune": ["prune", "-O", "preserve", "--curve", "--step", "0.25", "--limit", "3"],
    "patch": ["patch", "The keys to the cabinet are on the table.", "--corrupt", "The key to the cabinets are on the table."],
    "syntax": ["syntax", "--limit", "8"],
    "geometry": ["geometry", "--limit", "8"],
    "mixing": ["mixing", SENTENCE],
    "fill": ["fill", "The capital of France is [MASK].", "--mask", "0:1"],
    "attribute": ["attribute", "The capital of France is [MASK].", "--method", "gradient"],
}


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_table_is_whole_at_80_and_at_200_columns(command, width, tiny_bert_dir, tiny_mlm_dir):
    model = tiny_mlm_dir if command in ("fill", "attribute") else tiny_bert_dir
    result = CliRunner(env={"COLUMNS": str(width)}).invoke(main, [*COMMANDS[command], "-m", str(model)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) > 3 and max(len(line) for line in lines) <= width, result.stdout
    assert "…" not in result.stdout, result.stdout


@pytest.mark.parametrize("width", [80, 200])
def test_probe_with_every_column_is_whole_at_80_and_at_200_columns(width, monkeypatch, tiny_bert_dir):
    """`probe --task upos --mdl` printed numbers as `0.…` and `1,…` at 80 columns."""
    monkeypatch.setattr("bertscope.api.probe", lambda *args, **kwargs: report_with_every_column(mdl=True))
    command = ["probe", "--task", "upos", "--mdl", "--limit", "20", "-m", str(tiny_bert_dir)]
    result = CliRunner(env={"COLUMNS": str(width)}).invoke(main, command, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= width and "…" not in result.stdout, result.stdout
    assert all(number in result.stdout for number in ("0.812", "0.734", "12,346", "23,457", "4.860", "2.557"))
    header = next(line for line in result.stdout.splitlines() if line.lstrip().startswith("layer"))
    assert ("selectivity" in header) == (width == 200) and ("sel: selectivity" in result.stdout) == (width == 80)
