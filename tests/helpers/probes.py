"""Probe references: features as `probe` takes them, and the scikit-learn pipeline a probe's accuracy is held to.

tests/test_probe_numbers.py, tests/test_cuda.py and benchmarks/probe_numbers.py read them.
"""

from __future__ import annotations

import numpy as np

import bertscope
from bertscope.analyses.probing import probes
from bertscope.analyses.probing.features import FeatureOptions, extract_features
from bertscope.analyses.probing.results import ProbeReport
from bertscope.base.progress import outcome

# The reference's penalties: bertscope's grid as scikit-learn's C (C = 1 / (2 · l2 · N)). benchmarks/probe_numbers.py
# adds a decade weaker (the slowest fits), so that a grid too narrow to reach the representation's best would show.
REFERENCE_L2 = probes.L2_GRID


def features_of(session, sentences, options=None, batch_size=None):
    options = FeatureOptions() if options is None else options
    return outcome(extract_features(session, sentences, options, cache_dir=False, batch_size=batch_size), "features")


def cls_features(session, data: dict, batch_size=None) -> dict:
    """Every split's [CLS] features of every layer, float32, as `probe` takes them (`task_sentences`' splits)."""
    return {name: np.asarray(features_of(session, split, batch_size=batch_size).X, dtype=np.float32) for name, split in data.items()}


def labelled(task: str):
    """A task's splits as `probe` makes them (`bertscope.task_sentences`) and integer labels over the train classes."""
    data = bertscope.task_sentences(task)
    classes = sorted({sentence.label for sentence in data["train"]})
    labels = {name: np.array([classes.index(s.label) for s in split]) for name, split in data.items()}
    return data, labels, len(classes)


def scikit_learn_accuracy(X: dict, y: dict, grid=REFERENCE_L2, layers=None) -> np.ndarray:
    """Per layer (each of `layers`; None: every one): StandardScaler + LogisticRegression, C = 1 / (2 · l2 · N) for each
    l2 of `grid` chosen on dev (the best dev accuracy, ties to the smaller C), scored on test.
    benchmarks/probe_numbers.py calls it too, on every layer."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    accuracies = []
    for layer in range(X["train"].shape[1]) if layers is None else layers:
        best = None
        for l2 in sorted(grid, reverse=True):
            pipeline = make_pipeline(StandardScaler(), LogisticRegression(C=1 / (2 * l2 * len(y["train"])), max_iter=5000))
            pipeline.fit(X["train"][:, layer], y["train"])
            dev = pipeline.score(X["dev"][:, layer], y["dev"])
            if best is None or dev > best[0]:
                best = (dev, pipeline)
        accuracies.append(best[1].score(X["test"][:, layer], y["test"]))
    return np.array(accuracies)


def bertscope_accuracy(X: dict, y: dict, num_classes: int, device="cpu") -> tuple[np.ndarray, probes.TrainedProbes]:
    """Per layer test accuracy of bertscope's linear probes, trained as `bertscope probe` trains them, and the probes."""
    trained = probes.train_probes(X["train"], y["train"], X["dev"], y["dev"], num_classes=num_classes, device=device)
    return probes.score(trained, X["test"], y["test"], num_classes).accuracy, trained


def report_with_every_column(mdl: bool) -> ProbeReport:
    """A report with every column a table can have: f1, fit, both baselines, selectivity and both codes."""
    layers = []
    for layer in range(13):
        entry = {
            "layer": layer,
            "accuracy": 0.9 + layer / 200,
            "f1": 0.85,
            "l2": 0.1,
            "fit": "converged" if layer else "iteration limit",
            "random_init_accuracy": 0.812,
            "control_accuracy": 0.734,
            "selectivity": 0.166 + layer / 200,
        }
        if mdl:
            entry["mdl"] = {
                "online_bits": 12345.6 - layer,
                "uniform_bits": 60000.0,
                "compression": 4.86,
                "control": {"online_bits": 23456.7, "uniform_bits": 60000.0, "compression": 2.557},
            }
        layers.append(entry)
    return ProbeReport(
        task="upos",
        metric="accuracy",
        layers=layers,
        best_layer=12,
        center_of_gravity=5.1,
        baselines={"majority": 0.19, "random_init": 0.812, "control_best": 0.74},
        counts={"train": 9000, "dev": 900, "test": 900, "classes": 17, "unit": "words"},
        mdl={"examples": 9000, "unit": "words", "block_ends": [1] * 10, "order": "shuffled"} if mdl else {},
    )
