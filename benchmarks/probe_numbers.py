"""Probe numbers across arithmetic: every built-in sentence task's per-layer accuracy on each CPU kernel path, on the
GPU, and against a scikit-learn pipeline (issue 34).

    python benchmarks/probe_numbers.py [--model M] [--tasks bigram_shift,...] [--variants cpu-blas,cpu-onednn,cuda]
                                       [--sklearn] [-o FILE.json]

For each task (the CLI's generated sets: 2,000 / 400 / 400 sentences, [CLS] features of every
layer): the features are taken once per variant (`cpu-blas`, `cpu-onednn`: the CPU's two
linear kernel paths; `cuda`, `cuda-bfloat16`: the GPU in float32 or bfloat16), bertscope's
linear probes are trained on each (`probes.train_probes`, as `bertscope probe` trains them),
and each variant's accuracies are compared with the first's, in test sentences. `--sklearn`
adds the reference of tests/test_probe_numbers.py on the first variant's features:
StandardScaler + LogisticRegression, C chosen on dev by accuracy over bertscope's L2 grid and a
decade weaker (minutes per task on 2 cores). Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from common import emit  # benchmarks/common.py, found beside this script

VARIANTS = {
    "cpu-blas": ("cpu", "float32", "blas"),
    "cpu-onednn": ("cpu", "float32", "onednn"),
    "cuda": ("cuda", "float32", None),
    "cuda-bfloat16": ("cuda", "bfloat16", None),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--tasks", default=None, help="comma-separated built-in sentence tasks (default: all)")
    parser.add_argument("--variants", default="cpu-blas,cpu-onednn")
    parser.add_argument("--sklearn", action="store_true")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import bertscope
    from bertscope.analyses.probing import probes
    from bertscope.data.probing_tasks import TASKS
    from tests.helpers.probes import bertscope_accuracy, cls_features, labelled, scikit_learn_accuracy

    tasks = args.tasks.split(",") if args.tasks else list(TASKS)
    variants = args.variants.split(",")
    sessions = {}
    for name in variants:
        device, dtype, linear = VARIANTS[name]
        sessions[name] = bertscope.load(args.model, device=device, dtype=dtype, cpu_linear=linear)
    results = []
    for task in tasks:
        data, y, num_classes = labelled(task)
        entry = {"task": task, "variants": {}}
        first = None
        for name, session in sessions.items():
            started = time.perf_counter()
            X = cls_features(session, data)
            features_s = time.perf_counter() - started
            started = time.perf_counter()
            accuracy, trained = bertscope_accuracy(X, y, num_classes, device=session.device)  # scoring included
            fit_s = time.perf_counter() - started
            row = {
                "accuracy": accuracy.round(6).tolist(),
                "l2": trained.l2.tolist(),
                "fit": list(trained.endings),
                "numerics": session.numerics,
                "features_s": round(features_s, 3),
                "fit_s": round(fit_s, 3),
            }
            if first is None:
                first = (name, X, accuracy)
            else:
                row["largest_state_difference"] = float(max(np.abs(X[s] - first[1][s]).max() for s in X))
                row["test_sentences_apart"] = float(np.abs(accuracy - first[2]).max() * len(y["test"]))
            entry["variants"][name] = row
        if args.sklearn:
            # bertscope's grid and a decade weaker, so that a grid too narrow to reach the best would show
            entry["sklearn"] = scikit_learn_accuracy(first[1], y, (*probes.L2_GRID, min(probes.L2_GRID) / 10)).round(6).tolist()
            entry["sklearn_largest_gap"] = float(np.abs(np.array(entry["sklearn"]) - first[2]).max())
        results.append(entry)
        print(task, {name: row["accuracy"] for name, row in entry["variants"].items()}, entry.get("sklearn"), file=sys.stderr)
    summary = "\n".join(
        f"{entry['task']}: "
        + ", ".join(f"{name} {row.get('test_sentences_apart', 0):.0f} apart" for name, row in entry["variants"].items())
        + (f"; scikit-learn gap {entry['sklearn_largest_gap']:.3f}" if "sklearn_largest_gap" in entry else "")
        for entry in results
    )
    emit({"first_variant": variants[0], "tasks": results}, args.output, summary)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' probe helpers and reference
    main()
