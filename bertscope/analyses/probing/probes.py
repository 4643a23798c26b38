"""Probing classifiers for every layer at once (Conneau et al. 2018; Jawahar et al. 2019; Tenney et al. 2019).

A probe is a simple classifier trained on frozen representations: if it can read a
property off layer l, layer l encodes it (linearly, for a linear probe). Features are
`X` `[N, L, D]` (L hidden-state layers, index 0 the embeddings) and labels `y` `[N]` in
`0..C-1`.

Each layer has its own probe, weights `[L, D, C]` on features standardised per layer with
the training mean and std. Linear probes are fitted layer by layer with L-BFGS (a joint
L-BFGS run shares one line search across layers and needs several times the passes), so
only one layer's standardised copy is in memory at a time; MLP probes train all layers in
one batched model with Adam, whose steps are per parameter, so each layer still gets what
it would get alone. Every L2 strength of a grid is trained (MLP probes batch the grid as
one more axis; linear probes walk it from strong to weak with warm starts), and each layer
keeps the strongest penalty whose dev accuracy is within half a standard error of the best
(`_choose`).

Control tasks (Hewitt & Liang 2019) say how much of a probe's accuracy comes from the probe
memorising word types rather than reading the representation: selectivity is task accuracy
minus control accuracy.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

from bertscope.analyses.probing import lbfgs
from bertscope.analyses.probing.results import ProbeKind
from bertscope.base.errors import Cancelled, InputError
from bertscope.model import cpu_linear
from bertscope.model.device import resolve_device

L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
LINEAR_MAX_ITER = 500  # L-BFGS iterations per L2 value; weakly regularised fits take a few hundred
GRADIENT_TOLERANCE = 1e-4  # L-BFGS stops when no weight's gradient is larger: scikit-learn's default `tol`
SELECTION_TOLERANCE = 1e-3  # for the grid on a subset, which only ranks strengths and starts the final fit
SELECTION_BAND = 0.5  # standard errors of the best dev accuracy within which the strongest penalty is kept (`_choose`)
MLP_EPOCHS = 100
STD_FLOOR = 1e-6  # a feature constant on the training set stays 0 after standardising
SELECTION_ROWS = 4096  # linear probes choose L2 on at most this many training rows, then fit once on all
EVAL_BATCH = 4096  # rows per forward pass when predicting, so memory stays flat in N
STATISTICS_BLOCK = 2048  # rows per block when summing squares for the std
FIT_BLOCK = 16384  # linear probes: more training rows than this are read a block at a time
SCORE_BLOCK = 4096  # dev rows are read this many at a time: only scored, once per L2 strength, they need no larger block
DEVICE_BLOCK_BYTES = 2 << 30  # on a GPU, a layer's rows up to this size are held there whole (see `block_rows`)


class FeatureRows(Protocol):
    """Features as the probes read them, where they are: an array, a memory map, or probing's KeptRows (rows read
    a block at a time); `np.asarray` gives every row."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def ndim(self) -> int: ...

    def __len__(self) -> int: ...

    def __getitem__(self, key: Any, /) -> Any: ...

    def __array__(self, dtype: Any = None, /) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class ProbeScores:
    """Per-layer scores of probes on one labelled set; every array is `[L]`."""

    accuracy: np.ndarray
    macro_f1: np.ndarray
    l2: np.ndarray  # the L2 strength chosen for each layer on dev


@dataclass(frozen=True, eq=False)
class TrainedProbes:
    """Everything needed to run the probes again, in numpy (attribution rebuilds them from this).

    A probe sees `z = (x - mean) / std`. Linear: `logits = z @ weights + bias` with `weights`
    `[L, D, C]`. MLP: `logits = relu(z @ hidden_weights + hidden_bias) @ weights + bias`
    with `hidden_weights` `[L, D, H]`, `hidden_bias` `[L, H]` and `weights` `[L, H, C]`.
    `dev_accuracy` `[G, L]` is each grid value's dev accuracy, for the curve of L2 against
    accuracy. `endings` says per layer whether the kept fit converged: linear fits end
    `converged` (no gradient entry above the tolerance), `stalled` (no step lowered the loss
    any more, the gradient still above it) or `iteration limit`; MLP fits `converged` (early
    stopping on dev ended them) or `epoch limit` (still improving when the epochs ran out).
    """

    kind: ProbeKind
    mean: np.ndarray  # [L, D]
    std: np.ndarray  # [L, D]
    weights: np.ndarray  # [L, D, C] linear, [L, H, C] mlp
    bias: np.ndarray  # [L, C]
    l2: np.ndarray  # [L]
    l2_grid: np.ndarray  # [G]
    dev_accuracy: np.ndarray  # [G, L]
    hidden_weights: np.ndarray | None = None  # [L, D, H] mlp only
    hidden_bias: np.ndarray | None = None  # [L, H] mlp only
    dev_rows: int = 0  # how many dev rows chose the strengths (0: not known, probes saved before)
    endings: tuple[str, ...] = ()  # [L] how each layer's kept fit ended

    @property
    def unconverged(self) -> list[int]:
        """The layers whose kept fit did not converge (stopped on its iteration limit, or stalled)."""
        return [layer for layer, ending in enumerate(self.endings) if ending != "converged"]

    @property
    def num_layers(self) -> int:
        return int(self.mean.shape[0])

    @property
    def num_classes(self) -> int:
        return int(self.bias.shape[1])

    @property
    def chosen_strengths(self) -> npt.NDArray[np.floating[Any]]:
        """`[L]` the grid value each layer chose on dev (`l2` may be it rescaled to more rows); give it as another
        probe's `layer_l2` to train that probe at the same strengths."""
        return cast(npt.NDArray[np.floating[Any]], self.l2_grid[self._chosen])

    @property
    def chosen_dev_accuracy(self) -> npt.NDArray[np.floating[Any]]:
        """`[L]` each layer's dev accuracy at the strength it chose (what a caller picking a layer should compare)."""
        return cast(npt.NDArray[np.floating[Any]], self.dev_accuracy[self._chosen, np.arange(self.num_layers)])

    @property
    def _chosen(self) -> np.ndarray:
        """`[L]` the index into `l2_grid` of the strength each layer chose on dev (`_choose`)."""
        return _choose(self.dev_accuracy.T, self.l2_grid, self.dev_rows)

    def logits(self, X: FeatureRows) -> np.ndarray:
        """`[N, L, C]` class scores of every layer's probe on `X` `[N, L, D]`."""
        X = _check_features(X, self.mean.shape[0], self.mean.shape[1])
        out = np.empty((X.shape[0], self.num_layers, self.num_classes), dtype=np.float32)
        for layer, start, scores in self._scores(X):
            out[start : start + len(scores), layer] = scores.numpy()
        return out

    def predict(self, X: FeatureRows) -> np.ndarray:
        """`[N, L]` predicted class of every layer's probe, EVAL_BATCH rows at a time (no `[N, L, C]` scores held)."""
        X = _check_features(X, self.mean.shape[0], self.mean.shape[1])
        predicted = np.empty((X.shape[0], self.num_layers), dtype=np.int64)
        for layer, start, scores in self._scores(X):
            predicted[start : start + len(scores), layer] = scores.argmax(1).numpy()
        return predicted

    def _scores(self, X: FeatureRows) -> Iterator[tuple[int, int, torch.Tensor]]:
        """`(layer, first row, [rows, C] scores)`, a layer and EVAL_BATCH rows at a time.

        Each block of rows is standardised in one reused float32 buffer, as in training (`_Rows`): folding the
        standardisation into the weights instead (x·(w/std) − mean·(w/std)) cancels large terms in float32 and
        flips the decisions of features that vary little around a large mean.
        """
        buffer = torch.empty(min(len(X), EVAL_BATCH), X.shape[2])
        first, first_bias = (self.hidden_weights, self.hidden_bias) if self.kind == "mlp" else (self.weights, self.bias)
        assert first is not None and first_bias is not None  # an MLP probe has its hidden layer
        for layer in range(self.num_layers):
            weights = torch.from_numpy(np.ascontiguousarray(first[layer].T, dtype=np.float32))
            shift = torch.from_numpy(np.asarray(first_bias[layer], dtype=np.float32))
            mean, std = (torch.from_numpy(np.asarray(value[layer], dtype=np.float32)) for value in (self.mean, self.std))
            rows = X[:, layer]
            for start in range(0, len(X), EVAL_BATCH):
                block = _copy_rows(rows[start : start + EVAL_BATCH], buffer).sub_(mean).div_(std)
                scores = cpu_linear.product(block, weights, shift)
                if self.kind == "mlp":
                    scores = scores.relu_() @ torch.from_numpy(self.weights[layer]) + torch.from_numpy(self.bias[layer])
                yield layer, start, scores


@dataclass(frozen=True)
class ProbeTraining:
    """How long and in what steps a probe trains (the defaults are the probing command's): `epochs`, L-BFGS
    iterations per L2 value for a linear probe (None: 500), Adam epochs for an MLP (None: 100); and for an MLP its
    `hidden` units, `patience` (epochs without a better dev accuracy before it stops), `batch_size` rows a step and `lr`.
    """

    epochs: int | None = None
    hidden: int = 256
    patience: int = 10
    batch_size: int = 256
    lr: float = 1e-3


def train_probes(
    X_train: FeatureRows,
    y_train: np.ndarray,
    X_dev: FeatureRows,
    y_dev: np.ndarray,
    *,
    num_classes: int,
    kind: ProbeKind = "linear",
    l2_grid: Sequence[float] = L2_GRID,
    layer_l2: Sequence[float] | np.ndarray | None = None,
    training: ProbeTraining = ProbeTraining(),
    device: str | torch.device = "cpu",
    seed: int = 0,
    cancel: threading.Event | None = None,
) -> TrainedProbes:
    """Train one probe per layer for every L2 strength, keep per layer the best on dev.

    The loss of each (layer, L2) probe is `mean cross-entropy + l2 * ||W||²` (biases are not
    penalised). Multiplying scikit-learn's `C * sum cross-entropy + ||W||² / 2` by
    `1 / (C * N)` shows the two have the same minimum when `C = 1 / (2 * l2 * N)`, N being
    the number of training rows.

    `linear`: multinomial logistic regression, full batch, L-BFGS with a backtracking line
    search (`analyses.probing.lbfgs`), from the strongest penalty to the weakest, each fit starting from
    the previous one's weights; at most `training.epochs` iterations per L2 value (default 500),
    stopping once no gradient exceeds 1e-4 (scikit-learn's default `tol` for the same loss). `mlp`: one ReLU
    layer of `training.hidden` units, L2 on both weight matrices, Adam on shuffled mini-batches for
    at most `training.epochs` epochs (default 100), keeping each probe's best dev epoch and stopping
    once no probe improved for `training.patience` epochs.

    `layer_l2` (linear probes only): one strength per layer, chosen elsewhere (another probe's
    `chosen_strengths`), instead of the search over `l2_grid`: baselines trained as the same
    probes as the task's (Hewitt & Liang 2019 train the control task with the task's
    hyperparameters). `dev_accuracy` is then NaN for the strengths a layer did not try.

    Tensors live on `device` ("auto" picks the GPU). Deterministic for a given `seed`
    and device. Raises `Cancelled` soon after `cancel` is set.
    """
    X_train = _check_features(X_train)
    num_layers, dim = X_train.shape[1:]
    X_dev = _check_features(X_dev, num_layers, dim)
    y_train = _check_labels(y_train, len(X_train), num_classes, "training")
    y_dev = _check_labels(y_dev, len(X_dev), num_classes, "dev")
    grid = np.asarray(l2_grid, dtype=np.float64)
    if grid.ndim != 1 or len(grid) == 0 or np.any(grid < 0):
        raise InputError("the L2 grid must be one or more non-negative numbers")
    if kind not in ("linear", "mlp"):
        raise InputError(f"unknown probe kind {kind!r}; use linear or mlp")
    fixed_l2 = None if layer_l2 is None else np.asarray(layer_l2, dtype=np.float64)
    if fixed_l2 is not None:
        if kind != "linear" or fixed_l2.shape != (num_layers,) or np.any(fixed_l2 < 0):
            raise InputError(f"fixed L2 strengths are for linear probes, one non-negative number per layer ({num_layers})")
        grid = np.unique(fixed_l2)
    if min(training.hidden, training.patience, training.batch_size, 1 if training.epochs is None else training.epochs) < 1:
        raise InputError("hidden units, epochs, patience and batch size must be at least 1")
    epochs = training.epochs if training.epochs is not None else LINEAR_MAX_ITER if kind == "linear" else MLP_EPOCHS
    device = device if isinstance(device, torch.device) else resolve_device(device)
    generator = torch.Generator().manual_seed(seed)

    if kind == "linear":
        return _train_linear(X_train, [(y_train, y_dev)], X_dev, grid, num_classes, epochs, device, generator, cancel, fixed_l2)[0]
    mean, std, Z = _standardise(X_train, device)
    _, _, Z_dev = _standardise(X_dev, device, mean, std)
    y = torch.as_tensor(y_train, device=device)
    l2 = torch.as_tensor(grid, dtype=torch.float32, device=device)
    params, dev_correct, stale = _train_mlp(Z, y, Z_dev, y_dev, l2, num_classes, training, epochs, generator, cancel)
    del Z, Z_dev
    chosen = _choose(dev_correct / len(y_dev), grid, len(y_dev))  # [L]
    stopped = stale[np.arange(num_layers), chosen] >= training.patience  # early stopping ended the kept probe's training
    common = {
        "kind": kind,
        "mean": mean.cpu().numpy(),
        "std": std.cpu().numpy(),
        "l2": grid[chosen],
        "l2_grid": grid,
        "dev_accuracy": dev_correct.T.astype(np.float64) / len(y_dev),
        "dev_rows": len(y_dev),
        "endings": tuple("converged" if done else "epoch limit" for done in stopped),
    }
    layers = np.arange(num_layers)
    numpy = [p.cpu().numpy() for p in params]  # the grid is axis 2 of 4-d parameters, axis 1 of 3-d ones
    numpy = [p[layers, :, chosen] if p.ndim == 4 else p[layers, chosen] for p in numpy]
    hidden_weights, hidden_bias, weights, bias = numpy
    return TrainedProbes(weights=weights, bias=bias, hidden_weights=hidden_weights, hidden_bias=hidden_bias, **common)


def train_with_control(
    X_train: FeatureRows,
    y_train: np.ndarray,
    X_dev: FeatureRows,
    y_dev: np.ndarray,
    control_train: np.ndarray,
    control_dev: np.ndarray,
    *,
    num_classes: int,
    device: str | torch.device = "cpu",
    seed: int = 0,
    cancel: threading.Event | None = None,
) -> tuple[TrainedProbes, TrainedProbes]:
    """Linear probes for a task and for its control task (Hewitt & Liang 2019) on the same features.

    The same two results as `train_probes` for the task and then `train_probes(...,
    layer_l2=task.chosen_strengths)` for the control labels, at the cost of fewer passes over
    the rows: the two final fits per layer share each one (`_fit_together`).
    """
    X_train = _check_features(X_train)
    num_layers, dim = X_train.shape[1:]
    X_dev = _check_features(X_dev, num_layers, dim)
    label_sets = [
        (_check_labels(train, len(X_train), num_classes, "training"), _check_labels(dev, len(X_dev), num_classes, "dev"))
        for train, dev in ((y_train, y_dev), (control_train, control_dev))
    ]
    device = device if isinstance(device, torch.device) else resolve_device(device)
    generator = torch.Generator().manual_seed(seed)
    grid = np.asarray(L2_GRID, dtype=np.float64)
    task, control = _train_linear(X_train, label_sets, X_dev, grid, num_classes, LINEAR_MAX_ITER, device, generator, cancel)
    return task, control


def score(probes: TrainedProbes, X: FeatureRows, y: np.ndarray, num_classes: int) -> ProbeScores:
    """Accuracy and macro-F1 of every layer's probe on `X`, `y`.

    Macro-F1 averages over the classes that occur in `y` or in the predictions, as
    scikit-learn's `f1_score(average="macro")` does, so a class absent from a small test set
    does not count as a zero.
    """
    y = _check_labels(y, len(X), num_classes, "test")
    predicted = probes.predict(X)
    accuracy = (predicted == y[:, None]).mean(0)
    macro_f1 = np.array([_macro_f1(y, predicted[:, layer], num_classes) for layer in range(predicted.shape[1])])
    return ProbeScores(accuracy=accuracy, macro_f1=macro_f1, l2=probes.l2.copy())


def selectivity(task: ProbeScores, control: ProbeScores) -> npt.NDArray[np.floating[Any]]:
    """Hewitt & Liang's selectivity per layer: task accuracy minus control-task accuracy."""
    return cast(npt.NDArray[np.floating[Any]], task.accuracy - control.accuracy)


def majority_baseline(y_train: np.ndarray, y_test: np.ndarray) -> float:
    """Accuracy on `y_test` of always answering the most frequent training class (ties: the lower label)."""
    y_train, y_test = np.asarray(y_train), np.asarray(y_test)
    if len(y_train) == 0 or len(y_test) == 0:
        return float("nan")
    majority = np.bincount(y_train).argmax()
    return float(np.mean(y_test == majority))


def expected_layer(scores: np.ndarray) -> float:
    """Tenney et al.'s (2019) centre of gravity: at which layer does the score arrive?

    With per-layer scores `s_0 .. s_{L-1}` (layer 0 the embeddings) and differential scores
    `Δ_l = s_l - s_{l-1}`:

        E[l] = sum_{l=1}^{L-1} l * Δ_l / sum_{l=1}^{L-1} Δ_l

    The denominator telescopes to `s_{L-1} - s_0`; when it is 0 (all scores equal, or the
    last equal to the first) there is no gain to locate and the result is NaN. Tenney et al.
    score cumulative scalar mixes, whose Δ are (nearly) never negative; independent
    per-layer probes can lose accuracy from one layer to the next, and negative Δ then pull
    the result, which may leave `[1, L-1]`. Pass `np.maximum.accumulate(scores)` for the
    cumulative reading.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or len(scores) < 2:
        return float("nan")
    deltas = np.diff(scores)
    total = deltas.sum()
    if abs(total) <= 1e-12 * max(1.0, np.abs(scores).max()):
        return float("nan")
    return float((np.arange(1, len(scores)) * deltas).sum() / total)


def control_labels(
    word_types: Sequence[str],
    num_classes: int,
    seed: int = 0,
    distribution: Sequence[float] | np.ndarray | None = None,
) -> dict[str, int]:
    """Hewitt & Liang's (2019) control task: one fixed random label per word type.

    Each distinct type gets a label drawn from `distribution` (the task's empirical label
    distribution, e.g. `np.bincount(y, minlength=C) / len(y)`; uniform when omitted). The
    draw comes from a hash of the seed and the type, so a type's label does not depend on
    the order or the set of the other types: training and test splits mapped separately
    agree. Types are matched exactly (lower-case them first for an uncased model).
    """
    if num_classes < 1:
        raise InputError("a control task needs at least one class")
    p = np.full(num_classes, 1.0 / num_classes) if distribution is None else np.asarray(distribution, dtype=np.float64)
    if p.shape != (num_classes,) or np.any(p < 0) or p.sum() <= 0:
        raise InputError(f"the label distribution must be {num_classes} non-negative numbers with a positive sum")
    cumulative = np.cumsum(p / p.sum())
    labels = {}
    for word in dict.fromkeys(word_types):
        digest = hashlib.blake2b(f"{seed}\x00{word}".encode(), digest_size=8).digest()
        u = int.from_bytes(digest, "little") / 2.0**64  # uniform in [0, 1)
        labels[word] = min(int(np.searchsorted(cumulative, u, side="right")), num_classes - 1)
    return labels


# --- training, on the device --------------------------------------------------------------


def _standardise(
    X: FeatureRows, device: torch.device, mean: torch.Tensor | None = None, std: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One `[L, N, D]` float32 copy of X on the device, each layer standardised (see `_standardise_layer`)."""
    n, num_layers, dim = X.shape
    Z = torch.empty(num_layers, n, dim, dtype=torch.float32, device=device)
    means, stds = torch.empty(num_layers, dim, device=device), torch.empty(num_layers, dim, device=device)
    for layer in range(num_layers):
        means[layer], stds[layer], _ = _standardise_layer(
            X[:, layer], device, None if mean is None else mean[layer], None if std is None else std[layer], out=Z[layer]
        )
    return means, stds, Z


def _standardise_layer(
    X: FeatureRows,
    device: torch.device,
    mean: torch.Tensor | None = None,
    std: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A float32 copy of one layer's features `[N, D]` on the device (in `out` if given), standardised in place.

    Mean and std (population) come from X itself unless given; std is floored at STD_FLOOR.
    """
    Z = torch.empty(X.shape, dtype=torch.float32, device=device) if out is None else out
    with warnings.catch_warnings():  # features are often a read-only memory map; they are only read here
        warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
        Z.copy_(torch.from_numpy(np.asarray(X)))
    if mean is not None:
        assert std is not None  # given with the mean
        return mean, std, Z.sub_(mean).div_(std)
    mean = Z.mean(0)
    Z.sub_(mean)
    # Sums of squares over blocks of rows that stay in the cache: 8x faster on the CPU than
    # vector_norm over the rows of the whole matrix, and 20x faster than std_mean.
    squares = torch.zeros_like(mean)
    for start in range(0, len(Z), STATISTICS_BLOCK):
        squares += Z[start : start + STATISTICS_BLOCK].square().sum(0)
    std = squares.div_(len(Z)).sqrt_().clamp_min_(STD_FLOOR)
    return mean, std, Z.div_(std)


def _train_linear(
    X_train: FeatureRows,
    label_sets: list[tuple[np.ndarray, np.ndarray]],
    X_dev: FeatureRows,
    grid: np.ndarray,
    num_classes: int,
    max_iter: int,
    device: torch.device,
    generator: torch.Generator,
    cancel: threading.Event | None,
    layer_l2: np.ndarray | None = None,
) -> list[TrainedProbes]:
    """Fit each layer's linear probe in turn; at most FIT_BLOCK rows are held at a time (on a GPU, see `block_rows`).

    Per layer: every L2 strength of the grid, from the strongest to the weakest, each fit
    starting from the last (a weakly regularised fit needs ten times the iterations of a
    strong one, and warm starts along the path save most of them); the strength with the
    best dev accuracy is kept. Above SELECTION_ROWS training rows the grid runs on a random
    subset of that many rows (the same for every layer), and the strength found there is
    carried to all rows at the same prior strength, scikit-learn's C: the loss averages the
    cross-entropy over the rows, so l2_all = l2_subset × n_subset / n. The fit on all rows
    starts from the subset's weights. The subset's fits stop at a gradient of
    SELECTION_TOLERANCE, the final one at GRADIENT_TOLERANCE: on the generated treebank's
    deprel this takes 57% of the subset's iterations off; no layer's test accuracy fell by
    more than 0.05 point (one rose 0.6, choosing another strength).

    `label_sets`: `(y_train, y_dev)` pairs on the same features, one TrainedProbes each. The
    first chooses each layer's strength; the others are trained at it, each exactly as with
    `layer_l2` set to the first's `chosen_strengths` (Hewitt & Liang's control task), their
    final fits sharing every pass over the rows with the first's (`_fit_together`).

    Memory is flat in the number of rows: beyond FIT_BLOCK rows the final fit, and beyond
    SCORE_BLOCK rows the dev scores, read the features (often a memory map) a block at a
    time, converting each block into one reused buffer, instead of holding a float32 copy of
    the whole layer.

    Speed: L-BFGS runs in whitened coordinates (`_Correlation`, `_Logistic`); with `layer_l2`
    each layer fits one strength only. Precision: the rows themselves are standardised as
    they are read (`_Rows`), so that features varying little around a large mean ([CLS] of an
    anisotropic model) are not lost to float32 cancellation, wherever the fit runs and
    whichever kernels it uses.
    """
    n, num_layers, dim = X_train.shape
    labels = [(torch.as_tensor(y, device=device), torch.as_tensor(y_dev, device=device)) for y, y_dev in label_sets]
    subset = torch.randperm(n, generator=generator)[:SELECTION_ROWS] if n > SELECTION_ROWS else None
    strongest_first = sorted(range(len(grid)), key=lambda index: -grid[index])
    found = [_Found.empty(num_layers, dim, num_classes, len(grid)) for _ in labels]
    # One buffer of each kind for every layer: fresh memory costs page faults.
    buffer = torch.empty(min(n, block_rows(device, dim, FIT_BLOCK)), dim, device=device)
    dev_buffer = torch.empty(min(len(X_dev), block_rows(device, dim, SCORE_BLOCK)), dim, device=device)
    tolerance = GRADIENT_TOLERANCE if subset is None else SELECTION_TOLERANCE  # halves the subset's iterations
    for layer in range(num_layers):
        rows = _Rows(X_train[:, layer], labels[0][0], device, buffer)
        dev_rows = _Rows(X_dev[:, layer], labels[0][1], device, dev_buffer, rows.mean, rows.std, block=SCORE_BLOCK)
        if subset is None:
            path_rows = rows
        else:
            picked = np.asarray(X_train[subset.numpy(), layer])  # a bounded copy: SELECTION_ROWS rows
            path_rows = _Rows(picked, labels[0][0][subset.to(device)], device, None, rows.mean, rows.std)
        shape = _Correlation.of(path_rows)  # of the rows alone: every label set's
        tried = strongest_first if layer_l2 is None else [int(np.searchsorted(grid, layer_l2[layer]))]
        fits = []  # per label set: (all its rows, the rows of its path, the path's chosen W and b)
        for number, (y, y_dev) in enumerate(labels):
            if number == 0:
                every, dev, path = rows, dev_rows, path_rows
            else:  # the same rows with another set's labels (a control task's)
                every, dev = rows.relabelled(y), dev_rows.relabelled(y_dev)
                path = every if subset is None else path_rows.relabelled(y[subset.to(device)])
            chosen, fit = _walk(path, dev, grid, tried, shape, found[number].dev_correct[layer], num_classes, max_iter, tolerance, cancel)
            tried = [chosen]  # the others at the first's strength
            fits.append((every, path, fit))
        l2 = grid[chosen] if subset is None else grid[chosen] * len(subset) / n
        if subset is not None:
            problems = [_Logistic(every, l2, fit.W, fit.b, _Correlation.of(path, fit.W, fit.b)) for every, path, fit in fits]
            kept = _fit_together(problems, max_iter, GRADIENT_TOLERANCE, cancel)
        else:
            kept = [fit for _, _, fit in fits]
        for result, fit in zip(found, kept, strict=True):
            result.keep(layer, rows, fit, l2)
    return [
        result.probes(grid, len(y_dev), only_tried=number > 0)
        for number, (result, (_, y_dev)) in enumerate(zip(found, labels, strict=True))
    ]


def _walk(
    path_rows: _Rows,
    dev_rows: _Rows,
    grid: np.ndarray,
    tried: list[int],
    shape: _Correlation,
    dev_correct: np.ndarray,
    num_classes: int,
    max_iter: int,
    tolerance: float,
    cancel: threading.Event | None,
) -> tuple[int, _Fit]:
    """Fit the strengths `tried` in turn on `path_rows`, each from the last's weights, counting each one's dev rows
    right into `dev_correct` `[G]`; return the index chosen on dev (`_choose`) and its `_Fit`."""
    W = torch.zeros(num_classes, path_rows.X.shape[1], device=path_rows.device)
    b = torch.log(torch.bincount(path_rows.y, minlength=num_classes).float().clamp_min(0.5) / len(path_rows.y))  # W = 0's optimum
    path: dict[int, _Fit] = {}
    for index in tried:
        fit = path[index] = _fit_logistic(path_rows, float(grid[index]), W, b, shape, max_iter, tolerance, cancel)
        W, b = fit.W, fit.b
        dev_correct[index] = dev_rows.correct(W, b)
    accuracy = np.where(dev_correct < 0, np.nan, dev_correct / len(dev_rows.y))
    chosen = int(_choose(accuracy[None], grid, len(dev_rows.y))[0])
    return chosen, path[chosen]


@dataclass(frozen=True)
class _Fit:
    """One fitted probe on standardised features, `W` `[C, D]` and `b` `[C]`, and how its L-BFGS run ended."""

    W: torch.Tensor
    b: torch.Tensor
    ending: str


@dataclass
class _Found:
    """What `_train_linear` keeps of each layer's probe for one label set."""

    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray
    bias: np.ndarray
    l2: np.ndarray
    dev_correct: np.ndarray  # [L, G], -1 where a strength was not tried
    endings: list[str]

    @classmethod
    def empty(cls, num_layers: int, dim: int, num_classes: int, strengths: int) -> _Found:
        return cls(
            np.empty((num_layers, dim), np.float32),
            np.empty((num_layers, dim), np.float32),
            np.empty((num_layers, dim, num_classes), np.float32),
            np.empty((num_layers, num_classes), np.float32),
            np.empty(num_layers),
            np.full((num_layers, strengths), -1, np.int64),
            [""] * num_layers,
        )

    def keep(self, layer: int, rows: _Rows, fit: _Fit, l2: float) -> None:
        self.mean[layer], self.std[layer] = rows.mean.cpu().numpy(), rows.std.cpu().numpy()
        self.weights[layer], self.bias[layer], self.l2[layer] = fit.W.T.cpu().numpy(), fit.b.cpu().numpy(), l2
        self.endings[layer] = fit.ending

    def probes(self, grid: np.ndarray, dev_rows: int, only_tried: bool) -> TrainedProbes:
        """The TrainedProbes; `only_tried`: over the strengths some layer tried, as `layer_l2` gives them."""
        dev_correct = self.dev_correct
        if only_tried:
            columns = np.flatnonzero((dev_correct >= 0).any(0))
            grid, dev_correct = grid[columns], dev_correct[:, columns]
        dev_accuracy = np.where(dev_correct.T < 0, np.nan, dev_correct.T / dev_rows)
        return TrainedProbes(
            kind="linear",
            mean=self.mean,
            std=self.std,
            weights=self.weights,
            bias=self.bias,
            l2=self.l2,
            l2_grid=grid,
            dev_accuracy=dev_accuracy,
            dev_rows=dev_rows,
            endings=tuple(self.endings),
        )


class _Rows:
    """One layer's feature rows `[N, D]` and labels, standardised float32, handed out as blocks of at most `block` rows.

    Up to `block` (FIT_BLOCK) rows are converted and standardised once, in `buffer` (a fresh
    tensor if None), and handed out whole; more are read from `X` again, a block at a time
    into the buffer and standardised there, on every call of `blocks` (each L-BFGS
    evaluation), so that memory does not grow with N. Mean and std (population) come from X
    itself unless given; std is floored at STD_FLOOR.

    The rows are standardised, not the weights: with x = mean + δ, a product on the raw rows
    (x·(w/std) − mean·(w/std)) sums terms of the size of the mean that cancel down to those of
    δ, and where δ is a thousandth of the mean (MiniLM's [CLS]: a norm of 9.7, a spread of
    4e-4 per feature) float32 keeps three digits of the answer. Fits then stalled wherever the
    noise happened to stop them: a probe's accuracy moved by 0.1 between two CPU kernels.
    """

    def __init__(
        self,
        X: FeatureRows,
        y: torch.Tensor,
        device: torch.device,
        buffer: torch.Tensor | None,
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
        block: int | None = None,
    ) -> None:
        self.X, self.y, self.device = X, y, device
        n = len(X)
        self.block = block_rows(torch.device(device), X.shape[1], block or FIT_BLOCK)
        self.buffer = buffer if buffer is not None else torch.empty(min(n, self.block), X.shape[1], device=device)
        raw = _copy_rows(X, self.buffer) if n <= self.block else None
        if mean is None:
            self.mean, self.std = _streamed_statistics(lambda: _slices(self._raw_blocks(raw)))
        else:
            assert std is not None  # given with the mean
            self.mean, self.std = mean, std
        self.whole = None if raw is None else raw.sub_(self.mean).div_(self.std)
        self._class_sums: tuple[torch.Tensor, torch.Tensor] | None = None

    def relabelled(self, y: torch.Tensor) -> _Rows:
        """The same rows (their buffer, statistics and converted block) with other labels: a control task's."""
        other = copy.copy(self)
        other.y, other._class_sums = y, None
        return other

    def _raw_blocks(self, whole: torch.Tensor | None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(float32 rows as stored, their labels), block after block: for the statistics, before standardising."""
        if whole is not None:
            yield whole, self.y
            return
        for start in range(0, len(self.X), self.block):
            end = min(start + self.block, len(self.X))
            yield _copy_rows(self.X[start:end], self.buffer), self.y[start:end]

    def blocks(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(standardised float32 rows, their labels), block after block; the block is only valid until the next one."""
        if self.whole is not None:
            yield self.whole, self.y
            return
        for X, y in self._raw_blocks(None):
            yield X.sub_(self.mean).div_(self.std), y

    def slices(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """`blocks`, cut into STATISTICS_BLOCK rows (see `_slices`)."""
        return _slices(self.blocks())

    def class_sums(self, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`[C, D]` float64 sums of the standardised rows of each class, and `[C]` the class counts (computed once)."""
        if self._class_sums is None:
            sums = torch.zeros(classes, self.X.shape[1], dtype=torch.float64, device=self.device)
            for X, y in self.slices():  # float32 partial sums of a few rows: no float64 copy of a block
                sums += torch.zeros(classes, X.shape[1], device=self.device).index_add_(0, y, X)
            self._class_sums = sums, torch.bincount(self.y, minlength=classes).double()
        return self._class_sums

    def correct(self, W: torch.Tensor, b: torch.Tensor) -> int:
        """How many rows the probe `W`, `b` (on standardised features) gets right."""
        return sum(int((cpu_linear.product(X, W, b).argmax(1) == y).sum()) for X, y in self.blocks())


def _slices(blocks: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Blocks of rows cut into STATISTICS_BLOCK rows: sums over a few rows stay in the caches, and their temporaries
    (a float64 sum converts its rows first) stay small."""
    for X, y in blocks:
        for start in range(0, len(X), STATISTICS_BLOCK):
            yield X[start : start + STATISTICS_BLOCK], y[start : start + STATISTICS_BLOCK]


def block_rows(device: torch.device, dim: int, block: int) -> int:
    """How many float32 rows of `dim` features a fit holds at once on `device`.

    On the CPU `block` (FIT_BLOCK, SCORE_BLOCK), so that host memory stays flat in the corpus.
    On a GPU the rows past a block would be copied from the host again at every L-BFGS
    evaluation, and holding them costs GPU memory, not the host's: up to DEVICE_BLOCK_BYTES there.
    """
    return block if device.type == "cpu" else max(block, DEVICE_BLOCK_BYTES // (4 * dim))


def _streamed_statistics(slices: Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std (population, floored at STD_FLOOR) of a layer's rows, from `slices()` (two passes: no float64 copy)."""
    total: torch.Tensor | None = None
    count = 0
    for X, _ in slices():
        part = X.sum(0, dtype=torch.float64)
        total = part if total is None else total + part
        count += len(X)
    assert total is not None  # a probe has training rows (`_check_features`)
    mean = (total / count).float()
    squares = torch.zeros_like(total)
    for X, _ in slices():  # slices that stay in the cache: several times faster on the CPU than one reduction over all rows
        squares += (X - mean).square().sum(0, dtype=torch.float64)
    return mean, (squares / count).sqrt().float().clamp_min_(STD_FLOOR)


def _copy_rows(X: FeatureRows, buffer: torch.Tensor) -> torch.Tensor:
    """The rows of X as float32 in the first rows of `buffer`."""
    with warnings.catch_warnings():  # features are often a read-only memory map; they are only read here
        warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
        return buffer[: len(X)].copy_(torch.from_numpy(np.asarray(X)))


@dataclass(frozen=True, eq=False)
class _Correlation:
    """Eigenvalues `[D]` and eigenvectors `[D, D]` of the standardised features' correlation matrix R.

    It shapes the loss's curvature: at the start of a fit (W = 0, the biases at the class
    frequencies p) the Hessian of the mean cross-entropy in class c's weights is
    p_c (1 − p_c) R, and the penalty adds 2 l2 I. `_fit_logistic` runs L-BFGS in
    coordinates where that block-diagonal estimate is the identity. For a fit that starts
    from trained weights (the final fit on all rows), R weighs each row by how unsure those
    weights are of it, Σ_c p_c (1 − p_c), and `scales` holds each class's mean p_c (1 − p_c):
    most rows are then classified with confidence, and the curvature lies in the others.
    """

    values: torch.Tensor
    vectors: torch.Tensor
    scales: torch.Tensor | None = None  # [C] measured at given weights; None: p (1 - p) of the class frequencies

    @classmethod
    def of(cls, rows: _Rows, W: torch.Tensor | None = None, b: torch.Tensor | None = None) -> _Correlation:
        """At W = 0 (None) the plain correlation; at given weights, rows weighted by how unsure the probe is of them."""
        dim = rows.X.shape[1]
        gram = torch.zeros(dim, dim, dtype=torch.float64, device=rows.device)
        total, scales = 0.0, None
        for Z, _ in rows.slices():
            if W is None:
                gram += (Z.T @ Z).double()
                total += len(Z)
                continue
            p = torch.softmax(cpu_linear.product(Z, W, b), 1)
            unsure = p * (1 - p)  # [N, C]
            weight = unsure.sum(1)
            gram += ((Z * weight[:, None]).T @ Z).double()
            total += float(weight.sum())
            scales = unsure.sum(0) if scales is None else scales + unsure.sum(0)
        values, vectors = torch.linalg.eigh(gram / max(total, 1e-12))
        return cls(values.clamp_min(0).float(), vectors.float(), None if scales is None else scales / len(rows.y))


def _fit_logistic(
    rows: _Rows,
    l2: float,
    weights: torch.Tensor,
    bias: torch.Tensor,
    shape: _Correlation,
    max_iter: int,
    tolerance: float,
    cancel: threading.Event | None,
) -> _Fit:
    """Multinomial logistic regression on `rows` by L-BFGS from `weights` `[C, D]`, `bias` `[C]` (standardised features).

    Loss: mean cross-entropy + `l2 * ||W||²`; see `_Logistic` for how it is computed and the
    coordinates L-BFGS runs in. Returns the fitted probe and how its run ended.
    """
    return _fit_together([_Logistic(rows, l2, weights, bias, shape)], max_iter, tolerance, cancel)[0]


def _fit_together(problems: list[_Logistic], max_iter: int, tolerance: float, cancel: threading.Event | None) -> list[_Fit]:
    """Fit probes whose rows are the same features (a task and its control task), each exactly as alone, their
    evaluations sharing each pass over the rows: one product for all their classes per block, the rows read once."""
    rows = problems[0].rows

    def evaluate(points: list[tuple[int, torch.Tensor]]) -> list[tuple[float, torch.Tensor]]:
        _check_cancel(cancel)
        asked = [(problems[index], *problems[index].unpack(theta)) for index, theta in points]  # (problem, W, b)
        passes = _passes(rows, [(W, b) for _, W, b in asked])
        return [problem.loss_and_gradient(W, b, *sums) for (problem, W, b), sums in zip(asked, passes, strict=True)]

    found = lbfgs.minimise_together(
        evaluate,
        [problem.start for problem in problems],
        max_iter=max_iter,
        tolerance=tolerance,
        sizes=[problem.original_size for problem in problems],
    )
    return [_Fit(*problem.unpack(minimum.x), minimum.ending) for problem, minimum in zip(problems, found, strict=True)]


def _passes(rows: _Rows, probes: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[float, torch.Tensor, torch.Tensor]]:
    """For probes `(W, b)` on the standardised rows: each one's sum of log-normalisers, and `[C, D]`, `[C]` sums of its
    class probabilities times the rows, in one pass over the rows' blocks whatever the number of probes.

    In the `[C, N]` layout the softmax reduces across rows of contiguous memory; the probes' classes are stacked
    so that one product per block serves them all (a block is read once, and small products waste most of a
    kernel's width: 17 or 34 classes cost the same on a 2-core Xeon).
    """
    A, c = probes[0] if len(probes) == 1 else (torch.cat([weights for weights, _ in probes]), torch.cat([bias for _, bias in probes]))
    ends = np.cumsum([len(bias) for _, bias in probes]).tolist()
    log_normalisers = [0.0] * len(probes)
    gradient_A, gradient_c = torch.zeros_like(A), torch.zeros_like(c)
    for X, _ in rows.blocks():
        logits = cpu_linear.product(A, X).add_(c[:, None])  # [ΣC, N]
        for number, (begin, end) in enumerate(zip([0, *ends], ends)):
            part = logits[begin:end]  # one probe's classes, turned into its probabilities in place
            top = part.amax(0)
            total = part.sub_(top).exp_().sum(0)
            log_normalisers[number] += float(total.log().add_(top).sum(dtype=torch.float64))
            part.div_(total)
        gradient_A += logits @ X
        gradient_c += logits.sum(1)
    return [
        (log_normalisers[number], gradient_A[begin:end], gradient_c[begin:end]) for number, (begin, end) in enumerate(zip([0, *ends], ends))
    ]


class _Logistic:
    """One probe's loss on standardised features, in the coordinates its L-BFGS runs in.

    Loss: mean cross-entropy + `l2 * ||W||²`; its gradient is computed by hand (no autograd
    graph for one product and a softmax), summed over the rows' blocks by `_passes`. The sum
    of the true classes' logits is linear in the weights, from each class's row sum
    (`class_sums`), so no per-row gather or one-hot is needed.

    L-BFGS starts from a scaled identity as its Hessian estimate, which standardised but
    strongly correlated hidden states make a poor one: its steps follow the few largest
    directions of the features. It therefore works in coordinates `V` where the loss's
    block-diagonal curvature at the start, `p_c (1 − p_c) R + 2 l2 I` for class c's weights
    (`_Correlation`), is the identity: `W_c = V_c diag(s_c) Uᵀ`, `s_c = (p_c (1 − p_c) λ + 2 l2)^−½`,
    and the bias divided by `sqrt(p (1 − p))` likewise. Same loss, same minimum, in fewer
    evaluations (EWT UPOS on MiniLM, 21 final fits: 1,891 → 1,214). It stops as before, when
    no entry of the gradient in W and b (not in V) exceeds the tolerance (`original_size`).
    """

    def __init__(self, rows: _Rows, l2: float, weights: torch.Tensor, bias: torch.Tensor, shape: _Correlation):
        self.rows, self.l2 = rows, l2
        n = len(rows.y)
        self.classes, self.dim = weights.shape
        curvature = torch.bincount(rows.y, minlength=self.classes).float() / n
        curvature = (curvature * (1 - curvature) if shape.scales is None else shape.scales).clamp_min(1 / n)
        self.bias_scale = curvature.rsqrt()
        self.scale = (curvature[:, None] * shape.values[None, :] + 2 * l2).clamp_min(1e-12).rsqrt()  # [C, D]
        self.U = shape.vectors
        self.sums, self.counts = rows.class_sums(self.classes)
        self.start = torch.cat([((weights @ self.U) / self.scale).reshape(-1), bias / self.bias_scale])

    def unpack(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(W, b)` on the standardised features."""
        V, beta = theta[: self.classes * self.dim].view(self.classes, self.dim), theta[self.classes * self.dim :]
        return (V * self.scale) @ self.U.T, beta * self.bias_scale

    def loss_and_gradient(
        self, W: torch.Tensor, b: torch.Tensor, log_normalisers: float, gradient_W: torch.Tensor, gradient_b: torch.Tensor
    ) -> tuple[float, torch.Tensor]:
        """The loss at `W`, `b` and its gradient in these coordinates, from `_passes`' sums."""
        n, l2 = len(self.rows.y), self.l2
        true_logits = float((W.double() * self.sums).sum() + (b.double() * self.counts).sum())
        gradient_W = gradient_W.sub_(self.sums.float()).div_(n).add_(W, alpha=2 * l2)  # minus the one-hot labels
        gradient_b = gradient_b.sub_(self.counts.float()).div_(n)
        loss = (log_normalisers - true_logits) / n + l2 * float(W.square().sum())
        return loss, torch.cat([((gradient_W @ self.U) * self.scale).view(-1), gradient_b * self.bias_scale])

    def original_size(self, gradient: torch.Tensor) -> float:
        """The largest entry of the gradient in W and b, as without the change of coordinates."""
        gradient_W = (gradient[: self.classes * self.dim].view(self.classes, self.dim) / self.scale) @ self.U.T
        return max(float(gradient_W.abs().max()), float((gradient[self.classes * self.dim :] / self.bias_scale).abs().max()))


def _mlp_logits(params: Sequence[torch.Tensor], Z: torch.Tensor) -> torch.Tensor:
    hidden_weights, hidden_bias, weights, bias = params  # [L, D, G, H], [L, G, H], [L, H, G, C], [L, G, C]
    num_layers, dim, grid, width = hidden_weights.shape
    h = torch.baddbmm(hidden_bias.reshape(num_layers, 1, grid * width), Z, hidden_weights.reshape(num_layers, dim, grid * width))
    h = h.relu_().view(num_layers, -1, grid, width)
    return torch.einsum("lngh,lhgc->lngc", h, weights) + bias[:, None]


def _loss(logits: torch.Tensor, y: torch.Tensor, penalties: torch.Tensor) -> torch.Tensor:
    """Sum over (layer, grid value) of mean cross-entropy, plus the penalties; logits `[L, N, G, C]`."""
    num_layers, n, grid, classes = logits.shape
    targets = y[None, :, None].expand(num_layers, n, grid).reshape(-1)
    return F.cross_entropy(logits.reshape(-1, classes), targets, reduction="sum") / n + penalties


def _train_mlp(
    Z: torch.Tensor,
    y: torch.Tensor,
    Z_dev: torch.Tensor,
    y_dev: np.ndarray,
    l2: torch.Tensor,
    num_classes: int,
    training: ProbeTraining,
    epochs: int,
    generator: torch.Generator,
    cancel: threading.Event | None,
) -> tuple[list[torch.Tensor], np.ndarray, np.ndarray]:
    num_layers, n, dim = Z.shape
    grid, width, patience, batch_size = len(l2), training.hidden, training.patience, training.batch_size

    def uniform(*shape: int, fan_in: int) -> torch.Tensor:  # nn.Linear's initialisation, drawn on the CPU for determinism across devices
        bound = 1 / fan_in**0.5
        return cast(torch.Tensor, ((torch.rand(*shape, generator=generator) * 2 - 1) * bound).to(Z.device).requires_grad_())

    params = [
        uniform(num_layers, dim, grid, width, fan_in=dim),
        uniform(num_layers, grid, width, fan_in=dim),
        uniform(num_layers, width, grid, num_classes, fan_in=width),
        uniform(num_layers, grid, num_classes, fan_in=width),
    ]
    optimizer = torch.optim.Adam(params, lr=training.lr)
    best = [p.detach().clone() for p in params]
    best_correct = np.full((num_layers, grid), -1)
    stale = np.zeros((num_layers, grid), dtype=int)  # epochs since each probe last improved on dev
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator).to(Z.device)
        for start in range(0, n, batch_size):
            _check_cancel(cancel)
            rows = order[start : start + batch_size]
            optimizer.zero_grad()
            penalty = (l2 * (params[0].square().sum((0, 1, 3)) + params[2].square().sum((0, 1, 3)))).sum()
            _loss(_mlp_logits(params, Z[:, rows]), y[rows], penalty).backward()
            optimizer.step()
        # A probe that has stopped stays stopped, as if it had been trained alone.
        correct = _correct(_mlp_logits, params, Z_dev, y_dev)
        improved = (correct > best_correct) & (stale < patience)
        best_correct = np.where(improved, correct, best_correct)
        stale = np.where(improved, 0, stale + 1)
        keep = torch.as_tensor(improved, device=Z.device)
        for saved, p in zip(best, params):
            mask = keep.view(num_layers, 1, grid, 1) if p.dim() == 4 else keep.view(num_layers, grid, 1)
            saved.copy_(torch.where(mask, p.detach(), saved))
        if np.all(stale >= patience):
            break
    return best, best_correct, stale


@torch.no_grad()
def _correct(
    logits_fn: Callable[[Sequence[torch.Tensor], torch.Tensor], torch.Tensor],
    params: Sequence[torch.Tensor],
    Z: torch.Tensor,
    y: np.ndarray,
) -> np.ndarray:
    """`[L, G]` number of rows of Z each (layer, grid value) probe gets right."""
    labels = torch.as_tensor(y, device=Z.device)
    total: torch.Tensor | int = 0
    for start in range(0, Z.shape[1], EVAL_BATCH):
        predicted = logits_fn(params, Z[:, start : start + EVAL_BATCH]).argmax(-1)  # [L, n, G]
        total = total + (predicted == labels[start : start + EVAL_BATCH, None]).sum(1)
    assert isinstance(total, torch.Tensor)  # Z has rows (`_check_features`)
    return total.cpu().numpy()


def _choose(dev_accuracy: np.ndarray, grid: np.ndarray, dev_rows: int) -> np.ndarray:
    """Per layer (`[L, G]` dev accuracies, NaN where a strength was not tried), the grid index of the strongest penalty
    whose dev accuracy is within half a standard error of the best (SELECTION_BAND × √(a(1 − a) / dev rows) at the
    best a); exact ties therefore go to the stronger penalty too. `dev_rows` 0: the plain best.

    Why a band: near its top the accuracy curve is flat, so two strengths often tie or differ by a dev row or two,
    and noise far below what the dev set can tell apart (another CPU kernel path: 1e-6 in the hidden states) flipped
    the plain best, and the test accuracy with it (MiniLM, sentence_length: 4 of 400 test sentences apart). The
    band's edge lies on the curve's slope, where strengths are far apart. Why half an error: a whole one (Breiman's
    one-standard-error rule) keeps penalties a decade too strong where the curve is flat over decades, and lost up to
    0.06 of test accuracy against the best on dev (object_number, layer 1); half of one lost at most 0.03 on the
    built-in tasks and moved none by more than one test sentence between kernel paths (benchmarks/README.md). Where
    every strength is within one whole error of the best, the curve says nothing (a layer at chance, say: MiniLM on
    agreement_attractors), and the strongest penalty is kept: half an error there let the noise maximum choose, and
    one H100 and the CPU chose differently (10 test sentences apart).
    """
    accuracy = np.nan_to_num(np.asarray(dev_accuracy, dtype=np.float64), nan=-np.inf)
    best = accuracy.max(1, keepdims=True)
    error = np.sqrt(np.clip(best * (1 - best), 0, None) / dev_rows) if dev_rows else np.zeros_like(best)
    within = accuracy >= best - SELECTION_BAND * error - 1e-12
    tried = np.isfinite(accuracy)
    flat = np.all((accuracy >= best - error - 1e-12) | ~tried, axis=1, keepdims=True)  # every strength within one error
    within |= flat & tried  # nothing to choose between (a layer at chance, say): the strongest penalty
    strongest_first = np.argsort(-grid, kind="stable")
    return cast(npt.NDArray[np.intp], strongest_first[within[:, strongest_first].argmax(1)])  # argmax takes the first: the strongest


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("probe training was cancelled")


# --- checks and scores, in numpy ----------------------------------------------------------


def _check_features(X: FeatureRows, num_layers: int | None = None, dim: int | None = None) -> FeatureRows:
    if not hasattr(X, "shape"):  # arrays, memory maps and probing's KeptRows are read where they are, never copied
        X = np.asarray(X)
    if X.ndim != 3 or X.shape[0] == 0:
        raise InputError(f"probe features must be [examples, layers, hidden size] with at least one example, got shape {X.shape}")
    if num_layers is not None and X.shape[1:] != (num_layers, dim):
        raise InputError(f"probe features have {X.shape[1]} layers × {X.shape[2]}, expected {num_layers} × {dim}")
    return X


def _check_labels(given: npt.ArrayLike, n: int, num_classes: int, name: str) -> np.ndarray:
    y = np.asarray(given)
    if y.shape != (n,):
        raise InputError(f"{name} labels must be one per example ({n}), got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise InputError(f"{name} labels must be integers 0..{num_classes - 1}")
    if n and (y.min() < 0 or y.max() >= num_classes):
        raise InputError(f"{name} labels must lie in 0..{num_classes - 1}; map unseen labels before probing")
    return y.astype(np.int64, copy=False)


def _macro_f1(y: np.ndarray, predicted: np.ndarray, num_classes: int) -> float:
    true_positive = np.bincount(y[predicted == y], minlength=num_classes)
    support = np.bincount(y, minlength=num_classes) + np.bincount(predicted, minlength=num_classes)
    present = support > 0
    return float(np.mean(2 * true_positive[present] / support[present]))
