"""Peak memory of `bertscope attention` on a long ModernBERT input, against bare forwards (issue 30).

    python benchmarks/long_input.py [--tokens 2000] [--layers 22] [--device cpu|cuda] [-o FILE.json]

A random ModernBERT of base size (22 layers × 12 heads × 768, local layers ±64 tokens,
8,192 positions) with the tiny BPE tokenizer of tests/family_models.py; a text of
`--tokens` tokens. Each contender runs in a fresh process and reports its own peak
resident memory (ru_maxrss): `attention` (the command, one layer's maps kept: H·T²),
`export` (every layer's maps and norms written to the .npz, one layer in memory at a time),
the explorer (headless, 160×48: its first screen, a move to the next layer, to the next head,
and a head switched off; only the shown layer's maps held),
a bare SDPA forward (no weights), and a bare eager forward with `output_attentions=True`
(every layer's maps: L·H·T², what holding them all would cost). Prints JSON.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from common import emit  # benchmarks/common.py, found beside this script

BARE = """
import resource, sys, time, torch, transformers
directory, text, implementation, device = sys.argv[1:5]
tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
model = transformers.AutoModel.from_pretrained(directory, attn_implementation=implementation).eval().to(device)
inputs = {name: tensor.to(device) for name, tensor in tokenizer(text, return_tensors="pt").items() if name != "token_type_ids"}
start = time.perf_counter()
with torch.inference_mode():
    model(**inputs, output_attentions=implementation == "eager")
gpu = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, gpu)
"""

COMMAND = """
import resource, sys, time, torch
from click.testing import CliRunner
from bertscope.cli import main
directory, text, command, device = sys.argv[1:5]
start = time.perf_counter()
arguments = {"attention": ["attention", text, "-l", "1", "-H", "0", "--json"],
             "export": ["export", text, "-o", directory + "/export.npz"]}[command]
result = CliRunner().invoke(main, [*arguments, "-m", directory, "--device", device])
assert result.exit_code == 0, result.output[-500:]
gpu = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, gpu)
"""

EXPLORER = """
import asyncio, resource, sys, time
from textual.worker import WorkerCancelled
from bertscope.api import load
from bertscope.session_backend import SessionBackend
from bertscope.ui.app import ExplorerApp
directory, text, _, device = sys.argv[1:5]
start = time.perf_counter()
app = ExplorerApp(lambda report: SessionBackend(load(directory, device=device)), text=text)
times = {}

async def settle(pilot):
    for _ in range(3):
        try:
            await app.workers.wait_for_complete()
        except WorkerCancelled:
            pass
        await pilot.pause()

async def go():
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        times["first screen"] = time.perf_counter() - start
        for name, key in (("next layer", "down"), ("next head", "right"), ("mask a head", "space")):
            begun = time.perf_counter()
            await pilot.press(key)
            await settle(pilot)
            times[name] = time.perf_counter() - begun
        assert app.main_screen.analysis is not None and app.state.mask == "1:1", app.state.mask
        times["holds every layer"] = float(app.main_screen.analysis.every_layer)

asyncio.run(go())
gpu = __import__("torch").cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0
print("steps", *(f"{name.replace(' ', '_')}={seconds:.2f}" for name, seconds in times.items()))
print(times["first screen"], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, gpu)
"""


def on_the_gpu(row: dict) -> str:
    return f" host, {row['gpu_peak_mb']:d} MB GPU" if "gpu_peak_mb" in row else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--layers", type=int, default=22)
    parser.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="where the model runs; on cuda each contender also reports its peak GPU memory",
    )
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import bertscope
    from tests.family_models import save_tiny_family

    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        directory = save_tiny_family(
            Path(scratch) / "modernbert",
            "modernbert",
            hidden_size=768,
            num_hidden_layers=args.layers,
            num_attention_heads=12,
            intermediate_size=1152,
            local_attention=128,
            max_position_embeddings=8192,
        )
        session = bertscope.load(str(directory), device="cpu")
        words = "the cat sat on the mat and the dog slept near the window".split()
        while len(session.encode(" ".join(words))) < args.tokens:
            words.extend(words[:12])
        while len(session.encode(" ".join(words))) > args.tokens:
            words.pop()
        text = " ".join(words)
        length = len(session.encode(text))
        del session
        for name, script, extra in (
            ("attention command", COMMAND, ["attention"]),
            ("export command", COMMAND, ["export"]),
            ("explorer", EXPLORER, ["explore"]),
            ("bare sdpa, no weights", BARE, ["sdpa"]),
            ("bare eager, every layer's weights", BARE, ["eager"]),
        ):
            done = subprocess.run(
                [sys.executable, "-c", script, str(directory), text, *extra, args.device],
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).resolve().parent.parent,
            )
            seconds, peak, gpu_peak = map(float, done.stdout.split()[-3:])
            results[name] = {"seconds": round(seconds, 2), "peak_mb": round(peak)}
            if script is EXPLORER:  # seconds to each screen
                steps = next(line for line in done.stdout.splitlines() if line.startswith("steps "))
                results[name]["steps"] = {key: float(value) for key, value in (item.split("=") for item in steps.split()[1:])}
            if args.device == "cuda":
                results[name]["gpu_peak_mb"] = round(gpu_peak)
    summary = ", ".join(f"{name}: {row['peak_mb']} MB{on_the_gpu(row)} ({row['seconds']} s)" for name, row in results.items())
    emit(
        {"tokens": length, "layers": args.layers, "heads": 12, "hidden": 768, "device": args.device, "results": results},
        args.output,
        summary,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/family_models.py
    main()
