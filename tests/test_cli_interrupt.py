"""Ctrl-C at any moment of a command: one line, exit status 130, within a moment (bertscope.cli.interrupts).

The real program runs in a process of its own (`python -m bertscope`) and gets a real SIGINT: while it
imports the command line, while torch and transformers import and the model loads, and once it reads
its corpus. A Ctrl-C a finalizer swallows (the `regex` module's `Group.__del__`, where transformers'
imports lose one by chance) is made to happen on purpose in a small script of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ONE_LINE = "interrupted: {}stopped before it finished; no file was left half written"
QUICK_S = 3.0  # from the signal to the end of the process, with room for a busy machine


def interrupted(process: subprocess.Popen) -> tuple[float, str, str]:
    """Send SIGINT; (seconds until the process ended, its stderr, what was left of its stdout)."""
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    try:
        stdout, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"still running 30 s after Ctrl-C: {stderr[-400:]}")
    return time.monotonic() - sent, stderr, stdout


def assert_one_line(process: subprocess.Popen, seconds: float, stderr: str, command: str | None) -> None:
    assert process.returncode == 130, stderr
    assert seconds < QUICK_S, (seconds, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0] in {f"bertscope: {ONE_LINE.format('')}", f"bertscope: {ONE_LINE.format(f'{command} ')}"}, stderr


def has_open(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open (Linux's /proc)."""
    folder = Path(f"/proc/{pid}/fd")
    try:
        return any(os.path.realpath(link) == str(path) for link in folder.iterdir())
    except (FileNotFoundError, PermissionError):  # a descriptor closed while looked at
        return False


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory) -> Path:
    """More sentences than the tiny model gets through in minutes."""
    path = tmp_path_factory.mktemp("interrupt") / "big.txt"
    path.write_text("The keys to the cabinet are on the table, and the cat sleeps under it.\n" * 200_000)
    return path.resolve()


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bertscope", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("after_s", [0.3, 1.0, 2.5])
def test_ctrl_c_while_starting_says_one_line_and_exits_130(after_s, big_corpus, tiny_bert_dir):
    """While the command line, numpy, torch and transformers import and the model loads: at 0.3 s Python's
    own handling printed a traceback from the middle of an import."""
    process = start("patterns", "--data", str(big_corpus), "-m", str(tiny_bert_dir), "--json")
    time.sleep(after_s)
    assert process.poll() is None, "it ended before the interrupt"
    seconds, stderr, _ = interrupted(process)
    assert_one_line(process, seconds, stderr, "patterns")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the corpus file open")
def test_ctrl_c_during_the_run_names_the_command_and_leaves_no_file(big_corpus, tiny_bert_dir, tmp_path):
    output = tmp_path / "out.json"
    process = start("patterns", "--data", str(big_corpus), "-m", str(tiny_bert_dir), "--json", "-o", str(output))
    deadline = time.monotonic() + 120
    while not has_open(process.pid, big_corpus):  # the corpus is read once the model is loaded: the run has begun
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read() if process.stderr else ""
        time.sleep(0.05)
    seconds, stderr, _ = interrupted(process)
    assert_one_line(process, seconds, stderr, "patterns")
    assert stderr.startswith("bertscope: interrupted: patterns stopped")
    assert list(tmp_path.iterdir()) == []  # neither the output nor its temporary file


SWALLOWED = """
import sys, time
from bertscope.cli import interrupts

interrupts.guard()


class SlowToFree:
    def __del__(self):
        time.sleep(5)  # the interrupt arrives here: Python prints "Exception ignored in ..." and goes on


with interrupts.running():
    try:
        print("ready", flush=True)
        SlowToFree()
        time.sleep(20)
        print("ran to the end", flush=True)
    except KeyboardInterrupt:
        print("unwound", flush=True)
        interrupts.said()
        print(interrupts.line("demo"), file=sys.stderr)
        interrupts.exit_interrupted()
"""


def test_a_ctrl_c_a_finalizer_swallows_is_raised_again():
    """The interrupt lands in a `__del__`, which loses it; the command still unwinds (its own except runs), at once,
    and Python's `Exception ignored in ...` is not printed."""
    process = subprocess.Popen([sys.executable, "-c", SWALLOWED], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    time.sleep(0.3)
    seconds, stderr, stdout = interrupted(process)
    assert process.returncode == 130 and seconds < QUICK_S
    assert stderr.splitlines() == [f"bertscope: {ONE_LINE.format('demo ')}"]
    assert stdout == "unwound\n"


def test_a_library_import_leaves_ctrl_c_to_python():
    """A notebook or a test that imports the command line keeps Python's KeyboardInterrupt."""
    code = "import signal, bertscope.cli; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
