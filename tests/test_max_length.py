"""How many tokens a command feeds the model: the model's own limit, or --max-length; and long maps in a terminal.

A ModernBERT of 8,192 positions saved with a tokenizer file that says 512 had its input cut at 512
(`info` said 512) with no way to say otherwise; `attention` on 2,000 tokens printed 62,094 lines.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

import bertscope
from bertscope.base.errors import InputError
from bertscope.cli import main
from bertscope.model.families import family_for
from bertscope.model.model_files import usable_length
from tests.family_models import save_tiny_family

POSITIONS = 8192
LONG = " ".join(["the cat sat on the mat while the dogs ran across the fields"] * 20)  # 260 words, over 512 tokens
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # a terminal's colours and cursor moves


@pytest.fixture(scope="module")
def long_modernbert(tmp_path_factory):
    """A tiny ModernBERT of 8,192 positions whose tokenizer file says 512, as one saved with a BERT tokenizer's."""
    directory = save_tiny_family(tmp_path_factory.mktemp("modernbert-8192"), "modernbert", max_position_embeddings=POSITIONS)
    settings = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps(settings | {"model_max_length": 512}))
    return directory


def test_the_models_own_limit_counts_less_what_its_family_reserves():
    modernbert, roberta, bert = (
        family_for("modernbert", "ModernBertModel"),
        family_for("roberta", "RobertaModel"),
        family_for("bert", "BertModel"),
    )
    assert usable_length(POSITIONS, modernbert) == POSITIONS
    assert usable_length(514, roberta) == 512 and usable_length(512, bert) == 512
    assert usable_length(POSITIONS, modernbert, requested=1000) == 1000
    with pytest.raises(InputError) as refused:
        usable_length(514, roberta, requested=513)
    assert refused.value.setting == "max_length"
    assert str(refused.value) == (
        "a maximum length of 513 tokens is more than this model takes (512: its 514 position embeddings less the 2 "
        "RoBERTa reserves); give at most 512"
    )
    with pytest.raises(InputError, match="too short; give at least 8"):
        usable_length(512, bert, requested=4)


def test_a_modernbert_takes_its_8192_positions_whatever_its_tokenizer_file_says(long_modernbert):
    model = bertscope.load(str(long_modernbert), device="cpu")
    assert model.max_length == POSITIONS and (model.info.model_limit, model.info.tokenizer_limit) == (POSITIONS, 512)
    encoding = model.encode(LONG)
    assert len(encoding) > 512 and encoding.truncated == 0  # was: "cut … to fit the model's maximum of 512"
    cut = bertscope.load(str(long_modernbert), device="cpu", max_length=300)
    assert cut.max_length == 300 and len(cut.encode(LONG)) == 300
    assert cut.encode(LONG).truncated == len(encoding) - 300


def test_info_says_the_limit_and_what_the_tokenizer_file_says(long_modernbert):
    def info(*flags: str) -> str:
        result = CliRunner().invoke(main, ["info", "-m", str(long_modernbert), *flags], catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return " ".join(result.stdout.split())

    assert "max tokens 8192 (the model's position embeddings; its tokenizer's file says 512: --max-length 512 cuts there)" in info()
    assert "max tokens 1000 (--max-length; the model takes 8192; its tokenizer's file says 512" in info("--max-length", "1000")
    data = json.loads(CliRunner().invoke(main, ["info", "-m", str(long_modernbert), "--json"]).stdout)
    assert (data["max_length"], data["model_limit"], data["tokenizer_limit"]) == (POSITIONS, POSITIONS, 512)


def test_max_length_cuts_the_input_of_a_command(long_modernbert):
    command = ["attention", LONG, "-l", "0", "-H", "0", "-m", str(long_modernbert), "--json"]
    whole = CliRunner().invoke(main, command, catch_exceptions=False)
    assert whole.exit_code == 0 and "cut" not in whole.stderr
    cut = CliRunner().invoke(main, [*command, "--max-length", "100"], catch_exceptions=False)
    assert len(json.loads(cut.stdout)["tokens"]) == 100
    assert f"cut {len(json.loads(whole.stdout)['tokens']) - 100} to fit the model's maximum of 100" in cut.stderr


def test_a_map_too_wide_for_the_terminal_shows_a_window_and_says_how_to_get_the_whole(long_modernbert):
    command = ["attention", LONG, "-l", "0", "-H", "0", "-m", str(long_modernbert)]
    terminal = CliRunner(env={"TTY_COMPATIBLE": "1", "COLUMNS": "80", "NO_COLOR": "1"}).invoke(main, command, catch_exceptions=False)
    assert terminal.exit_code == 0, terminal.stderr
    tokens = len(json.loads(CliRunner().invoke(main, [*command, "--json"]).stdout)["tokens"])
    lines = ESCAPES.sub("", terminal.stdout).splitlines()
    assert len(lines) < 100 and max(len(line) for line in lines) <= 80  # not the whole map's thousands of lines
    note = " ".join(" ".join(lines[-2:]).split())
    assert note.startswith("tokens 0–") and f"of {tokens:,} shown" in note and "--figure FILE" in note and "--csv or --json" in note
    csv = CliRunner().invoke(main, [*command, "--csv"], catch_exceptions=False)
    assert len(csv.stdout.splitlines()) == tokens + 1  # the header, and every row
    piped = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1"}).invoke(main, command, catch_exceptions=False)
    assert len(piped.stdout.splitlines()) > tokens and "shown" not in piped.stdout  # a file gets the whole drawing, as before


def test_mixing_maps_too_wide_for_the_terminal_show_the_same_window(long_modernbert):
    command = ["mixing", LONG, "--method", "attention", "-m", str(long_modernbert)]
    terminal = CliRunner(env={"TTY_COMPATIBLE": "1", "COLUMNS": "80", "NO_COLOR": "1"}).invoke(main, command, catch_exceptions=False)
    assert terminal.exit_code == 0, terminal.stderr
    text = ESCAPES.sub("", terminal.stdout)
    maps = text.count("(rolled out)") + text.count("· layer ")
    assert maps >= 5 and len(text.splitlines()) < 100 * maps and max(len(line) for line in text.splitlines()) <= 80
    assert "shown, as many as the terminal's width holds; the whole map: --figure FILE" in " ".join(text.split())
