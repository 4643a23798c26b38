"""Amnesic probing (Elazar et al. 2021) with LEACE (Belrose et al. 2023): erase a property inside the forward pass.

A property being decodable from a layer does not mean the model uses it. Amnesic probing
removes it from layer L's hidden states as the model runs and measures what the model loses.
The eraser is LEACE (the `concept-erasure` package): the least-squares affine edit after
which no linear classifier does better than a constant at predicting the property, fitted
on the training split's features at layer L. Its control (Elazar et al.'s) removes as many
random directions, around the same mean.

Layers are hidden-state indices (0 = the embeddings, l + 1 the output of layer l). The
eraser is applied by a hook on the module whose output is that hidden state: for index 0
the embeddings' output as the model reports it (ELECTRA's projection up to the hidden size
where it has one, ALBERT's mapping into the hidden size), for the last index a pre-LN
model's final norm, for index 1 of a DeBERTa-v2 with a convolution beside its first layer
that convolution, else the layer below (`Family.hidden_state_module`). The hook is put
first among the module's hooks, so on every family the hidden state the model reports at
that index is the erased one, and everything above reads it, including what reads the
embeddings beside the first layer (that convolution). It composes with head gates, and
the hook is removed however the pass ends (`erasing`).
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.erasure_results import ErasureResult, check_measure, check_measure_heads, parse_measure
from bertscope.analyses.importance.objectives import Objective, make_objective
from bertscope.analyses.importance.results import Measurement
from bertscope.analyses.probing import probes
from bertscope.analyses.probing.features import FeatureOptions, Features, extract_features, extract_sharded
from bertscope.analyses.probing.run import MIN_EXAMPLES, EncodedLabels, encode_labels, word_labels
from bertscope.base.errors import Cancelled, InputError
from bertscope.base.progress import Progress, relay
from bertscope.data.corpus import Sentence
from bertscope.data.probing_tasks import STRUCTURAL_TASKS, WORD_TASKS
from bertscope.data.splits import Splits
from bertscope.model.allocator import fitting_heap
from bertscope.model.hidden_edits import editing_hidden_state
from bertscope.model.masks import Ablation

if TYPE_CHECKING:
    from bertscope.model.session import Session


@dataclass(frozen=True, eq=False)
class Eraser:
    """An affine edit of hidden states: x ↦ x − ((x − bias) @ right.T) @ left.T, `left` `[D, r]`, `right` `[r, D]`.

    LEACE's (`leace`) is an oblique projection removing the property's directions in the
    features' whitened geometry; the control (`random`) an orthogonal one removing `rank`
    random directions. `rank`: how many directions the edit removes.
    """

    left: Tensor
    right: Tensor
    bias: Tensor
    rank: int
    kind: Literal["leace", "random"]

    @classmethod
    def leace(cls, X: np.ndarray, y: np.ndarray, num_classes: int) -> Eraser:
        """LEACE fitted on features `X` `[N, D]` and labels `y` `[N]` in `0..num_classes-1` (the package's defaults:
        affine, covariance shrinkage, the trace of the covariance kept from growing), in float64."""
        with warnings.catch_warnings():  # its import scripts a function with torch.jit, which torch 2.10+ deprecates
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            from concept_erasure import LeaceFitter

        x = torch.from_numpy(np.asarray(X, dtype=np.float64))
        z = torch.nn.functional.one_hot(torch.as_tensor(y, dtype=torch.long), num_classes).double()
        eraser = LeaceFitter.fit(x, z).eraser
        assert eraser.bias is not None  # affine: fitted with the features' mean
        left, right = eraser.proj_left, eraser.proj_right
        rank = int(torch.linalg.matrix_rank(left @ right, hermitian=False, rtol=1e-6)) if left.numel() else 0
        return cls(left.float(), right.float(), eraser.bias.float(), rank, "leace")

    @classmethod
    def random(cls, dim: int, rank: int, mean: np.ndarray | Tensor, seed: int = 0) -> Eraser:
        """The orthogonal projection removing `rank` directions drawn uniformly at random (`seed`), around `mean`."""
        generator = torch.Generator().manual_seed(seed)
        Q, _ = torch.linalg.qr(torch.randn(dim, max(rank, 1), generator=generator, dtype=torch.float64))
        Q = Q[:, :rank]
        return cls(Q.float(), Q.T.contiguous().float(), torch.as_tensor(np.asarray(mean), dtype=torch.float32), rank, "random")

    def to(self, device: torch.device | str) -> Eraser:
        return replace(self, left=self.left.to(device), right=self.right.to(device), bias=self.bias.to(device))

    def __call__(self, x: Tensor) -> Tensor:
        """The edited states, in `x`'s dtype (computed in float32)."""
        plain = x.float()
        removed = ((plain - self.bias) @ self.right.T) @ self.left.T
        return (plain - removed).to(x.dtype)

    def apply(self, X: np.ndarray) -> np.ndarray:
        """The edit on features `[N, D]` in numpy (float32)."""
        with torch.inference_mode():
            return self(torch.from_numpy(np.asarray(X, dtype=np.float32))).numpy()

    def variance_share(self, X: np.ndarray) -> float:
        """The share of the features' total variance that the edit takes away: tr Cov(x − x′) / tr Cov(x)."""
        X = np.asarray(X, dtype=np.float64)
        removed = X - self.apply(X).astype(np.float64)
        total = float(X.var(0).sum())
        return float(removed.var(0).sum()) / total if total > 0 else 0.0


@contextlib.contextmanager
def erasing(session: Session, layer: int, eraser: Eraser | None) -> Iterator[None]:
    """Within the block, every forward pass of `session`'s model run by this thread has `eraser` applied to hidden
    state `layer`; other threads' passes (the explorer's, while a job streams) run as they are.

    None erases nothing (the block runs as it is). The hook is removed when the block ends, also when it raises.
    """
    if eraser is None:
        yield
        return
    with editing_hidden_state(session, layer, eraser.to(session.device)):
        yield


def measured(objective: Objective, layer: int, eraser: Eraser | None, mask: Any = None, ablation: Ablation = "zero") -> Measurement:
    """The objective's loss (mean over sentences) and metric with `eraser` applied at hidden state `layer` (None: as
    it is), under the head `mask`. What the objective compares against (the `preserve` objective's output of the
    model as it is) is computed without the erasure."""
    return measured_under(objective, lambda: erasing(objective.session, layer, eraser), mask, ablation)


def measured_under(
    objective: Objective, edits: Callable[[], contextlib.AbstractContextManager[Any]], mask: Any = None, ablation: Ablation = "zero"
) -> Measurement:
    """The objective's loss and metric with the passes edited inside `edits()` (an erasure, switched SAE features), under
    the head `mask`; what the objective compares against is computed outside them, on the model as it is."""
    session = objective.session
    gates = session.gate_tensor(mask)
    loss = metric_sum = metric_count = 0.0
    with torch.inference_mode():
        for batch in objective.batches:
            reference = objective.reference(batch)  # outside the edits
            with edits():
                scores = objective.scores(reference, gates, ablation)
            loss += float(scores.loss.sum())
            metric_sum += float(scores.metric_sum.sum())
            metric_count += float(scores.metric_count.sum())
    summed = distributed.sum_across({"loss": loss, "metric_sum": metric_sum, "metric_count": metric_count})  # under torchrun
    loss, metric_sum, metric_count = (summed[key] for key in ("loss", "metric_sum", "metric_count"))
    return Measurement(loss / max(objective.sentences, 1), metric_sum / metric_count if metric_count else math.nan)


def default_measure(session: Session) -> str:
    """MLM word accuracy for a model with an MLM head, the preserve distance otherwise (the issue's default)."""
    return "mlm" if session.mlm_head is not None else "preserve"


def run_erasure(
    session: Session,
    task: str,
    splits: Splits,
    *,
    layer: int,
    measure: str | None = None,
    probe_layer: int | None = None,
    word_pooling: str = "first",
    sentence_pooling: str = "cls",
    min_examples: int = MIN_EXAMPLES,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[ErasureResult]]:
    """Erase `task` from hidden state `layer` with LEACE fitted on the train split; yield progress, the last item the result.

    Guardedness: linear probes for `task` at `layer` and every layer above, on the features of the model as it is
    and, fresh, on those of the forward pass with the erasure (train to fit, dev to choose the L2 strength, test to
    score). The measure (`mlm`, `preserve`, `class` or `probe:TASK2` at `probe_layer`, default the last layer) on
    the test split: as it is, erased, and with as many random directions removed. Under `conditions`' head mask
    throughout (None: the model as it is); `job`: the measure's batch size, the seed, the feature cache, the cancel.
    """
    _check_task_and_layer(session, task, layer)
    check_measure(task, measure)
    check_measure_heads(measure, session.info.architecture, session.mlm_head is not None, session.is_classifier)
    objective_name, measure_task = parse_measure(measure or default_measure(session))
    level, options = _feature_options(task, word_pooling, sentence_pooling, conditions)
    seed, cancel = job.seed, job.cancel
    names = ("train", "dev", "test")
    total = 2 * sum(len(getattr(splits, name)) for name in names)
    done = 0
    features: dict[tuple[str, str], Features] = {}
    eraser: Eraser | None = None
    for which in ("model", "erased"):
        for name in names:
            sentences = getattr(splits, name)
            stage = f"features ({'as it is' if which == 'model' else 'erased'}, {name})"
            yield Progress(stage, done, total)

            def relabel(step: Progress[Features], stage: str = stage, done: int = done) -> Progress[Features]:
                return Progress(stage, done + step.done, total)

            with erasing(session, layer, eraser):  # nothing erased on the first round
                extracted = yield from relay(
                    extract_sharded(session, sentences, options, cache_dir=job.cache_dir if which == "model" else False, cancel=cancel),
                    relabel,
                )
            if extracted is None:
                return  # cancelled
            features[which, name] = extracted
            done += len(sentences)
        if which == "model":
            yield Progress("fitting the eraser (LEACE)", done, total)
            if distributed.is_main():  # under torchrun rank 0 holds every row (extract_sharded): it fits, once, and shares
                labels = _labels(task, splits, features, level, min_examples)
                train_at_layer = np.asarray(labels.rows("train", features["model", "train"].X[:, layer]))
                eraser = Eraser.leace(train_at_layer, labels.train, len(labels.classes))
            eraser = distributed.from_main(eraser)
    assert eraser is not None  # fitted after the first round
    control = Eraser.random(eraser.left.shape[0], eraser.rank, eraser.bias, seed)
    yield Progress("training probes", total, total)
    device = str(session.device)
    if distributed.is_main():  # the probes too: on rank 0, which holds every row
        try:
            with fitting_heap():
                before = _probe_accuracy(
                    {name: labels.rows(name, features["model", name].X)[:, layer:] for name in names}, labels, device, seed, cancel
                )
                # At the layer erased, the eraser on the features as they are: it commutes with the pooling (an affine map
                # keeps means), so the erased pass's features are needed above the layer only.
                at_layer = {
                    name: eraser.apply(np.asarray(labels.rows(name, features["model", name].X[:, layer])))[:, None] for name in names
                }
                after = _probe_accuracy(at_layer, labels, device, seed, cancel)
                if layer < session.num_layers:
                    above = {name: labels.rows(name, features["erased", name].X)[:, layer + 1 :] for name in names}
                    after = np.concatenate([after, _probe_accuracy(above, labels, device, seed, cancel)])
        except Cancelled:
            return
    yield Progress(f"measuring {objective_name}", total, total)
    objective = make_objective(
        session,
        objective_name,
        splits.test,
        batch_size=job.batch_size,
        seed=seed,
        probe_task=measure_task,
        probe_layer=probe_layer,
        probe_data=splits,
    )
    values = {}
    for condition, applied in (("none", None), ("erased", eraser), ("control", control)):
        if cancel is not None and cancel.is_set():
            return
        values[condition] = measured(objective, layer, applied, None if conditions is None else conditions.masked, options.ablation)
    if not distributed.is_main():  # the measure's sums are every rank's; the rest is rank 0's
        yield Progress("done", total, total, distributed.from_main(None))
        return
    y_train, y_test = labels.train, labels.test
    guardedness = [
        {"layer": at, "accuracy_before": round(float(b), 6), "accuracy_after": round(float(a), 6)}
        for at, b, a in zip(range(layer, session.num_layers + 1), before, after, strict=True)
    ]
    result = ErasureResult(
        task=task,
        layer=layer,
        rank=eraser.rank,
        variance_share=eraser.variance_share(train_at_layer),
        majority=probes.majority_baseline(y_train, y_test),
        guardedness=guardedness,
        measure={
            "name": measure or default_measure(session),
            "metric": objective.metric,
            "description": objective.description,
            **{condition: round(value.metric, 6) for condition, value in values.items()},
            "loss": {condition: round(value.loss, 6) for condition, value in values.items()},
        },
        counts={
            "train": int(len(y_train)),
            "dev": int(len(labels.dev)),
            "test": int(len(y_test)),
            "classes": len(labels.classes),
            "unit": "words" if level == "word" else "sentences",
            "measured_sentences": objective.sentences,
        },
        settings={
            "eraser": "LEACE (concept-erasure): affine, fitted on the training split's features at the layer, covariance shrinkage",
            "control": f"{eraser.rank} random directions removed around the same mean (seed {seed})",
            "control_variance_share": round(control.variance_share(train_at_layer), 6),
            "probe": "linear, L2 strength chosen on dev (the probing command's probe)",
            "mask": options.mask,
            "ablation": options.ablation,
            "seed": seed,
        },
        notes=tuple(dict.fromkeys([*splits.notes, *_left_out(labels, min_examples), *objective.notes])),
    )
    yield Progress("done", total, total, distributed.from_main(result))


def _check_task_and_layer(session: Session, task: str, layer: int) -> None:
    """What an eraser needs: a classification task (LEACE takes classes) and a hidden-state layer of the model."""
    if task in STRUCTURAL_TASKS:
        raise InputError(f"task {task!r} is a structural probe; erasure takes classification tasks", setting="task")
    if not 0 <= layer <= session.num_layers:
        raise InputError(f"layer {layer} is out of range: hidden-state layers are 0 (embeddings) to {session.num_layers}", setting="layer")


def fit_eraser(
    session: Session,
    task: str,
    sentences: list[Sentence],
    *,
    layer: int,
    word_pooling: str = "first",
    sentence_pooling: str = "cls",
    min_examples: int = MIN_EXAMPLES,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[Eraser]]:
    """LEACE for `task` at hidden state `layer`, fitted on `sentences` (a training split) as `run_erasure` fits it; the
    last item carries the `Eraser`, to hold and apply with `erasing` (the explorer's live erasure: its forward passes
    under `with erasing(session, layer, eraser):`)."""
    _check_task_and_layer(session, task, layer)
    level, options = _feature_options(task, word_pooling, sentence_pooling, conditions)
    features = yield from relay(extract_features(session, sentences, options, cache_dir=job.cache_dir, cancel=job.cancel))
    if features is None:
        return  # cancelled
    split = Splits(list(sentences), [], [], [])
    labels = _labels(task, split, {("model", "train"): features}, level, min_examples)
    yield Progress("fitting the eraser (LEACE)", len(sentences), len(sentences))
    eraser = Eraser.leace(np.asarray(labels.rows("train", features.X[:, layer])), labels.train, len(labels.classes))
    yield Progress("done", len(sentences), len(sentences), eraser)


def _feature_options(task: str, word_pooling: str, sentence_pooling: str, conditions: Conditions | None) -> tuple[str, FeatureOptions]:
    """The level of `task`'s rows and the features an eraser for it is fitted on, under `conditions`' head mask."""
    level = "word" if task in WORD_TASKS else "sentence"
    options = FeatureOptions(level=level, word_pooling=word_pooling, sentence_pooling=sentence_pooling)
    if conditions is not None:
        options = replace(options, mask=conditions.mask.spec(), ablation=conditions.ablation)
    return level, options


def _labels(task: str, splits: Splits, features: dict[tuple[str, str], Features], level: str, min_examples: int) -> EncodedLabels:
    def labels_of(name: str) -> list[str]:
        sentences = getattr(splits, name)
        if not sentences:  # `fit_eraser` has a training split alone
            return []
        if level == "word":
            return word_labels(sentences, features["model", name], task)
        missing = [s.location for s in sentences if s.label is None]
        if missing:
            raise InputError(f"{missing[0]}: no label; a sentence-level task needs a SentEval file (split, label, sentence)")
        return [str(s.label) for s in sentences]

    return encode_labels(labels_of("train"), labels_of("dev"), labels_of("test"), min_examples)


def _left_out(labels: EncodedLabels, min_examples: int) -> list[str]:
    note = labels.note(min_examples)
    return [note] if note else []


def _probe_accuracy(rows: dict[str, Any], labels: EncodedLabels, device: str, seed: int, cancel: threading.Event | None) -> np.ndarray:
    """Test accuracy per layer of linear probes for the task on `rows` (`[N, layers, D]` of each split's kept rows)."""
    trained = probes.train_probes(
        rows["train"], labels.train, rows["dev"], labels.dev, num_classes=len(labels.classes), device=device, seed=seed, cancel=cancel
    )
    return probes.score(trained, rows["test"], labels.test, len(labels.classes)).accuracy
