"""Forward latency of the bertscope session against a bare transformers call.

For inputs of exactly 16, 64 and 256 tokens (special tokens included), with and without
attention weights, this times in the same run:

- `session`: `Session.forward(text, attentions=...)`, what a user of bertscope pays:
  tokenisation with word alignment, the forward pass through bertscope's attention
  function, and conversion of hidden states (and attentions) to numpy;
- `bare`: a plain `AutoModel` loaded from the same directory, inputs tokenised into
  tensors beforehand, timed as `model(**inputs, output_hidden_states=True,
  output_attentions=...)` under `torch.inference_mode()`. It runs SDPA when no weights
  are wanted and eager attention when they are (SDPA returns no weights in transformers 5).

Measurements are interleaved (session and bare alternate every repeat, in alternating
order) so that machine noise hits both alike. The JSON holds median and p90 in
milliseconds and the ratio session_median / bare_median per (length, attentions); the
budget is 1.2. Exit status 0 whatever the ratios: this is a measurement, not a test.

    python benchmarks/forward_latency.py --repeats 30 -o forward_latency.json
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from common import emit, synchronise  # benchmarks/common.py, found beside this script

BUDGET = 1.2
WORDS = (
    "the quick brown fox jumps over the lazy dog while a small bird sings in the old oak tree "
    "and children walk slowly to school along the river on a cold morning in early spring"
).split()
FILLER = "the"  # one word-piece in every BERT vocabulary we ship for


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model directory or cached name (default: the bundled model)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="where to run (default auto)")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "float16", "bfloat16"),
        help="weights' precision; the half precisions only on a GPU (default float32)",
    )
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per case and contender (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per case and contender first (default 3)")
    parser.add_argument("--lengths", default="16,64,256", help="token counts, special tokens included (default 16,64,256)")
    parser.add_argument("-o", "--output", type=Path, default=None, help="also write the JSON to this file (atomically)")
    args = parser.parse_args(argv)
    try:
        args.lengths = [int(item) for item in args.lengths.split(",") if item.strip()]
    except ValueError:
        parser.error(f"--lengths {args.lengths!r}: give token counts separated by commas, e.g. 16,64,256")
    if not args.lengths or any(length < 3 for length in args.lengths):
        parser.error("--lengths: every length must be at least 3 (two special tokens and a word)")
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be at least 1 and --warmup at least 0")
    return args


def text_of_length(session, length: int) -> str:
    """A sentence whose encoding (special tokens included) is exactly `length` tokens."""
    if length > session.max_length:
        raise ValueError(f"length {length} is over the model's maximum of {session.max_length} tokens")
    words: list[str] = []
    index = 0
    while True:
        candidate = words + [WORDS[index % len(WORDS)]]
        count = len(session.encode(" ".join(candidate)))
        if count == length:
            return " ".join(candidate)
        if count > length:
            break
        words = candidate
        index += 1
    # The next word splits into too many pieces: top up with a one-piece filler.
    while len(session.encode(" ".join(words))) < length:
        words.append(FILLER)
    text = " ".join(words)
    if len(session.encode(text)) != length:
        raise ValueError(f"could not build a text of exactly {length} tokens for this tokenizer")
    return text


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), as numpy's default."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(seconds: list[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {
        "median_ms": round(statistics.median(ms), 3),
        "p90_ms": round(percentile(ms, 90), 3),
        "min_ms": round(min(ms), 3),
    }


def cpu_name() -> str:
    """The CPU model as the OS names it (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    import torch
    import transformers
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    from bertscope.base.errors import InputError, ModelLoadError
    from bertscope.model.session import Session

    try:
        session = Session.open(args.model, device=args.device, dtype=args.dtype)
    except (InputError, ModelLoadError) as error:
        print(f"forward_latency: {error}", file=sys.stderr)
        return 2
    device = session.loaded.device
    on_cuda = device.type == "cuda"

    def sync() -> None:
        synchronise(device)

    try:
        texts = {length: text_of_length(session, length) for length in args.lengths}
    except ValueError as error:
        print(f"forward_latency: {error}", file=sys.stderr)
        return 2

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    bare, implementations = {}, {}
    for want_weights, implementation in ((False, "sdpa"), (True, "eager")):
        try:
            model = AutoModel.from_pretrained(
                session.loaded.directory, local_files_only=True, dtype=session.loaded.dtype, attn_implementation=implementation
            )
        except ValueError:  # DeBERTa, MPNet: no SDPA, their own eager code is all they run
            implementation = "eager"
            model = AutoModel.from_pretrained(
                session.loaded.directory, local_files_only=True, dtype=session.loaded.dtype, attn_implementation=implementation
            )
        bare[want_weights], implementations[want_weights] = model.to(device).eval(), implementation

    tensors = {}
    for length, text in texts.items():
        batch = session.loaded.family.inputs(dict(session.tokenizer(text, return_tensors="pt")))
        assert batch["input_ids"].shape[1] == length, (length, batch["input_ids"].shape)
        tensors[length] = {name: tensor.to(device) for name, tensor in batch.items()}

    def time_session(text: str, want_weights: bool) -> float:
        sync()
        start = time.perf_counter()
        session.forward(text, attentions=want_weights)
        sync()
        return time.perf_counter() - start

    def time_bare(inputs: dict, want_weights: bool) -> float:
        model = bare[want_weights]
        sync()
        start = time.perf_counter()
        with torch.inference_mode():
            model(**inputs, output_hidden_states=True, output_attentions=want_weights)
        sync()
        return time.perf_counter() - start

    # Both contenders must compute the same thing: check before timing anything.
    agreement = {}
    for length in args.lengths:
        for want_weights in (False, True):
            result = session.forward(texts[length], attentions=want_weights)
            with torch.inference_mode():
                outputs = bare[want_weights](**tensors[length], output_hidden_states=True, output_attentions=want_weights)
            hidden = torch.stack(outputs.hidden_states)[:, 0].float().cpu().numpy()
            diff = float(abs(result.hidden_states - hidden).max())
            if want_weights:
                weights = torch.stack(outputs.attentions)[:, 0].float().cpu().numpy()
                diff = max(diff, float(abs(result.attentions - weights).max()))
            agreement[f"{length}/{'attn' if want_weights else 'noattn'}"] = diff

    cases = [(length, want_weights) for length in args.lengths for want_weights in (False, True)]
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    for length, want_weights in cases:
        for _ in range(args.warmup):
            time_session(texts[length], want_weights)
            time_bare(tensors[length], want_weights)

    times = {case: {"session": [], "bare": []} for case in cases}
    for repeat in range(args.repeats):
        for length, want_weights in cases:
            record = times[(length, want_weights)]
            order = ("session", "bare") if repeat % 2 == 0 else ("bare", "session")
            for contender in order:
                if contender == "session":
                    record["session"].append(time_session(texts[length], want_weights))
                else:
                    record["bare"].append(time_bare(tensors[length], want_weights))

    results = []
    for length, want_weights in cases:
        record = times[(length, want_weights)]
        session_stats, bare_stats = summary(record["session"]), summary(record["bare"])
        results.append(
            {
                "length": length,
                "attentions": want_weights,
                "session": session_stats,
                "bare": bare_stats,
                "bare_attn_implementation": implementations[want_weights],
                "ratio": round(session_stats["median_ms"] / bare_stats["median_ms"], 3),
            }
        )
    within = all(row["ratio"] <= BUDGET for row in results)
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    report = {
        "benchmark": "forward_latency",
        "model": session.info.as_dict(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if on_cuda else cpu_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        # 1-minute load average before and after timing: other work on the machine shows here.
        "load_average": {
            "before": round(load_before[0], 2) if load_before else None,
            "after": round(load_after[0], 2) if load_after else None,
        },
        "repeats": args.repeats,
        "warmup": args.warmup,
        "lengths": args.lengths,
        "max_abs_diff": agreement,
        # What the session computes beyond the bare encoder (a head counts against its ratio).
        "session_extra_outputs": [
            name
            for name, present in (
                ("mlm_logits", session.mlm_head is not None),
                ("class_logits", session.is_classifier),
            )
            if present
        ],
        "results": results,
        "budget": BUDGET,
        "within_budget": within,
    }
    ratios = ", ".join(f"{row['length']}{'+attn' if row['attentions'] else ''}: {row['ratio']:.2f}" for row in results)
    verdict = "within" if within else "OVER"
    emit(report, args.output, f"forward_latency: session/bare median ratio {ratios} ({verdict} budget {BUDGET}) on {device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
