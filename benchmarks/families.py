"""Every encoder family at BERT-base size: the session's forward (with and without attention weights) against a
bare transformers forward in the same run (issue 30).

    python benchmarks/families.py [--families bert,distilbert,...] [--length 128] [--repeats 10]
                                  [--device cpu|cuda] [--dtype float32|bfloat16] [-o FILE.json]

For each family a random model of 12 layers × 12 heads × 768 (DistilBERT's 6 layers are
its real depth; ALBERT shares one layer 12 times; ModernBERT alternates local and global
layers as released) is built from its config with the tiny tokenizer of
tests/family_models.py, saved, and timed by forward_latency.py at one input length: the
session (`Session.forward`) against `AutoModel` (SDPA without weights where the family has
it, eager with them). Prints JSON; exit status 0 whatever the ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import emit  # benchmarks/common.py, found beside this script

BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
SIZES = {
    "bert": BASE,
    "distilbert": dict(dim=768, n_layers=6, n_heads=12, hidden_dim=3072),
    "albert": dict(BASE, embedding_size=128),
    "deberta-v2": BASE,
    "modernbert": dict(BASE, intermediate_size=1152, local_attention=128),
    "mpnet": BASE,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(SIZES))
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import forward_latency

    from tests.family_models import save_tiny_family

    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for family in args.families.split(","):
            directory = Path(scratch) / family
            if family == "bert":
                from tests.helpers.models import save_tiny

                save_tiny(directory, "BertModel", **BASE, max_position_embeddings=512)
            else:
                positions = {"mpnet": 514}.get(family, 512)
                save_tiny_family(directory, family, **SIZES[family], max_position_embeddings=positions)
            report = Path(scratch) / f"{family}.json"
            forward_latency.main(
                [
                    "--model",
                    str(directory),
                    "--lengths",
                    str(args.length),
                    "--repeats",
                    str(args.repeats),
                    "--device",
                    args.device,
                    "--dtype",
                    args.dtype,
                    "-o",
                    str(report),
                ]
            )
            found = json.loads(report.read_text())
            results[family] = {
                "family": found["model"]["family"],
                "max_abs_diff": found["max_abs_diff"],
                "results": found["results"],
                "load_average": found["load_average"],
            }
    summary = "\n".join(
        f"{family}: " + ", ".join(f"{'attn' if row['attentions'] else 'plain'} {row['ratio']:.2f}" for row in found["results"])
        for family, found in results.items()
    )
    emit(
        {
            "length": args.length,
            "repeats": args.repeats,
            "device": args.device,
            "dtype": args.dtype,
            "device_name": found["device_name"],
            "families": results,
        },
        args.output,
        summary,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/family_models.py
    main()
