"""Core errors speak of the analysis, the CLI of its flags (issue 16).

The explorer shows core errors to people who have no flags, so a core message naming one
(`--steps`) would send them looking for something that is not there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from bertscope.cli.common import error_line
from bertscope.core.errors import InputError, NoMLMHeadError

CORE = Path(__file__).resolve().parent.parent / "bertscope" / "core"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")


def strings_in(node: ast.AST) -> list[str]:
    return [part.value for part in ast.walk(node) if isinstance(part, ast.Constant) and isinstance(part.value, str)]


def test_no_core_error_or_note_names_a_flag():
    found = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            told = isinstance(node, ast.Raise) or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("append", "warn")
            )
            if told:
                found += [f"{path.name}:{node.lineno}: {text}" for text in strings_in(node) if FLAG.search(text)]
    assert found == []


def test_the_cli_names_the_flag_of_the_setting_at_fault():
    assert error_line(InputError("12 guesses asked for", setting="top")) == "12 guesses asked for (--top)"
    assert error_line(InputError("no such cache", setting="cache_dir")) == "no such cache (--cache-dir)"
    assert error_line(InputError("a probe decision needs a task", setting="probe")).endswith("(--probe TASK)")
    assert error_line(InputError("plain")) == "plain"
    advice = error_line(NoMLMHeadError("no masked-LM head", setting="model"))
    assert advice.startswith("no masked-LM head (--model); or use what works without one: `bertscope attribute")
