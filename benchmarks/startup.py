"""Start-up: the explorer to its first heatmap, against importing torch and transformers and loading the model (issue 36).

    python benchmarks/startup.py [--runs 3] [--model DIR] [-o FILE.json]

Each contender runs in a fresh interpreter, timed from the parent's clock before the start to the line the child
prints when it is done:
- `explorer`: what `bertscope` runs (the command line's module, the imports `explore` starts on a thread, its app and
  its backend loading the model in a worker thread), headless at 120x40, on its example sentence (the README's first example, a bare
  `bertscope`), until that sentence's heatmap is painted; also the first frame (drawn before the model is ready);
- `bare`: `import torch, transformers`, then the tokenizer and `AutoModel.from_pretrained` of the same model.
Runs alternate, best of --runs each; the ratio is explorer / bare (budget 1.3). Prints JSON; exit status 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from common import emit  # benchmarks/common.py, found beside this script

EXPLORER = r"""
import sys, time
started = float(sys.argv[1])
import asyncio
from bertscope.cli.attention import import_model_code  # the command `bertscope` runs: its imports, then as it starts
from bertscope.base import collector
starting = collector.Pause()
import_model_code()
from bertscope.ui.app import ExplorerApp
from bertscope.ui.main_screen import MainScreen

marks = {}
painted = asyncio.Event()

class Timed(MainScreen):
    def _analysed(self, progress):
        super()._analysed(progress)
        self.app.call_after_refresh(lambda: (marks.setdefault("heatmap", time.time()), painted.set()))

class App(ExplorerApp):
    def get_default_screen(self):
        return Timed(id="_default")

    def on_mount(self):
        self.call_after_refresh(lambda: marks.setdefault("frame", time.time()))

def open_backend(report):
    try:
        from bertscope.api import load
        from bertscope.session_backend import SessionBackend
        return SessionBackend(load(sys.argv[2] or None))
    finally:
        starting.end()

async def run():
    app = App(open_backend, glyphs=False)
    async with app.run_test(size=(120, 40)):
        await asyncio.wait_for(painted.wait(), 120)

asyncio.run(run())
print({"frame_s": marks["frame"] - started, "heatmap_s": marks["heatmap"] - started})
"""

BARE = r"""
import sys, time
started = float(sys.argv[1])
import torch, transformers
from transformers import AutoModel, AutoTokenizer
from bertscope.model.model_files import bundled_model_dir
directory = sys.argv[2] or str(bundled_model_dir())
AutoTokenizer.from_pretrained(directory)
AutoModel.from_pretrained(directory)
print({"loaded_s": time.time() - started})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model", default="")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    explorer, bare = [], []
    for _ in range(args.runs):
        explorer.append(child(EXPLORER, args.model))
        bare.append(child(BARE, args.model))
    heatmap = min(run["heatmap_s"] for run in explorer)
    loaded = min(run["loaded_s"] for run in bare)
    result = {
        "benchmark": "startup",
        "model": args.model or "bundled all-MiniLM-L6-v2",
        "explorer_first_frame_s": round(min(run["frame_s"] for run in explorer), 2),
        "explorer_first_heatmap_s": round(heatmap, 2),
        "bare_import_and_load_s": round(loaded, 2),
        "ratio": round(heatmap / loaded, 2),
        "budget": 1.3,
        "explorer_runs": [{key: round(value, 2) for key, value in run.items()} for run in explorer],
        "bare_runs_s": [round(run["loaded_s"], 2) for run in bare],
        "load_average": round(os.getloadavg()[0], 2),
    }
    emit(
        result,
        args.output,
        f"startup: first frame {result['explorer_first_frame_s']}s, first heatmap {heatmap:.2f}s, "
        f"torch + transformers + model {loaded:.2f}s: {result['ratio']}x (budget 1.3)",
    )


def child(script: str, model: str) -> dict:
    """Run `script` in a fresh interpreter; its last line of output, a dict of seconds since the parent's clock."""
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, repr(time.time()), model], capture_output=True, text=True, timeout=300, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))


if __name__ == "__main__":
    main()
