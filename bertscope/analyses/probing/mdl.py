"""Minimum description length probes (Voita & Titov 2020): how many bits the labels cost to send given a layer.

A probe's accuracy mixes what the representation holds with what the probe can learn; the
description length of the labels given the features counts both the probe's fit and the
effort of reaching it. The online (prequential) code sends the training labels block by
block, in a seeded order: the first block with the uniform code (n₁·log₂K bits), each next
one with −Σ log₂ p(y|x) under a probe trained on every block before it. A representation
that holds the property linearly gives a short code from few examples; the uniform code
(N·log₂K) over the online code is the compression.

Blocks end at 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50 and 100 % of the N training
examples (`PORTIONS`; the end of a block is ⌊share·N⌋, as the paper's code cuts them, at
least one example, repeated ends dropped). The examples are the rows the accuracy probe
trains on (words for a word task, sentences for a sentence task), shuffled by the seed.

The probes are the accuracy probe's family, on the same features:
- linear: multinomial logistic regression fitted by L-BFGS (`probes._Logistic`) on the
  features standardised with the whole training set's mean and std (the receiver of an
  online code has every x, only the labels are sent), the biases under the penalty too
  (`_PriorOnBias`: a class not yet seen costs a finite number of bits). Each block's penalty
  is chosen on the dev split, as early stopping on dev chose each probe in Voita & Titov's
  code: first the prior of the task's accuracy probe (its L2 strength at N rows, scikit-learn's
  C held fixed: l2·N/t on t examples), then ever stronger ones (DEV_STRENGTHS) for as long as
  the dev labels' codelength falls. At the prior alone a probe of a few dozen examples in
  hundreds of dimensions is sure of itself and often wrong: on a 2,000-sentence task
  (bigram_shift, MiniLM) a layer at 0.85 accuracy coded its labels in more bits than the
  uniform code (compression 0.85), worse than a layer at chance; chosen on dev, small blocks
  cost about the uniform code and the compression ranks the layers as accuracy does (1.28
  there, the best layer 1.50, those at chance 1.00). Each fit starts
  from the last one's weights, and a task and its control task share each pass over the rows
  (`probes._fit_together`), each stopping its search on its own;
- mlp: the accuracy probe's MLP, trained on each prefix afresh with its L2 strength and
  its early stopping chosen on the dev split, as Voita & Titov's code did.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from bertscope.analyses.probing import probes
from bertscope.analyses.probing.probes import (
    FIT_BLOCK,
    GRADIENT_TOLERANCE,
    L2_GRID,
    LINEAR_MAX_ITER,
    SCORE_BLOCK,
    FeatureRows,
    _check_features,
    _check_labels,
    _Correlation,
    _fit_together,
    _Logistic,
    _Rows,
    block_rows,
)
from bertscope.analyses.probing.results import ProbeKind
from bertscope.base.errors import Cancelled, InputError
from bertscope.model import cpu_linear
from bertscope.model.device import resolve_device

# The penalties a block's linear probe may take when chosen on dev, beside its prior: the accuracy probes' grid and the
# decades above it, strong enough to keep a probe of a few examples in hundreds of dimensions near the uniform code.
DEV_STRENGTHS = (*L2_GRID, 10.0, 100.0, 1000.0)
PORTIONS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1.0)  # block ends, shares of the examples


def block_ends(n: int, portions: Sequence[float] = PORTIONS) -> list[int]:
    """The end of each block of `n` examples: ⌊share·n⌋ for each share, at least 1, repeated ends dropped, the last `n`."""
    if n < 1:
        raise InputError("an online code needs at least one example")
    shares = [float(share) for share in portions]
    if not shares or any(not 0 < share <= 1 for share in shares) or shares != sorted(shares):
        raise InputError("the online code's block ends must be increasing shares of the examples in (0, 1]")
    ends: list[int] = []
    for share in [*shares, 1.0]:
        end = min(n, max(1, int(share * n + 1e-9)))  # + 1e-9: 0.29 · 100 is 28.999… in floating point
        if not ends or end > ends[-1]:
            ends.append(end)
    return ends


def uniform_codelength(n: int, num_classes: int) -> float:
    """Bits to send `n` labels of `num_classes` classes with no model: n·log₂K."""
    return n * math.log2(num_classes)


@dataclass(frozen=True)
class OnlineCode:
    """One layer's online code of one set of labels: `blocks` holds (examples, bits) per block, the first sent uniform."""

    num_classes: int
    blocks: tuple[tuple[int, float], ...]

    @property
    def examples(self) -> int:
        return sum(count for count, _ in self.blocks)

    @property
    def online_bits(self) -> float:
        return float(sum(bits for _, bits in self.blocks))

    @property
    def uniform_bits(self) -> float:
        return uniform_codelength(self.examples, self.num_classes)

    @property
    def compression(self) -> float:
        """Uniform codelength over online codelength: 1 is no better than sending the labels blind."""
        return self.uniform_bits / self.online_bits if self.online_bits > 0 else math.inf

    def as_json(self) -> dict[str, Any]:
        return {
            "online_bits": round(self.online_bits, 3),
            "uniform_bits": round(self.uniform_bits, 3),
            "compression": round(self.compression, 4),
            "blocks": [[count, round(bits, 3)] for count, bits in self.blocks],
        }


def online_codes(
    X_train: FeatureRows,
    label_sets: Sequence[npt.ArrayLike],
    *,
    num_classes: int,
    kind: ProbeKind = "linear",
    l2: Sequence[float] | np.ndarray | None = None,
    mean: np.ndarray | None = None,
    std: np.ndarray | None = None,
    X_dev: FeatureRows | None = None,
    dev_label_sets: Sequence[npt.ArrayLike] = (),
    seed: int = 0,
    device: str | torch.device = "cpu",
    cancel: threading.Event | None = None,
) -> list[list[OnlineCode]]:
    """The online code of each set of labels (a task's, its control task's) given each layer's features: `[set][layer]`.

    `X_train` `[N, L, D]` (an array, a memory map or probing's KeptRows: read a block at a time),
    every set `[N]` integer labels in `0..num_classes-1`. The examples are sent in the order of
    a permutation drawn from `seed`, the same for every layer and every set.

    `linear`: `l2` `[L]` the penalty of the task's probe on all N rows (`TrainedProbes.l2`),
    kept as the prior (see the module); given `X_dev` and each set's dev labels, each block's
    penalty is chosen on dev between that prior and the grid's stronger ones (see the module);
    `mean`, `std` `[L, D]` the training rows' (`TrainedProbes.mean`, `.std`; computed when not
    given). `mlp`: `X_dev` and, per set, its dev labels, which choose each prefix's probe as the
    accuracy probe's are chosen.
    Raises `Cancelled` soon after `cancel` is set.
    """
    X_train = _check_features(X_train)
    n, num_layers, dim = X_train.shape
    sets = [_check_labels(labels, n, num_classes, "training") for labels in label_sets]
    if not sets:
        raise InputError("an online code needs at least one set of labels")
    if num_classes < 2:
        raise InputError("an online code needs at least two classes")
    ends = block_ends(n)
    order = np.random.default_rng(seed).permutation(n)
    device = device if isinstance(device, torch.device) else resolve_device(device)
    first = uniform_codelength(ends[0], num_classes)
    if kind == "linear":
        if l2 is None:
            raise InputError("a linear online code needs the task probe's L2 strength per layer")
        strengths = np.asarray(l2, dtype=np.float64)
        if strengths.shape != (num_layers,) or np.any(strengths < 0):
            raise InputError(f"the L2 strengths must be one non-negative number per layer ({num_layers})")
        dev = None
        if X_dev is not None:
            if len(dev_label_sets) != len(sets):
                raise InputError("choosing the linear codes' strengths on dev needs the dev labels of every set")
            X_dev = _check_features(X_dev, num_layers, dim)
            dev = (X_dev, [_check_labels(labels, len(X_dev), num_classes, "dev") for labels in dev_label_sets])
        bits = _linear_bits(X_train, sets, order, ends, num_classes, strengths, mean, std, device, cancel, dev)
    elif kind == "mlp":
        if X_dev is None or len(dev_label_sets) != len(sets):
            raise InputError("an MLP online code needs the dev features and dev labels of every set")
        bits = _mlp_bits(X_train, sets, X_dev, dev_label_sets, order, ends, num_classes, device, seed, cancel)
    else:
        raise InputError(f"unknown probe kind {kind!r}; use linear or mlp")
    sizes = np.diff([0, *ends]).tolist()
    return [
        [OnlineCode(num_classes, tuple(zip(sizes, [first, *(float(b) for b in bits[number, layer])]))) for layer in range(num_layers)]
        for number in range(len(sets))
    ]


class OrderedRows:
    """The rows of a features array taken in the order `index`, read lazily as probes read them (see probing's KeptRows):
    `X[:, layer]` stays lazy, `X[start:stop]` reads those rows alone."""

    def __init__(self, X: FeatureRows, index: np.ndarray) -> None:
        self.X, self.index = X, index

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.index), *self.X.shape[1:])

    @property
    def ndim(self) -> int:
        return self.X.ndim

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, key: Any) -> Any:  # OrderedRows for every row, else an array
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if isinstance(rows, slice) and rows == slice(None):
            return OrderedRows(self.X[(slice(None), *rest)], self.index)
        return np.asarray(self.X[(self.index[rows], *rest)])

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(self.X[(self.index,)], dtype=dtype)


def _linear_bits(
    X_train: FeatureRows,
    sets: list[np.ndarray],
    order: np.ndarray,
    ends: list[int],
    num_classes: int,
    strengths: np.ndarray,
    mean: np.ndarray | None,
    std: np.ndarray | None,
    device: torch.device,
    cancel: threading.Event | None,
    dev: tuple[FeatureRows, list[np.ndarray]] | None = None,
) -> np.ndarray:
    """`[sets, L, blocks − 1]` bits of every block after the first, under warm-started linear probes; with `dev` (its
    features and each set's labels), each block's penalty chosen there (`_strengths`)."""
    n, num_layers, dim = X_train.shape
    labels = [torch.as_tensor(y[order], device=device) for y in sets]  # in the order sent
    dev_labels = [] if dev is None else [torch.as_tensor(y, device=device) for y in dev[1]]
    bits = np.zeros((len(sets), num_layers, len(ends) - 1))
    buffer = torch.empty(min(n, block_rows(device, dim, FIT_BLOCK)), dim, device=device)
    score_buffer = torch.empty(min(n, block_rows(device, dim, SCORE_BLOCK)), dim, device=device)
    dev_buffer = None if dev is None else torch.empty(min(len(dev[0]), block_rows(device, dim, SCORE_BLOCK)), dim, device=device)
    for layer in range(num_layers):
        X = OrderedRows(X_train[:, layer], order)
        if mean is None or std is None:
            whole = _Rows(X, labels[0], device, buffer)  # only its statistics: the rows are read again per block
            layer_mean, layer_std = whole.mean, whole.std
        else:
            layer_mean = torch.as_tensor(np.asarray(mean[layer], dtype=np.float32), device=device)
            layer_std = torch.as_tensor(np.asarray(std[layer], dtype=np.float32), device=device)
        weights = [torch.zeros(num_classes, dim, device=device) for _ in sets]
        biases = [_prior_bias(y[: ends[0]], num_classes) for y in labels]
        dev_rows = None
        if dev is not None:
            dev_rows = _Rows(dev[0][:, layer], dev_labels[0], device, dev_buffer, layer_mean, layer_std, block=SCORE_BLOCK)
        for block, (start, stop) in enumerate(zip(ends[:-1], ends[1:])):
            if cancel is not None and cancel.is_set():
                raise Cancelled("the online code was cancelled")
            prefix = _Rows(OrderedRows(X_train[:, layer], order[:start]), labels[0][:start], device, buffer, layer_mean, layer_std)
            prior = float(strengths[layer]) * n / start  # the same prior, scikit-learn's C, on fewer examples
            chosen: list[tuple[float, torch.Tensor, torch.Tensor]] = [(math.inf, W, b) for W, b in zip(weights, biases)]
            searching = list(range(len(labels)))  # the sets whose dev codelength still falls
            for tried, penalty in enumerate(_strengths(prior, dev is not None)):  # the prior, then stronger, each from the last
                problems: list[_Logistic] = []
                for number in searching:
                    rows = prefix if number == 0 else prefix.relabelled(labels[number][:start])
                    first = block == 0 and tried == 0
                    shape = _Correlation.of(rows) if first else _Correlation.of(rows, weights[number], biases[number])
                    problems.append(_PriorOnBias(rows, penalty, weights[number], biases[number], shape))
                fits = _fit_together(problems, LINEAR_MAX_ITER, GRADIENT_TOLERANCE, cancel)
                for number, fit in zip(searching, fits):
                    weights[number], biases[number] = fit.W, fit.b
                if dev_rows is None:
                    chosen = [(0.0, W, b) for W, b in zip(weights, biases)]
                    break
                on_dev = _bits(dev_rows, [(weights[number], biases[number], dev_labels[number]) for number in searching])
                better = []
                for number, score in zip(searching, on_dev):
                    if score < chosen[number][0]:
                        chosen[number] = (score, weights[number], biases[number])
                        better.append(number)
                searching = better  # a set worse on dev than at the last penalty is past its best (the codelength falls, then rises)
                if not searching:
                    break
            weights, biases = [W for _, W, _ in chosen], [b for _, _, b in chosen]
            sent = _Rows(X[start:stop], labels[0][start:stop], device, score_buffer, layer_mean, layer_std, block=SCORE_BLOCK)
            bits[:, layer, block] = _bits(sent, [(W, b, y[start:stop]) for W, b, y in zip(weights, biases, labels)])
    return bits


def _strengths(prior: float, on_dev: bool) -> list[float]:
    """The penalties a block's probe tries, in order: the prior alone, or (chosen on dev) the prior and then the stronger
    ones of DEV_STRENGTHS, weakest first (the search stops at the first that does worse on dev)."""
    if not on_dev:
        return [prior]
    return [prior, *sorted(strength for strength in DEV_STRENGTHS if strength > prior)]


class _PriorOnBias(_Logistic):
    """The probe's loss with the prior on the biases too: `mean cross-entropy + l2·(‖W‖² + ‖b‖²)`.

    With the bias free, a class no example of the prefix has (most of UPOS's 17 in the first block of a few
    dozen words) has its bias driven down for as long as L-BFGS runs, and the cost of its first example is set by
    where the run stopped (26 bits, not log₂ of a few hundred). Under the prior its bias settles where the
    penalty balances the probability given to it, and every class keeps a finite, data-set cost.
    """

    def loss_and_gradient(
        self, W: torch.Tensor, b: torch.Tensor, log_normalisers: float, gradient_W: torch.Tensor, gradient_b: torch.Tensor
    ) -> tuple[float, torch.Tensor]:
        loss, gradient = super().loss_and_gradient(W, b, log_normalisers, gradient_W, gradient_b)
        gradient[self.classes * self.dim :] += (2 * self.l2) * b * self.bias_scale  # d/dβ = d/db · bias_scale
        return loss + self.l2 * float(b.square().sum()), gradient


def _prior_bias(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The biases of W = 0's optimum on labels `y`, a class never seen counted as half an example (as the probes start)."""
    counts = torch.bincount(y, minlength=num_classes).float().clamp_min(0.5)
    return torch.log(counts / len(y))


def _bits(rows: _Rows, probes_and_labels: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> list[float]:
    """−Σ log₂ p(y|x) of `rows` (standardised as they are read) under each probe `(W [C, D], b [C], labels)`,
    in one pass over the rows for all of them."""
    A = torch.cat([W for W, _, _ in probes_and_labels])
    c = torch.cat([b for _, b, _ in probes_and_labels])
    ends = np.cumsum([len(b) for _, b, _ in probes_and_labels]).tolist()
    totals = [0.0] * len(probes_and_labels)
    offset = 0
    for X, _ in rows.blocks():
        logits = cpu_linear.product(X, A, c)  # [n, ΣC]
        for number, (begin, end) in enumerate(zip([0, *ends], ends)):
            y = probes_and_labels[number][2][offset : offset + len(X)]
            log_p = torch.log_softmax(logits[:, begin:end], 1).gather(1, y[:, None])
            totals[number] -= float(log_p.sum(dtype=torch.float64))
        offset += len(X)
    return [total / math.log(2) for total in totals]


def _mlp_bits(
    X_train: FeatureRows,
    sets: list[np.ndarray],
    X_dev: FeatureRows,
    dev_label_sets: Sequence[npt.ArrayLike],
    order: np.ndarray,
    ends: list[int],
    num_classes: int,
    device: torch.device,
    seed: int,
    cancel: threading.Event | None,
) -> np.ndarray:
    """`[sets, L, blocks − 1]` bits of every block after the first, under MLP probes trained afresh on each prefix."""
    _, num_layers, _ = X_train.shape
    bits = np.zeros((len(sets), num_layers, len(ends) - 1))
    for block, (start, stop) in enumerate(zip(ends[:-1], ends[1:])):
        prefix = OrderedRows(X_train, order[:start])
        sent = OrderedRows(X_train, order[start:stop])
        for number, (y, y_dev) in enumerate(zip(sets, dev_label_sets)):
            trained = probes.train_probes(
                prefix,
                y[order[:start]],
                X_dev,
                np.asarray(y_dev),
                num_classes=num_classes,
                kind="mlp",
                device=device,
                seed=seed,
                cancel=cancel,
            )
            logits = torch.from_numpy(trained.logits(sent)).double()  # [rows, L, C]
            log_p = torch.log_softmax(logits, 2)
            picked = log_p.gather(2, torch.as_tensor(y[order[start:stop]])[:, None, None].expand(-1, num_layers, 1))
            bits[number, :, block] = -picked.sum((0, 2)).numpy() / math.log(2)
    return bits


def report_codes(
    X_train: FeatureRows,
    y_train: np.ndarray,
    control_train: np.ndarray | None,
    *,
    task_probes: probes.TrainedProbes,
    X_dev: FeatureRows,
    y_dev: np.ndarray,
    control_dev: np.ndarray | None,
    unit: str,
    seed: int,
    device: str | torch.device,
    cancel: threading.Event | None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """What probing's report says of the online codes: per layer its `"mdl"` entry (the task's code and, given control
    labels, the control task's under `"control"`), and the choices made, for the report's `mdl`.

    The features are the accuracy probe's (`X_train`, `X_dev`: read where they are), and the linear codes reuse
    what its fit found (each layer's L2 strength, mean and std).
    """
    sets = [y_train] if control_train is None else [y_train, control_train]
    dev_sets = [y_dev] if control_dev is None else [y_dev, control_dev]
    kind, num_classes = task_probes.kind, task_probes.num_classes
    linear = kind == "linear"
    codes = online_codes(
        X_train,
        sets,
        num_classes=num_classes,
        kind=kind,
        l2=task_probes.l2 if linear else None,
        mean=task_probes.mean if linear else None,
        std=task_probes.std if linear else None,
        X_dev=X_dev,
        dev_label_sets=dev_sets,
        seed=seed,
        device=device,
        cancel=cancel,
    )
    layers = []
    for layer, task_code in enumerate(codes[0]):
        entry = task_code.as_json()
        if len(codes) > 1:
            entry["control"] = codes[1][layer].as_json()
        layers.append(entry)
    n = len(y_train)
    probe = (
        "linear: multinomial logistic regression by L-BFGS, the accuracy probe's family, on weights and biases; each "
        "block's L2 strength chosen on dev: the prior of the task probe (its strength at all the examples, kept as "
        "scikit-learn's C: l2·N/t on t examples), then stronger ones (the grid, 10, 100, 1000) until the dev codelength "
        "grows (early stopping's role in Voita & Titov's code); each fit starts from the last one's"
        if linear
        else "mlp: the accuracy probe's MLP, trained afresh on each prefix, its L2 strength and early stopping chosen on dev"
    )
    settings = {
        "probe": probe,
        "order": f"the training {unit} shuffled with seed {seed}",
        "seed": seed,
        "portions_percent": [round(100 * share, 4) for share in PORTIONS],
        "block_ends": block_ends(n),
        "first_block": "the uniform code",
        "examples": n,
        "classes": num_classes,
        "unit": unit,
        "control": control_train is not None,
    }
    return layers, settings
