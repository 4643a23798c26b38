"""What a command line test asserts: one line of error and status 2, and refusals made before torch is imported."""

from __future__ import annotations

import json
import subprocess
import sys

# Each command line of a JSON list in turn, in one fresh interpreter: what each printed, its status, and what had been
# imported by its end. Imports only accumulate, so a refusal that reports neither torch nor transformers imported
# neither, whatever ran before it.
RUN_EACH_AND_REPORT = """
import contextlib, io, json, sys
from bertscope.cli import main
for args in json.loads(sys.argv[1]):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main(args)
            code = 0
        except SystemExit as stop:
            code = stop.code
    imported = sorted({"torch", "transformers"} & set(sys.modules))
    print(json.dumps({"code": code, "imported": imported, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}))
"""


def assert_one_line_error(result, fragment: str):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("bertscope: error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""


def refusals(cases: list[list[str]]) -> dict[tuple[str, ...], dict]:
    """What `bertscope ARGS` did for each of `cases`, all run in one new interpreter (one start-up, not one each)."""
    done = subprocess.run([sys.executable, "-c", RUN_EACH_AND_REPORT, json.dumps(cases)], capture_output=True, text=True, timeout=300)
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(reports) == len(cases), done.stderr[-3000:]
    return {tuple(case): report for case, report in zip(cases, reports)}


def assert_a_refusal(report: dict, message: str) -> None:
    """Status 2, one line on stderr holding `message`, nothing on stdout, neither torch nor transformers imported."""
    lines = report["stderr"].splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertscope: error: ") and message in lines[0], report["stderr"]
    assert report["code"] == 2 and report["imported"] == [] and report["stdout"] == "", report


def assert_refused_before_torch(args, message: str) -> None:
    """`bertscope ARGS` alone in a new interpreter, held to `assert_a_refusal`."""
    args = [str(arg) for arg in args]
    assert_a_refusal(refusals([args])[tuple(args)], message)
