"""Layer-wise probing: what each layer knows (Conneau et al. 2018; Jawahar, Tenney, Hewitt et al. 2019).

A run takes features of every hidden-state layer (0 = embeddings) in one forward pass per
batch, trains one probe per layer on the train split (its L2 strength chosen on dev), and
scores it on test. Around it, the controls the literature asks for: the majority class,
the same probe on a randomly initialised copy of the model, and for word-level tasks a
control task (Hewitt & Liang 2019) whose labels depend only on the word type, giving
selectivity = task accuracy − control accuracy.

Tasks: `upos`, `xpos`, `deprel` (word level, CoNLL-U); `depth` and `distance` (Hewitt &
Manning's structural probes, CoNLL-U); any SentEval file's labels (sentence level); and the
built-in generated tasks of `probing_tasks`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from bertscope import runtime as distributed
from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.probing import probes, structural
from bertscope.analyses.probing.features import FeatureOptions, Features, extract_sharded
from bertscope.analyses.probing.mdl import report_codes
from bertscope.analyses.probing.results import MDL_STRUCTURAL, ProbeReport
from bertscope.analyses.streaming import words_of
from bertscope.base.errors import Cancelled, InputError
from bertscope.base.progress import Progress, relay
from bertscope.data.corpus import Sentence
from bertscope.data.probing_tasks import STRUCTURAL_TASKS, WORD_TASKS
from bertscope.data.splits import Splits
from bertscope.model.allocator import fitting_heap
from bertscope.model.deferred import DeferredSession

if TYPE_CHECKING:
    from bertscope.model.session import Session

MIN_EXAMPLES = 2  # labels with fewer training examples are left out (probing's --min-examples)


def center_of_gravity(scores: np.ndarray) -> float:
    """Tenney et al.'s expected layer, on the running best score.

    Tenney et al. score layer l with a probe on a mix of layers 0..l, so their scores never
    fall; our probes see one layer each, so we take the best score up to each layer (what
    a mix could have kept) before the differential formula. The result lies in [1, L].
    """
    return float(probes.expected_layer(np.maximum.accumulate(np.asarray(scores, dtype=np.float64))))


def word_labels(sentences: Sequence[Sentence], features: Features, task: str) -> list[str]:
    """The label of each feature row (a word that fitted the model)."""
    columns = {"upos": "upos", "xpos": "xpos", "deprel": "deprels"}
    labels = []
    for sentence_index, word_index in zip(features.sentence_index, features.word_index, strict=True):
        values = getattr(sentences[sentence_index], columns[task])
        if values is None:
            raise InputError(f"{sentences[sentence_index].location}: no {task.upper()} column; this file cannot probe {task}")
        labels.append(values[word_index])
    return labels


@dataclass(frozen=True)
class EncodedLabels:
    """Integer labels of the rows a probe trains and scores on, and what was left out.

    `keep` holds, per split, the indices of the rows kept, or None when every row is kept
    (then the features are used as they are, without a copy).
    """

    train: np.ndarray
    dev: np.ndarray
    test: np.ndarray
    classes: list[str]
    keep: dict[str, np.ndarray | None]
    left_out: dict[str, int]  # label -> its number of training examples, for the labels left out
    rows_left_out: dict[str, int]  # split -> rows left out

    def rows(self, name: str, X: np.ndarray) -> np.ndarray | KeptRows:
        """The rows of `X` (one split's features) that the probe sees, read when the probe reads them."""
        keep = self.keep[name]
        return X if keep is None else KeptRows(X, keep)

    def note(self, min_examples: int) -> str | None:
        """One sentence for the report, when labels were left out."""
        if not self.left_out:
            return None
        labels = ", ".join(f"{label} ({count})" for label, count in sorted(self.left_out.items()))
        rows = ", ".join(f"{count} {name}" for name, count in self.rows_left_out.items() if count)
        return (
            f"left out {len(self.left_out)} label(s) with fewer than {min_examples} training examples: {labels}; "
            f"their examples ({rows}) are neither trained on nor scored"
        )

    def as_json(self, min_examples: int) -> dict[str, Any]:
        return {
            "min_examples": min_examples,
            "labels_left_out": dict(sorted(self.left_out.items())),
            "examples_left_out": dict(self.rows_left_out),
        }


class KeptRows:
    """Some rows of a features array (a memory map), read only as the probes read blocks or layers of them.

    `X[keep]` would copy every kept row into memory: a whole split of (L+1) × D features a
    word, a gigabyte for MiniLM at 16,000 sentences, whenever one rare label is left out.
    The probes take a layer (`X[:, layer]`, still lazy) and then blocks of rows
    (`X[start:stop]`), so only a block is ever copied; `np.asarray` gives every row at once.
    """

    def __init__(self, X: np.ndarray, keep: np.ndarray) -> None:
        self.X, self.keep = X, keep

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.keep), *self.X.shape[1:])

    @property
    def ndim(self) -> int:
        return self.X.ndim

    def __len__(self) -> int:
        return len(self.keep)

    def __getitem__(self, key: Any) -> Any:  # KeptRows for every row, else an array
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if isinstance(rows, slice) and rows == slice(None):  # every row, some columns: still lazy
            return KeptRows(self.X[(slice(None), *rest)], self.keep)
        return self.X[(self.keep[rows], *rest)]  # only these rows' chosen columns are read

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(self.X[self.keep], dtype=dtype)


def encode_labels(train: list[str], dev: list[str], test: list[str], min_examples: int = MIN_EXAMPLES) -> EncodedLabels:
    """Integer labels over the train split's classes with `min_examples` or more training examples.

    Rarer labels, and labels that never occur in train, are left out of training and
    scoring, as probing studies do with the rare tags of real treebanks (X, SYM, a rare
    relation); they are counted so the report can say so. Fewer than two labels left is an error.
    """
    if min_examples < 1:
        raise InputError(f"the minimum number of training examples per label must be at least 1, got {min_examples}")
    counts = Counter(train)
    classes = sorted(label for label, count in counts.items() if count >= min_examples)
    if len(classes) < 2:
        found = ", ".join(f"{label} ({count})" for label, count in sorted(counts.items())) or "none"
        raise InputError(
            f"a probe needs two or more labels with at least {min_examples} training examples each; "
            f"the train split has {found}: add training data or accept rarer labels"
        )
    index = {label: i for i, label in enumerate(classes)}
    left_out = {label: counts.get(label, 0) for label in set(train) | set(dev) | set(test) if label not in index}
    encoded, keep, rows_left_out = {}, {}, {}
    for name, labels in (("train", train), ("dev", dev), ("test", test)):
        kept = [row for row, label in enumerate(labels) if label in index]
        keep[name] = None if len(kept) == len(labels) else np.array(kept, dtype=np.int64)
        rows_left_out[name] = len(labels) - len(kept)
        encoded[name] = np.array([index[labels[row]] for row in kept], dtype=np.int64)
    for name, labels in (("dev", dev), ("test", test)):
        if labels and not len(encoded[name]):
            raise InputError(f"every {name} example has a label left out for having too few training examples; add training data")
    return EncodedLabels(encoded["train"], encoded["dev"], encoded["test"], classes, keep, left_out, rows_left_out)


def run_probe(
    session: Session | DeferredSession,
    task: str,
    splits: Splits,
    *,
    word_pooling: str = "first",
    sentence_pooling: str = "cls",
    kind: probes.ProbeKind = "linear",
    control: bool = True,
    random_baseline: bool = True,
    min_examples: int = MIN_EXAMPLES,
    mdl: bool = False,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[ProbeReport]]:
    """Probe every layer for `task`; yield progress by stage, the last item carrying the report.

    Labels with fewer than `min_examples` training examples are left out (see `encode_labels`). `mdl`: each
    layer's online codelength too (Voita & Titov 2020; `analyses.probing.mdl`), on the same features. The features
    are taken under `conditions`' mask (None: the model as it is); `job` gives the seed, the cache and the cancel.
    """
    if mdl and task in STRUCTURAL_TASKS:
        raise InputError(MDL_STRUCTURAL, setting="mdl")
    level = "word" if task in WORD_TASKS + STRUCTURAL_TASKS else "sentence"
    options = FeatureOptions(
        level=level,
        word_pooling=word_pooling,
        sentence_pooling=sentence_pooling,
        mask="" if conditions is None else conditions.mask.spec(),
        ablation="zero" if conditions is None else conditions.ablation,
        precision="float32" if task in STRUCTURAL_TASKS else "auto",
    )
    sessions: list[tuple[str, Session | DeferredSession]] = [("model", session)]
    if random_baseline:  # its weights drawn only if its features are not cached
        sessions.append(("random", DeferredSession.random_copy_of(session, job.seed)))
    features: dict[tuple[str, str], Features] = {}
    total = sum(len(getattr(splits, name)) for name in ("train", "dev", "test")) * len(sessions)
    done = 0
    for which, source in sessions:
        for name in ("train", "dev", "test"):
            sentences = getattr(splits, name)
            stage = f"features ({which}, {name})"
            yield Progress(stage, done, total)  # shown while a deferred model loads, before the first batch

            def relabel(step: Progress[Features], stage: str = stage, done: int = done) -> Progress[Features]:
                return Progress(stage, done + step.done, total)

            extracted = yield from relay(extract_sharded(source, sentences, options, cache_dir=job.cache_dir, cancel=job.cancel), relabel)
            if extracted is None:
                return  # cancelled
            features[which, name] = extracted
            done += len(sentences)
            yield Progress(f"features ({which}, {name})", done, total)
    if job.cancelled:
        return
    fit = _Fit(task, splits, features, level, kind, control, random_baseline, min_examples, mdl, str(session.device), job)
    yield Progress("training probes", total, total)
    report: ProbeReport | None = None
    if distributed.is_main():  # under torchrun, rank 0 holds every row (extract_sharded) and trains the probes, once
        try:
            with fitting_heap():  # the fit's blocks of FIT_BLOCK rows mapped and handed back, not heap holes
                report = _structural_report(fit) if task in STRUCTURAL_TASKS else _classification_report(fit)
        except Cancelled:
            return
        truncated = sum(features["model", name].truncated_words for name in ("train", "dev", "test"))
        left_out = [f"{truncated} words of sentences longer than the model's maximum were left out"] if truncated else []
        report = replace(report, notes=(*splits.notes, *report.notes, *left_out))
    report = distributed.from_main(report)
    yield Progress("done", total, total, report)


@dataclass(frozen=True)
class _Fit:
    """One run's probes to fit, past its features: what `run_probe` hands its report whole."""

    task: str
    splits: Splits
    features: dict[tuple[str, str], Features]
    level: str
    kind: probes.ProbeKind
    control: bool
    random_baseline: bool
    min_examples: int
    mdl: bool
    device: str
    job: JobOptions


def _classification_report(run: _Fit) -> ProbeReport:
    splits, features, level, kind, device, job = run.splits, run.features, run.level, run.kind, run.device, run.job

    def labels_of(name: str) -> list[str]:
        sentences = getattr(splits, name)
        if level == "word":
            return word_labels(sentences, features["model", name], run.task)
        missing = [s.location for s in sentences if s.label is None]
        if missing:
            raise InputError(f"{missing[0]}: no label; sentence-level probing needs a SentEval file (split, label, sentence)")
        return [s.label for s in sentences]

    labels = encode_labels(labels_of("train"), labels_of("dev"), labels_of("test"), run.min_examples)
    y_train, y_dev, y_test, num_classes = labels.train, labels.dev, labels.test, len(labels.classes)

    def rows(which: str, name: str) -> np.ndarray | KeptRows:
        return labels.rows(name, features[which, name].X)

    def fit(which: str, y_tr: np.ndarray, y_dv: np.ndarray, layer_l2: np.ndarray | None = None) -> probes.TrainedProbes:
        return probes.train_probes(
            rows(which, "train"),
            y_tr,
            rows(which, "dev"),
            y_dv,
            num_classes=num_classes,
            kind=kind,
            layer_l2=layer_l2,
            device=device,
            seed=job.seed,
            cancel=job.cancel,
        )

    # The baselines are the task's probes on other features or labels: linear ones at the task's strength per layer
    # (Hewitt & Liang train the control task with the task's hyperparameters), which also spares their L2 search.
    control_labels = _control_labels(splits, features, labels, job.seed) if run.control and level == "word" else None
    control_probes = None
    if control_labels is not None and kind == "linear":  # the control reads the task's features: their fits share the passes
        task_probes, control_probes = probes.train_with_control(
            rows("model", "train"),
            y_train,
            rows("model", "dev"),
            y_dev,
            control_labels[0],
            control_labels[1],
            num_classes=num_classes,
            device=device,
            seed=job.seed,
            cancel=job.cancel,
        )
    else:
        task_probes = fit("model", y_train, y_dev)
    same_strengths = task_probes.chosen_strengths if kind == "linear" else None
    if control_labels is not None and control_probes is None:
        control_probes = fit("model", control_labels[0], control_labels[1], layer_l2=same_strengths)
    test_rows = rows("model", "test")
    scores = probes.score(task_probes, test_rows, y_test, num_classes)
    layers: list[dict[str, Any]] = [
        {"layer": layer, "accuracy": round(float(acc), 6), "f1": round(float(f1), 6), "l2": float(l2), "fit": task_probes.endings[layer]}
        for layer, (acc, f1, l2) in enumerate(zip(scores.accuracy, scores.macro_f1, scores.l2, strict=True))
    ]
    fitted = [("task", task_probes.endings)]
    baselines = {"majority": round(probes.majority_baseline(y_train, y_test), 6)}
    if run.random_baseline:
        random_probes = fit("random", y_train, y_dev, same_strengths)
        fitted.append(("random-init", random_probes.endings))
        random_scores = probes.score(random_probes, rows("random", "test"), y_test, num_classes)
        for entry, accuracy in zip(layers, random_scores.accuracy, strict=True):
            entry["random_init_accuracy"] = round(float(accuracy), 6)
        baselines["random_init"] = round(float(random_scores.accuracy.max()), 6)
    if control_probes is not None:
        assert control_labels is not None  # a control probe is trained only on them
        fitted.append(("control", control_probes.endings))
        control_scores = probes.score(control_probes, test_rows, control_labels[2], num_classes)
        for entry, accuracy in zip(layers, control_scores.accuracy, strict=True):
            entry["control_accuracy"] = round(float(accuracy), 6)
            entry["selectivity"] = round(entry["accuracy"] - float(accuracy), 6)
        baselines["control_best"] = round(float(control_scores.accuracy.max()), 6)
    codes: dict[str, Any] = {}
    if run.mdl:  # the online codes on the features and at the strengths the accuracy probes used
        per_layer, codes = report_codes(
            rows("model", "train"),
            y_train,
            None if control_labels is None else control_labels[0],
            task_probes=task_probes,
            X_dev=rows("model", "dev"),
            y_dev=y_dev,
            control_dev=None if control_labels is None else control_labels[1],
            unit="words" if level == "word" else "sentences",
            seed=job.seed,
            device=device,
            cancel=job.cancel,
        )
        for entry, code in zip(layers, per_layer, strict=True):
            entry["mdl"] = code
    counts = {
        "train": int(len(y_train)),
        "dev": int(len(y_dev)),
        "test": int(len(y_test)),
        "classes": num_classes,
        "unit": "words" if level == "word" else "sentences",
    } | labels.as_json(run.min_examples)
    note = labels.note(run.min_examples)
    return ProbeReport(
        task=run.task,
        metric="accuracy",
        layers=layers,
        best_layer=int(np.argmax(scores.accuracy)),
        center_of_gravity=center_of_gravity(scores.accuracy),
        baselines=baselines,
        counts=counts,
        notes=tuple(note for note in (note, convergence_note(fitted)) if note),
        numerics=_numerics(features, device),
        mdl=codes,
    )


def convergence_note(fitted: Sequence[tuple[str, Sequence[str]]]) -> str | None:
    """One sentence naming the layers whose probe fit did not converge, from each kind of probe's per-layer endings
    (`TrainedProbes.endings`, `StructuralProbes.distance_endings`...), or None when all did."""
    parts = []
    for name, endings in fitted:
        for ending in sorted(set(endings) - {"converged"}):
            layers = [layer for layer, ended in enumerate(endings) if ended == ending]
            parts.append(f"{name} probe, layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}: {ending}")
    if not parts:
        return None
    return (
        "some probe fits did not converge, so their numbers may move with the arithmetic ("
        + "; ".join(parts)
        + "); each layer's `fit` in the JSON says how its fit ended"
    )


def _numerics(features: dict[tuple[str, str], Features], fit_device: str) -> dict[str, Any]:
    """What the report's numbers depend on besides model, data and seed: how the model's features were computed
    (device, dtype, CPU kernel path; from the cache entry when they were cached) and where the probes were fitted."""
    made = features["model", "train"].numerics or {}
    return {"features": made, "fit_device": fit_device}


def _control_labels(
    splits: Splits, features: dict[tuple[str, str], Features], labels: EncodedLabels, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hewitt & Liang's control task: each word type keeps one random label, drawn like the real ones."""

    def types(name: str) -> list[str]:
        sentences = getattr(splits, name)
        rows = features["model", name]
        words = [words_of(sentences[s])[w].lower() for s, w in zip(rows.sentence_index, rows.word_index, strict=True)]
        keep = labels.keep[name]
        return words if keep is None else [words[row] for row in keep]

    train_types, dev_types, test_types = types("train"), types("dev"), types("test")
    num_classes = len(labels.classes)
    distribution = np.bincount(labels.train, minlength=num_classes) / len(labels.train)
    mapping = probes.control_labels(sorted(set(train_types + dev_types + test_types)), num_classes, seed=seed, distribution=distribution)
    train, dev, test = (np.array([mapping[t] for t in split_types], dtype=np.int64) for split_types in (train_types, dev_types, test_types))
    return train, dev, test


def _whole_trees(sentences: Sequence[Sentence], rows: Features) -> tuple[np.ndarray, np.ndarray, list[tuple[int, ...]], list[np.ndarray]]:
    """Features, sentence indices, trees and punctuation of the sentences that fitted the model whole.

    A tree needs every word; a sentence cut to the model's maximum is left out. Punctuation
    is skipped in UUAS and root accuracy, as in Hewitt & Manning.
    """
    kept = [index for index, sentence in enumerate(sentences) if np.count_nonzero(rows.sentence_index == index) == len(words_of(sentence))]
    renumber = {old: new for new, old in enumerate(kept)}
    select = np.isin(rows.sentence_index, kept)
    trees = []
    for number in kept:
        heads = sentences[number].heads
        assert heads is not None  # `_structural_report` checked that every sentence has its tree
        trees.append(heads)
    skip = [
        np.array([tag == "PUNCT" for tag in (sentences[index].upos or ())], dtype=bool)
        if sentences[index].upos
        else np.zeros(len(words_of(sentences[index])), dtype=bool)
        for index in kept
    ]
    index = np.array([renumber[i] for i in rows.sentence_index[select]], dtype=np.int64)
    return rows.X[select], index, trees, skip


def _structural_report(run: _Fit) -> ProbeReport:
    task, splits, features, random_baseline, device = run.task, run.splits, run.features, run.random_baseline, run.device
    if any(s.heads is None for name in ("train", "dev", "test") for s in getattr(splits, name)):
        raise InputError("structural probes need dependency trees (the HEAD column of a CoNLL-U file)")

    def fit_and_score(which: str) -> tuple[structural.StructuralScores, tuple[str, ...]]:
        train, dev, test = (_whole_trees(getattr(splits, name), features[which, name]) for name in ("train", "dev", "test"))
        trained = structural.train_structural_probes(
            train[0],
            train[1],
            train[2],
            dev[0],
            dev[1],
            dev[2],
            device=device,
            seed=run.job.seed,
            cancel=run.job.cancel,
        )
        scored = structural.score_structural(trained, test[0], test[1], test[2], skip=test[3], device=device)
        return scored, trained.distance_endings if task == "distance" else trained.depth_endings

    scores, endings = fit_and_score("model")
    main = scores.spearman if task == "distance" else scores.depth_spearman
    second = ("uuas", scores.uuas) if task == "distance" else ("root_accuracy", scores.root_accuracy)
    layers = [
        {"layer": layer, "spearman": round(float(main[layer]), 6), second[0]: round(float(second[1][layer]), 6), "fit": endings[layer]}
        for layer in range(len(main))
    ]
    baselines = {}
    if random_baseline:
        random_scores, _ = fit_and_score("random")
        random_main = random_scores.spearman if task == "distance" else random_scores.depth_spearman
        for entry, value in zip(layers, random_main, strict=True):
            entry["random_init_spearman"] = round(float(value), 6)
        baselines["random_init"] = round(float(np.nanmax(random_main)), 6)
    counts = {name: len(getattr(splits, name)) for name in ("train", "dev", "test")} | {"unit": "sentences"}
    note = convergence_note([(task, endings)])
    return ProbeReport(
        task=task,
        metric="spearman",
        layers=layers,
        best_layer=int(np.nanargmax(main)),
        center_of_gravity=center_of_gravity(np.nan_to_num(main)),
        baselines=baselines,
        counts=counts,
        notes=(note,) if note else (),
        numerics=_numerics(features, device),
    )
