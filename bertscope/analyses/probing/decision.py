"""A probe whose decision on one sentence can be attributed to its tokens (Mohebbi et al. 2021).

`decision_probe` trains the probing feature's linear probes on a sentence-level task (a
built-in generated task or a SentEval file), every hidden-state layer at once from the
feature cache, and keeps the one layer to explain: the one asked for, else the layer with
the best dev accuracy. Its weights are numpy (`TrainedProbes`); `logits` rebuilds the probe
in torch on top of the model's hidden states so that gradients flow back to the input.

The probe is trained on the model without any head mask: a mask given to an attribution
changes the representation the probe reads, not the probe. Trained probes are kept in
memory per session and on disk beside the feature cache (keyed by model fingerprint, data
and pooling; a damaged entry is trained again), so each task is trained once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import weakref
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import torch

from bertscope.analyses.probing import probes
from bertscope.analyses.probing.features import FeatureOptions, Features, extract_features
from bertscope.analyses.probing.run import encode_labels
from bertscope.base.errors import Cancelled, InputError
from bertscope.base.progress import Progress, relay
from bertscope.data.cache import default_cache_dir
from bertscope.data.corpus import Sentence, read_sentences
from bertscope.data.files import atomic_write
from bertscope.data.splits import make_splits
from bertscope.model.allocator import fitting_heap

if TYPE_CHECKING:
    from bertscope.model.session import Session

POOLINGS = ("cls", "mean")
# session -> {(task, digest of the sentences, pooling): DecisionProbe}
_trained: weakref.WeakKeyDictionary[Session, dict[tuple[str, str, str], DecisionProbe]] = weakref.WeakKeyDictionary()
_training_lock = threading.Lock()


@dataclass(frozen=True, eq=False)
class DecisionProbe:
    """A trained linear probe for one task at one hidden-state layer, with how good it is."""

    task: str
    source: str  # "built-in task" or the data file
    classes: tuple[str, ...]
    layer: int  # hidden-state index: 0 = embeddings, l+1 = output of layer l
    pooling: str  # "cls" or "mean": how a sentence vector is read off its tokens
    trained: probes.TrainedProbes  # every layer's probe (the chosen one is `layer`)
    test_accuracy: np.ndarray  # [L+1]
    majority: float  # test accuracy of always answering the most frequent training class
    trained_on: tuple[int, int, int] = (0, 0, 0)  # train, dev and test sentences: the probing pane's counts for one task

    def logits(self, hidden: torch.Tensor, special: torch.Tensor) -> torch.Tensor:
        """`[B, C]` class scores from the layer's hidden states `[B, T, D]` (`special` `[T]` bool)."""
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            keep = (~special).to(hidden.dtype)
            pooled = (hidden * keep[None, :, None]).sum(1) / keep.sum().clamp(min=1)
        t = self.trained
        as_tensor = lambda array: torch.as_tensor(array, device=hidden.device, dtype=torch.float32)  # noqa: E731
        z = (pooled.float() - as_tensor(t.mean[self.layer])) / as_tensor(t.std[self.layer])
        if t.kind == "mlp":
            assert t.hidden_weights is not None and t.hidden_bias is not None  # an MLP probe has its hidden layer
            z = torch.relu(z @ as_tensor(t.hidden_weights[self.layer]) + as_tensor(t.hidden_bias[self.layer]))
        return z @ as_tensor(t.weights[self.layer]) + as_tensor(t.bias[self.layer])

    def describe(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "data": self.source,
            "layer": self.layer,
            "pooling": self.pooling,
            "classes": list(self.classes),
            "test_accuracy": round(float(self.test_accuracy[self.layer]), 6),
            "majority_baseline": round(self.majority, 6),
            "fit": self.trained.endings[self.layer] if self.trained.endings else None,
            "sentences": dict(zip(("train", "dev", "test"), self.trained_on, strict=True)),
        }

    def accuracy_text(self) -> str:
        """`test accuracy 0.855; trained on 2,000 sentences, dev 400, test 400`: the number and what it was measured
        with, as the probing pane and `bertscope probe` report the same probe."""
        train, dev, test = self.trained_on
        return f"test accuracy {float(self.test_accuracy[self.layer]):.3f}; trained on {train:,} sentences, dev {dev:,}, test {test:,}"


def decision_probe(
    session: Session,
    task: str,
    *,
    data: str | Path | None = None,
    sentences: Sequence[Sentence] | None = None,
    layer: int | None = None,
    pooling: str = "cls",
    cache_dir: str | Path | Literal[False] | None = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[DecisionProbe]]:
    """Train (or take from memory or the disk cache) the probe for a sentence-level `task`, yielding progress.

    The sentences are, in order of precedence: `sentences`, the SentEval file `data`, or
    the built-in generated task `task`. Features come from (and go to) the feature cache.
    """
    if pooling not in POOLINGS:
        raise InputError(f"unknown sentence pooling {pooling!r}; use one of: {', '.join(POOLINGS)}")
    if layer is not None and not 0 <= layer <= session.num_layers:
        raise InputError(
            f"layer {layer} is out of range: probes read hidden states 0-{session.num_layers} (0 = embeddings)", setting="layer"
        )
    if sentences is None:
        sentences, source = _task_sentences(task, data)
    else:
        source = "given sentences"
    key = (task, _digest(sentences), pooling)
    with _training_lock:
        known = _trained.setdefault(session, {}).get(key)
    path = None
    if known is None and cache_dir is not False:
        directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        path = directory / f"probe-{_cache_key(session, key)}.npz"
        known = _load(path, task, source, pooling, session)
    if known is None:
        splits = make_splits(sentences, None, None)
        options = FeatureOptions(level="sentence", sentence_pooling=pooling)
        features: dict[str, np.ndarray] = {}
        total = len(splits.train) + len(splits.dev) + len(splits.test)
        done = 0
        for name in ("train", "dev", "test"):
            split = getattr(splits, name)

            def relabel(step: Progress[Features], name: str = name, done: int = done) -> Progress[Features]:
                return Progress(f"probe features ({name})", done + step.done, total)

            extracted = yield from relay(extract_features(session, split, options, cache_dir=cache_dir, cancel=cancel), relabel)
            if extracted is None:
                return  # cancelled
            features[name] = extracted.X
            done += len(split)
        labels = [[s.label for s in getattr(splits, name)] for name in ("train", "dev", "test")]
        if any(label is None for split in labels for label in split):
            raise InputError(f"{source}: a sentence has no label; probing a decision needs split<TAB>label<TAB>sentence lines")
        train_labels, dev_labels, test_labels = cast(list[list[str]], labels)  # no None: checked just above
        encoded = encode_labels(train_labels, dev_labels, test_labels)
        y_train, y_dev, y_test, classes = encoded.train, encoded.dev, encoded.test, encoded.classes
        yield Progress("training the probe", total, total)
        try:
            with fitting_heap():  # the fit's large blocks mapped and handed back, not heap holes
                trained = probes.train_probes(
                    encoded.rows("train", features["train"]),
                    y_train,
                    encoded.rows("dev", features["dev"]),
                    y_dev,
                    num_classes=len(classes),
                    device=str(session.device),
                    cancel=cancel,
                )
        except Cancelled:
            return
        scores = probes.score(trained, encoded.rows("test", features["test"]), y_test, len(classes))
        known = DecisionProbe(
            task=task,
            source=source,
            classes=tuple(classes),
            layer=-1,
            pooling=pooling,
            trained=trained,
            test_accuracy=scores.accuracy,
            majority=probes.majority_baseline(y_train, y_test),
            trained_on=(len(splits.train), len(splits.dev), len(splits.test)),
        )
        if path is not None:
            _save(path, known)
    with _training_lock:
        _trained[session][key] = known
    chosen = layer if layer is not None else int(np.argmax(known.trained.chosen_dev_accuracy))  # ties: the lower layer
    yield Progress("done", 1, 1, _with_layer(known, chosen))


def _with_layer(probe: DecisionProbe, layer: int) -> DecisionProbe:
    return DecisionProbe(**{**probe.__dict__, "layer": layer})


def _task_sentences(task: str, data: str | Path | None) -> tuple[list[Sentence], str]:
    from bertscope.data.probing_tasks import TASKS

    if data is not None:
        sentences = list(read_sentences(data, "senteval"))
        return sentences, str(data)
    if task not in TASKS:
        raise InputError(
            f"unknown probing task {task!r}; built-in tasks: {', '.join(TASKS)}; or give a SentEval data file "
            "(split<TAB>label<TAB>sentence)",
            setting="probe",
        )
    return list(_generated(task)), "built-in task"


@functools.lru_cache(maxsize=8)
def _generated(task: str) -> tuple[Sentence, ...]:
    """A built-in task's sentences, generated once per process (a second's work)."""
    from bertscope.data.probing_tasks import generate

    return tuple(generate(task))


def _digest(sentences: Sequence[Sentence]) -> str:
    digest = hashlib.sha256()
    for sentence in sentences:
        digest.update(f"{sentence.split}\x00{sentence.label}\x00{sentence.text}\x00{sentence.pair}\n".encode())
    return digest.hexdigest()[:16]


CACHE_VERSION = 2  # 2: fitted on standardised rows; the dtype (and device below float32) in the key
_ARRAYS = ("mean", "std", "weights", "bias", "l2", "l2_grid", "dev_accuracy")


def _cache_key(session: Session, key: tuple[str, str, str]) -> str:
    payload = json.dumps(
        {
            "v": CACHE_VERSION,
            "model": session.info.fingerprint,
            "max_length": session.max_length,
            "key": key,
            "numerics": session.numerics_key,
        }
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def _save(path: Path, probe: DecisionProbe) -> None:
    """Keep a trained probe on disk (linear probes only; training one costs tens of seconds on a CPU)."""
    arrays = {name: getattr(probe.trained, name) for name in _ARRAYS}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as handle:
            np.savez(
                handle,
                classes=np.array(probe.classes),
                test_accuracy=probe.test_accuracy,
                majority=np.array(probe.majority),
                endings=np.array(probe.trained.endings),
                dev_rows=np.array(probe.trained.dev_rows),
                trained_on=np.array(probe.trained_on),
                **arrays,
            )
    except (OSError, InputError):
        pass  # a cache that cannot be written only costs time next run


def _load(path: Path, task: str, source: str, pooling: str, session: Session) -> DecisionProbe | None:
    """The cached probe, or None when it is missing or damaged (then it is trained again)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            trained = probes.TrainedProbes(
                kind="linear",
                endings=tuple(str(e) for e in data["endings"]),
                dev_rows=int(data["dev_rows"]),
                **{name: data[name] for name in _ARRAYS},
            )
            classes = tuple(str(c) for c in data["classes"])
            test_accuracy, majority = data["test_accuracy"], float(data["majority"])
            train, dev, test = (int(count) for count in data["trained_on"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):
        return None
    layers, dim = session.num_layers + 1, session.hidden_size
    if trained.mean.shape != (layers, dim) or trained.weights.shape != (layers, dim, len(classes)) or test_accuracy.shape != (layers,):
        return None
    return DecisionProbe(
        task=task,
        source=source,
        classes=classes,
        layer=-1,
        pooling=pooling,
        trained=trained,
        test_accuracy=test_accuracy,
        majority=majority,
        trained_on=(train, dev, test),
    )
