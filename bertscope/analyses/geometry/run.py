"""Representation geometry: CKA, intrinsic dimension, neighbourhoods and PCA, on plain arrays.

Each function takes `[n, d]` numpy arrays of the same n rows (one row per token, word or
sentence, in the same order across layers or models) and returns floats or small arrays.
The arithmetic runs in torch (float64 where it matters) so it shares one thread pool with
the model's forward passes, and where the rows are (a GPU tensor: on the GPU); the corpus
pass that produces the rows is analyses.geometry.representations.

- Linear CKA (Kornblith et al. 2019, eq. 5 and the feature-space form of their code):
  CKA(X, Y) = ||YᵀX||²_F / (||XᵀX||_F ||YᵀY||_F) on column-centred X, Y. The debiased form
  replaces each HSIC by the unbiased estimator of Song et al. (2012), which Kornblith et al.
  recommend when n is not much larger than d. Both are computed in feature space, so memory
  is O(n·d + d²), never n × n.
- Intrinsic dimension by TwoNN (Facco et al. 2017, as used by Valeriani et al. 2023): from
  μ = r₂/r₁, the ratio of each point's second to first neighbour distance, the slope of
  −log(1 − F(μ)) against log μ through the origin, the largest 10% of μ left out. Exact
  duplicates are removed first (they have r₁ = 0; the embedding layer has many).
- Neighbourhood overlap (Doimo et al. 2020; Valeriani et al. 2023): the mean share of a
  point's k nearest neighbours in one representation that are also among its k nearest in
  another.

Nearest neighbours are found in row blocks (memory O(block · n)): candidates by float32
matrix products, their distances then recomputed exactly in float64.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterable, Iterator, Sequence, Sized
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import scipy.linalg
import torch
from threadpoolctl import threadpool_limits
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress, relay
from bertscope.model.device import float64_device

if TYPE_CHECKING:
    from bertscope.analyses.geometry.representations import Sample
    from bertscope.analyses.geometry.results import GeometryResult
    from bertscope.data.corpus import Sentence
    from bertscope.model.session import Session

Rows = npt.ArrayLike | Tensor  # `[n, d]`: one row per token, word or sentence

TWONN_DISCARD = 0.1  # the share of the largest μ left out of the TwoNN fit (Facco et al.)
BLOCK = 512  # rows per block when searching neighbours


def _tensor(X: Rows, dtype: torch.dtype = torch.float64) -> Tensor:
    rows = torch.as_tensor(np.asarray(X) if not isinstance(X, Tensor) else X).to(dtype)
    if rows.ndim != 2:
        raise ValueError(f"expected a 2-D array [n, d], got shape {tuple(rows.shape)}")
    return rows


def _centred(X: Rows) -> Tensor:
    rows = _tensor(X)
    return rows - rows.mean(dim=0, keepdim=True)


def _debiased_dot(xty_sq: float, rows_x: Tensor, rows_y: Tensor, norm_x: float, norm_y: float, n: int) -> float:
    """Song et al.'s unbiased HSIC (times n(n−3)) for linear kernels, from feature-space sums."""
    return xty_sq - n / (n - 2.0) * float(rows_x @ rows_y) + norm_x * norm_y / ((n - 1.0) * (n - 2.0))


class CKAStats:
    """What CKA needs of one representation, computed once and reused for every pair."""

    def __init__(self, X: Rows) -> None:
        self.X = _centred(X)
        self.n = len(self.X)
        self.rows = (self.X * self.X).sum(dim=1)  # ||x_i||² (the diagonal of the Gram matrix)
        self.norm = float(self.rows.sum())
        self.self_dot = float(torch.linalg.matrix_norm(self.X.T @ self.X) ** 2)  # ||XᵀX||²_F


def cka_pair(a: CKAStats, b: CKAStats) -> tuple[float, float]:
    """Linear CKA and debiased linear CKA of two representations of the same rows (NaN where undefined)."""
    if a.n != b.n:
        raise ValueError(f"CKA needs the same rows in both representations, got {a.n} and {b.n}")
    n = a.n
    cross = float(torch.linalg.matrix_norm(a.X.T @ b.X) ** 2)

    def ratio(top: float, xx: float, yy: float) -> float:
        denominator = np.sqrt(max(xx, 0.0) * max(yy, 0.0))
        return float(top / denominator) if denominator > 0 else float("nan")

    biased = ratio(cross, a.self_dot, b.self_dot)
    if n < 4:
        return biased, float("nan")
    debiased = ratio(
        _debiased_dot(cross, a.rows, b.rows, a.norm, b.norm, n),
        _debiased_dot(a.self_dot, a.rows, a.rows, a.norm, a.norm, n),
        _debiased_dot(b.self_dot, b.rows, b.rows, b.norm, b.norm, n),
    )
    return biased, debiased


def linear_cka(X: CKAStats | Rows, Y: CKAStats | Rows, *, debiased: bool = False) -> float:
    """Linear CKA of two representations of the same n rows (1 = the same up to rotation and scale)."""
    a = X if isinstance(X, CKAStats) else CKAStats(X)
    b = Y if isinstance(Y, CKAStats) else CKAStats(Y)
    if debiased and a.n < 4:
        raise InputError(f"debiased CKA needs at least 4 rows, got {a.n}")
    return cka_pair(a, b)[1 if debiased else 0]


def cka_matrices(first: Sequence[Rows], second: Sequence[Rows] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`[len(first), len(second)]` linear and debiased CKA between every pair (within `first` when `second` is None)."""
    a = [CKAStats(X) for X in first]
    b = a if second is None else [CKAStats(Y) for Y in second]
    biased, debiased = np.empty((len(a), len(b))), np.empty((len(a), len(b)))
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            if second is None and j < i:
                biased[i, j], debiased[i, j] = biased[j, i], debiased[j, i]
            else:
                biased[i, j], debiased[i, j] = cka_pair(x, y)
    return biased, debiased


def nearest_neighbours(X: Rows, k: int, block: int = BLOCK, rows: npt.ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices `[n, k]` and float64 distances of each row's k nearest other rows, nearest first.

    Ties are broken by row index, so the result does not depend on the block size or on how
    topk orders equal values. `rows` (indices) asks for those rows' neighbours only, among all
    rows. The search runs where X is (a GPU tensor: on the GPU).
    """
    exact = _tensor(X)
    n, device = len(exact), exact.device
    if not 1 <= k < n:
        raise InputError(f"need more rows than neighbours: {n} rows, k = {k}")
    asked = torch.arange(n, device=device) if rows is None else torch.as_tensor(rows, dtype=torch.long, device=device)
    fast = exact.float()
    squares = (fast * fast).sum(dim=1)
    spare = min(n - 1, k + 8)  # a few more candidates than asked, so float32 rounding cannot lose one
    indices = torch.empty((len(asked), k), dtype=torch.long, device=device)
    distances = torch.empty((len(asked), k), dtype=torch.float64, device=device)
    approx = torch.empty((min(block, len(asked)), n), device=device)  # one buffer for every block
    for start in range(0, len(asked), block):
        here = asked[start : start + block]
        size = len(here)
        near = approx[:size]
        # |x_j|² − 2 x_i·x_j: a row's own |x_i|² would not change its order
        torch.addmm(squares, fast[here], fast.T, alpha=-2.0, out=near)
        near[torch.arange(size, device=device), here] = float("inf")
        nearest, candidates = torch.topk(near, spare + 1, dim=1, largest=False)  # spare < n: there are spare + 1 values
        candidates = candidates[:, :spare]
        crowded = nearest[:, spare - 1] == nearest[:, spare]  # a tie with the last candidate, left out
        if bool(crowded.any()):  # (the embedding layer's repeated tokens): take the lowest indices among the tied
            candidates[crowded] = _lowest_ties(near[crowded], nearest[crowded, spare - 1 : spare], spare)
        candidates = torch.sort(candidates, dim=1).values  # by index first, so equal distances keep index order
        true = torch.linalg.vector_norm(exact[candidates] - exact[here, None, :], dim=-1)
        true.masked_fill_(candidates == here[:, None], float("inf"))  # a mask, not indices: no wait for the GPU
        order = torch.sort(true, dim=1, stable=True).indices[:, :k]
        indices[start : start + size] = torch.gather(candidates, 1, order)
        distances[start : start + size] = torch.gather(true, 1, order)
    return indices.cpu().numpy(), distances.cpu().numpy()


def _lowest_ties(rows: Tensor, edge: Tensor, count: int) -> Tensor:
    """`[r, count]` indices of each row's `count` smallest values, ties at the edge value taken by lowest index."""
    below, tied = rows < edge, rows == edge
    room = count - below.sum(dim=1, keepdim=True)  # what the strictly smaller ones leave for the tied
    kept = below | (tied & (tied.cumsum(dim=1) <= room))
    return kept.nonzero()[:, 1].view(-1, count)  # row by row, in index order


def twonn_dimension(X: Rows, discard: float = TWONN_DISCARD, found: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[float, int]:
    """TwoNN intrinsic dimension of the rows of X, and how many duplicate rows were removed first.

    `found`, X's `nearest_neighbours` (k ≥ 2), saves a second search: a distinct point's two
    nearest distinct points are read from its first row's list wherever the list reaches
    them; only the other points are searched again, among the distinct rows.
    """
    rows = _tensor(X)
    if found is not None and found[1].shape[1] < 2:
        found = None  # one neighbour a row: never two
    if found is not None and (found[1][:, 0] > 0).all():  # no duplicates: each row's first two neighbours
        return twonn_from_distances(found[1], discard), 0
    whole = np.ascontiguousarray((rows + 0.0).cpu().numpy())  # + 0.0: -0.0 as 0.0, equal as they compare
    _, firsts, groups = np.unique(whole.view(np.dtype((np.void, whole.strides[0]))), return_index=True, return_inverse=True)
    groups = groups.reshape(-1)  # each row's group of equal rows, numbered as `firsts` (each group's first row)
    duplicates = len(rows) - len(firsts)
    if len(firsts) < 3:
        return float("nan"), duplicates
    pairs = np.zeros((len(firsts), 2))  # each distinct point's distances to its first and second distinct neighbours
    settled = np.zeros(len(firsts), dtype=bool)
    if found is not None:  # in its first row's list: the first neighbour of another group, then the first of a third
        group = groups[found[0][firsts]]
        other = group != np.arange(len(firsts))[:, None]
        nearest = other.argmax(axis=1)
        third = other & (group != np.take_along_axis(group, nearest[:, None], 1))
        settled = third.any(axis=1)
        pairs = np.take_along_axis(found[1][firsts], np.stack([nearest, third.argmax(axis=1)], axis=1), 1)
    missing = np.flatnonzero(~settled)
    if len(missing):
        pairs[missing] = nearest_neighbours(rows[firsts], 2, rows=missing)[1]
    return twonn_from_distances(pairs, discard), duplicates


def twonn_from_distances(distances: np.ndarray, discard: float = TWONN_DISCARD) -> float:
    """TwoNN from each (distinct) point's first and second neighbour distances `[n, ≥2]`."""
    n = len(distances)
    mu = np.sort(distances[:, 1] / distances[:, 0])
    keep = max(2, int(np.floor(n * (1.0 - discard))))
    mu = mu[:keep]
    empirical = np.arange(1, len(mu) + 1) / n  # F(μ) over all points, the largest left out
    x = np.log(mu)
    y = -np.log1p(-empirical)
    denominator = float(x @ x)
    return float(x @ y / denominator) if denominator > 0 else float("nan")


def neighbourhood_overlap(first: np.ndarray, second: np.ndarray) -> float:
    """Mean share of each row's neighbours in `first` that are also its neighbours in `second` (`[n, k]` index arrays)."""
    if first.shape != second.shape:
        raise ValueError(f"neighbour lists differ in shape: {first.shape} and {second.shape}")
    shared = (first[:, :, None] == second[:, None, :]).any(axis=2).sum()
    return float(shared) / first.size


def pca_2d(X: Rows) -> tuple[np.ndarray, np.ndarray]:
    """Rows projected on their first two principal components `[n, 2]`, and the share of variance of each.

    From the d × d covariance (cheap for n ≫ d), solved on the host for its two largest eigenpairs only (LAPACK's
    subset solver: at bert-base's width 30 ms where a full `eigh` took 145, once a layer), on one thread: on a busy
    machine BLAS's thread barriers made a 384 × 384 solve take 5 s instead of 13 ms (measured on 2 shared cores).
    Each share is over the covariance's trace, the sum of all its eigenvalues. Signs are fixed (each component's
    largest loading is positive) so the picture is reproducible.
    """
    centred = _centred(X)
    covariance = (centred.T @ centred).cpu().numpy()  # d × d: solved on the host wherever the rows are
    width = len(covariance)
    count = min(2, width)
    with threadpool_limits(1):
        values, vectors = scipy.linalg.eigh(covariance, subset_by_index=[width - count, width - 1])
    values, components = values[::-1].copy(), torch.as_tensor(vectors[:, ::-1].T.copy())  # the largest first
    signs = torch.sign(components[torch.arange(len(components)), components.abs().argmax(dim=1)])
    components = components * torch.where(signs == 0, 1.0, signs)[:, None]
    total = float(np.trace(covariance))
    explained = values.clip(min=0) / total if total > 0 else np.zeros(count)
    projection = (centred @ components.T.to(centred.device)).float().cpu().numpy()
    if projection.shape[1] < 2:  # a single feature: pad so callers always get two columns
        projection = np.pad(projection, ((0, 0), (0, 2 - projection.shape[1])))
        explained = np.pad(explained, (0, 2 - len(explained)))
    return projection, explained


# --- over a corpus -------------------------------------------------------------------------

DEFAULT_NEIGHBOURS = 10


def on_device(states: np.ndarray, device: torch.device | str) -> np.ndarray | Tensor:
    """A sample's rows where its measures should run: as they are on the CPU, copied once to a GPU (model.device's
    `float64_device`: MPS has no float64, so there they stay on the host)."""
    device = float64_device(device)
    return states if device.type == "cpu" else torch.as_tensor(states, device=device)


def analyse_layers(
    states: np.ndarray,
    neighbours: int = DEFAULT_NEIGHBOURS,
    cancel: threading.Event | None = None,
    device: torch.device | str = "cpu",
) -> Iterator[tuple[str, int, int] | dict[str, Any] | None]:
    """Every figure of every layer of a `[n, L+1, D]` sample; a generator of (stage, done, total) and,
    last, a dict of the arrays (None when cancelled). The arithmetic runs on `device` (the model's:
    on a GPU the neighbour searches and CKA's products take milliseconds, not the host's seconds)."""
    n, count, _ = states.shape
    if n < 4:
        raise InputError(f"only {n} rows to analyse; geometry needs at least 4 (give more sentences)")
    k = min(neighbours, n - 1)
    rows = on_device(states, device)
    layers = [rows[:, layer] for layer in range(count)]
    projection = np.empty((count, n, 2), dtype=np.float32)
    explained = np.empty((count, 2))
    dimension = np.empty(count)
    duplicates = np.zeros(count, dtype=np.int64)
    overlap = np.empty(max(count - 1, 0))
    previous = None
    for layer, X in enumerate(layers):
        if cancel is not None and cancel.is_set():
            yield None
            return
        yield ("PCA, TwoNN and neighbours", layer, count)
        projection[layer], explained[layer] = pca_2d(X)
        current, distances = nearest_neighbours(X, k)
        dimension[layer], duplicates[layer] = twonn_dimension(X, found=(current, distances))
        if previous is not None:
            overlap[layer - 1] = neighbourhood_overlap(previous, current)
        previous = current
    if cancel is not None and cancel.is_set():
        yield None
        return
    yield ("CKA", count, count)
    biased, debiased = cka_matrices(layers)
    yield {
        "projection": projection,
        "explained": explained,
        "intrinsic_dimension": dimension,
        "duplicates": duplicates,
        "neighbourhood_overlap": overlap,
        "cka": biased,
        "cka_debiased": debiased,
        "neighbours": k,
    }


def representation_geometry(
    session: Session,
    sentences: Iterable[Sentence],
    *,
    unit: str = "auto",
    max_rows: int | None = None,
    neighbours: int = DEFAULT_NEIGHBOURS,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[GeometryResult]]:
    """Stream a corpus through the model, under `conditions` (None: as it is), and measure each layer's geometry on a
    sample `job.seed` chooses.

    A generator of Progress; the last item carries the GeometryResult. `max_rows`
    (default analyses.geometry.representations.DEFAULT_MAX_ROWS) bounds the sample and so the memory.
    """
    from bertscope.analyses.geometry.representations import DEFAULT_MAX_ROWS, stream_sample

    if neighbours < 1:
        raise InputError(f"neighbours must be 1 or more, not {neighbours}", setting="neighbours")
    total = distributed.shard_size(len(sentences)) if isinstance(sentences, Sized) else None  # this rank's share
    sample = yield from relay(
        stream_sample(
            [session],
            sentences,
            unit=unit,
            max_rows=max_rows or DEFAULT_MAX_ROWS,
            conditions=conditions,
            job=job,
        ),
        lambda step: Progress("representations", step.done, total),
    )
    if sample is None:
        return  # cancelled
    result: GeometryResult | None = None
    if distributed.is_main():  # under torchrun rank 0 holds the merged sample and measures it, once
        result = yield from _measure(session, sample, neighbours, conditions, job)
        if result is None:
            return  # cancelled
    result = distributed.from_main(result)
    yield Progress("done", 1, 1, result)


def _measure(
    session: Session,
    sample: Sample,
    neighbours: int,
    conditions: Conditions | None,
    job: JobOptions,
) -> Generator[Progress[GeometryResult], None, GeometryResult | None]:
    """Every layer's figures on the sample: a generator of Progress returning the GeometryResult (None when cancelled)."""
    from bertscope.analyses.geometry.results import GeometryResult

    notes: list[str] = []
    if sample.seen > sample.size:
        notes.append(f"a seeded sample of {sample.size:,} of the corpus's {sample.seen:,} {sample.unit}s (seed {job.seed})")
    if sample.truncated:
        what = "words" if sample.unit == "word" else "tokens"
        notes.append(f"{sample.truncated:,} {what} were cut from sentences longer than the model's maximum of {session.max_length}")
    figures: dict[str, Any] | None = None
    for item in analyse_layers(sample.states[0], neighbours, job.cancel, session.device):
        if item is None:
            return None
        if isinstance(item, dict):
            figures = item
        else:
            yield Progress(*item)
    assert figures is not None  # the figures end the layers' stream unless it was cancelled
    if figures["neighbours"] < neighbours:
        notes.append(f"only {sample.size} rows: neighbourhoods of {figures['neighbours']} instead of {neighbours}")
    return GeometryResult(
        unit=sample.unit,
        sentences=sample.sentences,
        seen=sample.seen,
        truncated=sample.truncated,
        labels=sample.labels,
        texts=sample.texts,
        seed=job.seed,
        mask=conditions.mask.spec() if conditions is not None else "",
        ablation=conditions.ablation if conditions is not None else "zero",
        notes=tuple(notes),
        **figures,
    )
