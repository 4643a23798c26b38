"""Ctrl-C in a command: one line and exit status 130 within a moment, whatever the process is doing.

Python's own handling of SIGINT fails a command in three places:

- before the command runs (importing the CLI and numpy, reading the flags) it prints a traceback
  of whatever was importing;
- inside a finalizer it is lost: the `regex` module's `Group.__del__` runs many times while
  transformers compiles its patterns at import, and an interrupt landing there prints
  `Exception ignored in: <function Group.__del__ ...> KeyboardInterrupt` and the command runs on
  to its end;
- after the line, the interpreter's teardown of torch and the model takes seconds.

`guard()`, called where the `bertscope` program starts, puts in a handler of its own. Inside a
command (`running`), an interrupt raises KeyboardInterrupt as Python's would, so the command
unwinds (a file being written is removed, `data/files.py`), the group says the one line
and the process ends there (`exit_interrupted`); an interrupt swallowed by a finalizer is raised
again; a second Ctrl-C, or an unwinding still going after `GRACE_S`, ends the process at once.
Outside a command, nothing is open: the line, and exit. A notebook or a test that imports the
CLI gets none of this; the explorer hands Ctrl-C back to Textual (`release`).
Standard library only, so it is in place before anything slow is imported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pathlib and typing's names cost milliseconds before the guard is in place
    from collections.abc import Iterator
    from types import CodeType, FrameType
    from typing import Any

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C
GRACE_S = 1.5  # how long an interrupted command may take to unwind before the process ends regardless
TERMINAL_RESET = "\r\x1b[2K\x1b[?25h"  # to the line's start, clear it, show the cursor
RETRY_S = 0.01  # the pause before an interrupt a finalizer lost is raised again


def line(command: str | None = None) -> str:
    """What an interrupted command says, once, on stderr."""
    what = f"{command} stopped" if command else "stopped"
    return f"bertscope: interrupted: {what} before it finished; no file was left half written"


class _State:
    guarded = False  # guard() was called: this process is the bertscope program
    command: str | None = None  # the command's name, for the line
    inside = False  # between the command's start and its end: an interrupt unwinds it
    unwinding = False  # an interrupt was raised inside the command, which is unwinding
    redeliver = False  # an interrupt was lost in a finalizer and is being raised again
    said = False  # the line was printed
    deadline = threading.Event()  # set at the first interrupt: the watchdog's countdown starts
    lost = threading.Event()  # set when a finalizer swallowed the interrupt: the watchdog raises it again
    previous_unraisable_hook: Any = None


def launched_as_program() -> bool:
    """True in the process that the `bertscope` script or `python -m bertscope` started; not a notebook's, not pytest's."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "bertscope.__main__":
        return True
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    return os.path.splitext(name)[0] in ("bertscope", "bertscope-script")


def guard() -> None:
    """Take over SIGINT for this process (the program's entry point calls this before anything slow is imported)."""
    if _State.guarded or threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, _on_interrupt)
    _State.previous_unraisable_hook = sys.unraisablehook
    sys.unraisablehook = _on_unraisable
    threading.Thread(target=_watchdog, name="bertscope-interrupt-watchdog", daemon=True).start()
    _State.guarded = True


def release() -> None:
    """Give Ctrl-C back to Python (the explorer: Textual reads it as a key, and must restore the terminal itself)."""
    if not _State.guarded:
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.unraisablehook = _State.previous_unraisable_hook
    _State.guarded = False


def naming(command: str) -> None:
    """The command about to run, which the line names."""
    _State.command = command


@contextlib.contextmanager
def running() -> Iterator[None]:
    """While a command runs, an interrupt unwinds it (the caller says the line, then calls `exit_interrupted`)."""
    _State.inside = True
    try:
        yield
    finally:
        _State.inside = False


def said() -> None:
    """The caller printed the line: the watchdog does not print it again."""
    _State.said = True


def exit_interrupted() -> None:
    """In the program, end now with status 130: nothing is left to do but the interpreter's teardown of torch
    (seconds). Elsewhere (the command called from a test), return, and the caller exits as usual."""
    if _State.guarded:
        _flush_and_exit()


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    if _State.redeliver:  # the interrupt a finalizer swallowed, raised again where it can unwind the command
        if _within(frame, _on_unraisable.__code__):  # still in the hook that heard of the loss: raised there, it is lost
            _State.lost.set()  # try again in a moment
            return
        _State.redeliver = False
        raise KeyboardInterrupt
    if not _State.inside or _State.unwinding:  # nothing to unwind, or a second Ctrl-C: end now
        _say_and_exit()
    _State.unwinding = True
    _State.deadline.set()
    raise KeyboardInterrupt


def _on_unraisable(unraisable: Any) -> None:
    """An interrupt raised inside a finalizer (`__del__`) is lost there: raise it again, and keep Python's
    `Exception ignored in ...` to itself."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _State.unwinding:
        _State.redeliver = True
        _State.lost.set()  # from another thread, so that it lands after the finalizer has returned
        return
    _State.previous_unraisable_hook(unraisable)


def _within(frame: FrameType | None, code: CodeType) -> bool:
    """Whether `frame` or one of its callers runs `code`."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _watchdog() -> None:
    """After the first interrupt: raise again each one a finalizer swallows, and end the process after `GRACE_S`."""
    _State.deadline.wait()
    end = time.monotonic() + GRACE_S
    while (left := end - time.monotonic()) > 0:
        if _State.lost.wait(left):
            _State.lost.clear()
            time.sleep(RETRY_S)  # the main thread leaves the finalizer that lost it
            _interrupt_main_thread()
    _say_and_exit()


def _interrupt_main_thread() -> None:
    """SIGINT to the main thread again, which runs `_on_interrupt` where it can unwind: a real signal where there are
    POSIX threads, so that a wait the main thread is in (a sleep, a lock) ends too."""
    if hasattr(signal, "pthread_kill"):
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
    else:
        import _thread

        _thread.interrupt_main(signal.SIGINT)


def _say_and_exit() -> None:
    """Print the line (unless said) and end the process: from a signal handler or the watchdog, so written to the
    file descriptor directly, never through a stream the interrupted code may be in the middle of writing. On a
    terminal, a spinner's or a bar's line is cleared first and the cursor they hid shown again."""
    if not _State.said:
        _State.said = True
        with contextlib.suppress(OSError):
            restore = TERMINAL_RESET if os.isatty(2) else ""
            os.write(2, (restore + line(_State.command) + "\n").encode())
    os._exit(EXIT_INTERRUPTED)


def _flush_and_exit() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe (`| head`) has nothing left to take
            stream.flush()
    os._exit(EXIT_INTERRUPTED)
