"""What a command line test asserts: one line of error and status 2, and refusals made before torch is imported."""

from __future__ import annotations

import json
import subprocess
import sys

RUN_AND_REPORT = """
import json, sys
from bertscope.cli import main
try:
    main(sys.argv[1:])
    code = 0
except SystemExit as stop:
    code = stop.code
print(json.dumps({"code": code, "imported": sorted({"torch", "transformers"} & set(sys.modules))}))
"""


def assert_one_line_error(result, fragment: str):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("bertscope: error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""


def bertscope(*args: str) -> tuple[dict, str, str]:
    """(exit status and heavy imports, stdout before the report, stderr) of `bertscope ARGS` in a new process."""
    done = subprocess.run([sys.executable, "-c", RUN_AND_REPORT, *args], capture_output=True, text=True, timeout=120)
    *printed, report = done.stdout.splitlines() or [""]
    assert report.startswith("{"), done.stderr
    return json.loads(report), "\n".join(printed), done.stderr


def assert_refused_before_torch(args, message: str) -> None:
    """Status 2, one line on stderr holding `message`, nothing on stdout, neither torch nor transformers imported."""
    report, printed, stderr = bertscope(*args)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertscope: error: ") and message in lines[0], stderr
    assert report == {"code": 2, "imported": []} and printed == ""
