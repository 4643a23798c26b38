"""Structural probe numbers across arithmetic and seeds: how far Hewitt & Manning's distance probe moves with the CPU
kernel path, the GPU, the features' storage precision and the training seed (issue 34).

    python benchmarks/structural_numbers.py --data TRAIN.conllu [--dev DEV.conllu] [--test TEST.conllu]
        [--limit N] [--model M] [--variants cpu-blas,cpu-onednn,cuda] [--precisions float32,auto] [--seeds 0,1,2]
        [-o FILE.json]

Splits as `bertscope probe --task distance` makes them. Word features are taken once per variant and
precision (`float32`, as the probe stores them; `auto`, float16 where a linear probe loses nothing, as
before issue 34), then the probes are trained (`train_structural_probes`, the CLI's settings) for
each seed and scored on test. Every run is compared with the first variant's at the same
precision and seed: the largest per-layer difference in UUAS and Spearman; and each variant and
precision's seeds with each other: the largest per-layer range. Prints JSON; exit status 0
whatever the numbers.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from common import emit  # benchmarks/common.py, found beside this script
from probe_numbers import VARIANTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--dev", default=None)
    parser.add_argument("--test", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--variants", default="cpu-blas,cpu-onednn")
    parser.add_argument("--precisions", default="float32,auto")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import bertscope
    from bertscope.analyses.probing import structural
    from bertscope.analyses.probing.features import FeatureOptions, extract_features
    from bertscope.analyses.probing.run import _whole_trees
    from bertscope.base.progress import outcome

    splits = bertscope.task_sentences("distance", data=args.data, dev=args.dev, test=args.test, limit=args.limit)
    seeds = [int(seed) for seed in args.seeds.split(",")]
    runs, reference = [], {}
    for variant in args.variants.split(","):
        device, dtype, linear = VARIANTS[variant]
        session = bertscope.load(args.model, device=device, dtype=dtype, cpu_linear=linear)
        for precision in args.precisions.split(","):
            options = FeatureOptions(level="word", precision=precision)
            started = time.perf_counter()
            data = {
                name: _whole_trees(sentences, outcome(extract_features(session, sentences, options, cache_dir=False)))
                for name, sentences in splits.items()
            }
            features_s = time.perf_counter() - started
            for seed in seeds:
                started = time.perf_counter()
                probes = structural.train_structural_probes(*data["train"][:3], *data["dev"][:3], device=session.device, seed=seed)
                scores = structural.score_structural(probes, *data["test"][:3], skip=data["test"][3], device=session.device)
                run = {
                    "variant": variant,
                    "precision": precision,
                    "stored": str(data["train"][0].dtype),
                    "seed": seed,
                    "uuas": scores.uuas.round(6).tolist(),
                    "spearman": scores.spearman.round(6).tolist(),
                    "epochs": probes.distance_epoch.tolist(),
                    "fit": list(probes.distance_endings),
                    "features_s": round(features_s, 3),
                    "fit_s": round(time.perf_counter() - started, 3),
                }
                first = reference.setdefault((precision, seed), run)
                for metric in ("uuas", "spearman"):
                    run[f"{metric}_largest_difference"] = float(np.abs(np.subtract(run[metric], first[metric])).max())
                print(variant, precision, seed, run["uuas"], file=sys.stderr)
                runs.append(run)
    seed_ranges = []
    for variant, precision in dict.fromkeys((run["variant"], run["precision"]) for run in runs):
        same = [run for run in runs if (run["variant"], run["precision"]) == (variant, precision)]
        seed_ranges.append(
            {"variant": variant, "precision": precision}
            | {metric: float(np.ptp([run[metric] for run in same], axis=0).max()) for metric in ("uuas", "spearman")}
        )
    counts = {name: len(sentences) for name, sentences in splits.items()}
    summary = "\n".join(
        [
            f"{run['variant']} {run['precision']} seed {run['seed']}: UUAS ±{run['uuas_largest_difference']:.4f}, "
            f"Spearman ±{run['spearman_largest_difference']:.4f} from {runs[0]['variant']}"
            for run in runs
        ]
        + [
            f"{row['variant']} {row['precision']} across seeds: UUAS {row['uuas']:.4f}, Spearman {row['spearman']:.4f}"
            for row in seed_ranges
        ]
    )
    emit({"data": args.data, "sentences": counts, "runs": runs, "seed_ranges": seed_ranges}, args.output, summary)


if __name__ == "__main__":
    main()
