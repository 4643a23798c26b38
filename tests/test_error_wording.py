"""Core errors speak of the analysis, the CLI of its flags (issue 16).

The explorer shows core errors to people who have no flags, so a core message naming one
(`--steps`) would send them looking for something that is not there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from bertscope.base.errors import InputError, NoMLMHeadError
from bertscope.cli.common import error_line

CORE = Path(__file__).resolve().parent.parent / "bertscope" / "core"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")


def strings_in(node: ast.AST) -> list[str]:
    return [part.value for part in ast.walk(node) if isinstance(part, ast.Constant) and isinstance(part.value, str)]


def test_no_core_error_or_note_names_a_flag():
    found = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            told = isinstance(node, (ast.Raise, ast.Return)) or (  # a returned string is often a message too
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("append", "warn")
            )
            if told:
                found += [f"{path.name}:{node.lineno}: {text}" for text in strings_in(node) if FLAG.search(text)]
    assert found == []


def test_the_cli_names_the_flag_of_the_setting_at_fault():
    """Each command's own flag, as click declares it: one setting can be another flag in another command."""
    from bertscope.cli import main

    commands = main.commands
    assert error_line(InputError("12 guesses asked for", setting="top"), commands["fill"]) == "12 guesses asked for (--top)"
    assert error_line(InputError("no such cache", setting="cache_dir"), commands["probe"]).endswith("(--cache-dir DIR)")
    assert error_line(InputError("a probe decision needs a task", setting="probe"), commands["attribute"]).endswith("(--probe TASK)")
    assert error_line(InputError("no zeroed copy", setting="weights"), commands["prune"]).endswith("(--weights)")
    assert error_line(InputError("no sentences as conllu", setting="data_format"), commands["patterns"]).endswith("(--format)")
    assert error_line(InputError("no such cache", setting="cache_dir")) == "no such cache (--cache-dir)"  # no command
    assert error_line(InputError("plain")) == "plain"
    advice = error_line(NoMLMHeadError("no masked-LM head", setting="model"))
    assert advice.startswith("no masked-LM head (--model); or use what works without one: `bertscope attribute")


def test_a_command_line_error_names_that_commands_flag(tmp_path):
    """End to end: a text file read as CoNLL-U finds no sentences, and the line names `--format`, the flag of the
    setting (`data_format`), not `--data-format`."""
    from click.testing import CliRunner

    from bertscope.cli import main

    data = tmp_path / "plain.txt"
    data.write_text("just a sentence\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["patterns", "--data", str(data), "--format", "conllu"])
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("bertscope: error:") and line.endswith("(--format)"), line


def test_the_classification_objective_without_data_is_one_line_naming_data():
    """The API's check, made by the CLI before the model loads: the same words, and the command's flag."""
    from click.testing import CliRunner

    from bertscope.cli import main

    result = CliRunner().invoke(main, ["importance", "--objective", "classification"])
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert "needs labelled data" in line and line.endswith("(--data FILE)"), line
