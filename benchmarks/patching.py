"""What activation patching costs, as a multiple of one forward pass of the same input.

    python benchmarks/patching.py [--device D] [--dtype float32] [--repeats 2] [--per-position] [-o FILE.json]

For an 18-token sentence pair (clean and corrupted differ in two words) on the bundled
MiniLM and on a bert-base-sized model with random weights (12 layers × 12 heads, hidden
768; weights do not change the timing), times in the same run:
- `forward_ms`: one bare transformers forward of the input (the unit);
- the heads sweep (every head at every position: L×H patched runs), the layers sweep (2L
  runs) and the layer × position sweep of the residual stream ((L+1)×T runs), and with
  `--per-position` the heads sweep with each head also at each position (L×H×(T+1) runs),
  each as milliseconds and as a ratio to the forward pass. The `preserve` metric is used,
  so no probe is trained.
The patched runs are rows of batches that start at the patched layer, so a sweep costs
about (runs × the layers above the patch) / (L × rows a forward pass can batch for free).
Best of `--repeats`. Prints JSON.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit, synchronise  # noqa: E402

CLEAN = "The keys to the old wooden cabinet in the hall are on the kitchen table."
CORRUPT = "The key to the old wooden cabinet in the hall is on the kitchen table."


def bert_base_directory(root: Path) -> Path:
    """A randomly initialised bert-base-sized BertModel with the bundled model's vocabulary, saved for loading."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from bertscope.model.model_files import bundled_model_dir

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
    )
    directory = root / "bert-base-random"
    BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def best_ms(action, device, repeats: int) -> float:
    action()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        synchronise(device)
        started = time.perf_counter()
        action()
        synchronise(device)
        best = min(best, time.perf_counter() - started)
    return best * 1e3


def measure(model_dir: str | None, name: str, device: str, dtype: str, repeats: int, per_position: bool) -> dict:
    import torch

    import bertscope
    from bertscope.analyses.patching import patch
    from bertscope.analyses.patching_results import PatchMetric

    session = bertscope.load(model_dir, device=device, dtype=dtype)
    encoding = session.encode(CLEAN)
    inputs = {
        "input_ids": torch.as_tensor(encoding.input_ids, device=session.device)[None],
        "token_type_ids": torch.as_tensor(encoding.token_type_ids, device=session.device)[None],
    }

    def forward():
        with torch.inference_mode():
            session.model.base_model(**inputs)

    def sweep(*names, per_position=False):
        return lambda: list(patch(session, CLEAN, CORRUPT, metric=PatchMetric("preserve"), sweeps=names, per_position=per_position))

    forward_ms = best_ms(forward, session.device, repeats)
    layers, heads, tokens = session.num_layers, session.num_heads, len(encoding)
    sweeps = {
        "heads": (sweep("heads"), layers * heads),
        "layers": (sweep("layers"), 2 * layers),
        "positions": (sweep("positions"), (layers + 1) * tokens),
    }
    if per_position:
        sweeps["heads_per_position"] = (sweep("heads", per_position=True), layers * heads * (tokens + 1))
    result = {"model": name, "layers": layers, "heads": heads, "tokens": tokens, "forward_ms": round(forward_ms, 3)}
    for key, (action, runs) in sweeps.items():
        elapsed = best_ms(action, session.device, repeats)
        result[key] = {"runs": runs, "ms": round(elapsed, 2), "ratio_to_forward": round(elapsed / forward_ms, 2)}
        print(f"{name}: {key} {elapsed:.0f} ms = {elapsed / forward_ms:.1f} forward passes", file=sys.stderr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--per-position", action="store_true", help="Also time each head patched at each position.")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        results = [
            measure(None, "all-MiniLM-L6-v2 (bundled)", args.device, args.dtype, args.repeats, args.per_position),
            measure(
                str(bert_base_directory(Path(root))),
                "bert-base-sized, random weights",
                args.device,
                args.dtype,
                args.repeats,
                args.per_position,
            ),
        ]
    summary = "; ".join(
        f"{r['model']}: forward {r['forward_ms']} ms, heads {r['heads']['ratio_to_forward']}x, "
        f"positions {r['positions']['ratio_to_forward']}x"
        for r in results
    )
    emit({"device": args.device, "dtype": args.dtype, "results": results}, args.output, summary)


if __name__ == "__main__":
    main()
