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

import numpy as np

from common import emit  # benchmarks/common.py, found beside this script

VARIANTS = {"cpu-blas": ("cpu", "float32", "blas"), "cpu-onednn": ("cpu", "float32", "onednn"),
            "cuda": ("cuda", "float32", None), "cuda-bfloat16": ("cuda", "bfloat16", None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--tasks", default=None, help="comma-separated built-in sentence tasks (default: all)")
    parser.add_argument("--variants", default="cpu-blas,cpu-onednn")
    parser.add_argument("--sklearn", action="store_true")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import bertscope
    from bertscope.core.analyses import probes
    from bertscope.core.analyses.features import FeatureOptions, extract_features
    from bertscope.core.data.probing_tasks import TASKS
    from bertscope.core.progress import outcome

    tasks = args.tasks.split(",") if args.tasks else list(TASKS)
    variants = args.variants.split(",")
    sessions = {}
    for name in variants:
        device, dtype, linear = VARIANTS[name]
        sessions[name] = bertscope.load(args.model, device=device, dtype=dtype, cpu_linear=linear)
    results = []
    for task in tasks:
        data = bertscope.task_sentences(task)
        classes = sorted({sentence.label for sentence in data["train"]})
        y = {split: np.array([classes.index(s.label) for s in sentences]) for split, sentences in data.items()}
        entry = {"task": task, "variants": {}}
        first = None
        for name, session in sessions.items():
            started = time.perf_counter()
            X = {split: np.asarray(outcome(extract_features(session, sentences, FeatureOptions(), cache_dir=False), "f").X,
                                   dtype=np.float32) for split, sentences in data.items()}
            features_s = time.perf_counter() - started
            started = time.perf_counter()
            trained = probes.train_probes(X["train"], y["train"], X["dev"], y["dev"], num_classes=len(classes),
                                          device=session.device)
            fit_s = time.perf_counter() - started
            accuracy = probes.score(trained, X["test"], y["test"], len(classes)).accuracy
            row = {"accuracy": accuracy.round(6).tolist(), "l2": trained.l2.tolist(), "fit": list(trained.endings),
                   "numerics": session.numerics, "features_s": round(features_s, 3), "fit_s": round(fit_s, 3)}
            if first is None:
                first = (name, X, accuracy)
            else:
                row["largest_state_difference"] = float(max(np.abs(X[s] - first[1][s]).max() for s in X))
                row["test_sentences_apart"] = float(np.abs(accuracy - first[2]).max() * len(y["test"]))
            entry["variants"][name] = row
        if args.sklearn:
            entry["sklearn"] = scikit_learn(first[1], y, probes.L2_GRID).round(6).tolist()
            entry["sklearn_largest_gap"] = float(np.abs(np.array(entry["sklearn"]) - first[2]).max())
        results.append(entry)
        print(task, {name: row["accuracy"] for name, row in entry["variants"].items()}, entry.get("sklearn"), file=sys.stderr)
    summary = "\n".join(
        f"{entry['task']}: " + ", ".join(f"{name} {row.get('test_sentences_apart', 0):.0f} apart"
                                         for name, row in entry["variants"].items())
        + (f"; scikit-learn gap {entry['sklearn_largest_gap']:.3f}" if "sklearn_largest_gap" in entry else "")
        for entry in results)
    emit({"first_variant": variants[0], "tasks": results}, args.output, summary)


def scikit_learn(X: dict, y: dict, grid) -> np.ndarray:
    """StandardScaler + LogisticRegression per layer, C = 1 / (2 · l2 · N) chosen on dev by accuracy."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    accuracies = []
    for layer in range(X["train"].shape[1]):
        best = None
        for l2 in sorted((*grid, min(grid) / 10), reverse=True):
            pipeline = make_pipeline(StandardScaler(), LogisticRegression(C=1 / (2 * l2 * len(y["train"])), max_iter=5000))
            pipeline.fit(X["train"][:, layer], y["train"])
            dev = pipeline.score(X["dev"][:, layer], y["dev"])
            if best is None or dev > best[0]:
                best = (dev, pipeline)
        accuracies.append(best[1].score(X["test"][:, layer], y["test"]))
    return np.array(accuracies)


if __name__ == "__main__":
    main()
