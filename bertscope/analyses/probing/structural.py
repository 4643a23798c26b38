"""Structural probes of Hewitt & Manning 2019, trained for every layer at once.

Two linear probes per layer read a dependency tree off word representations:

- the distance probe B [D, rank]: the squared distance ||B(h_i - h_j)||² should equal the
  number of edges between words i and j in the tree;
- the depth probe B' [D, rank]: the squared norm ||B' h_i||² should equal the depth of word i
  (edges to the root word, which has depth 0).

Training follows the paper's code: L1 loss over all word pairs of a sentence divided by the
squared sentence length (by the length for depth), averaged over the sentences of a batch;
Adam, its learning rate halved after every epoch whose dev loss does not improve (the paper
cut it tenfold; see PLATEAU_FACTOR); parameters start uniform in ±0.05; the epoch with the
lowest dev loss is kept; training ends after `patience` epochs without improvement. Here all
of that happens per layer and per probe, while one batched matrix product `[L, D, 2·rank]`
projects every layer at once; as Adam works per element and per parameter group, each layer
trains exactly as if it were alone.

Input layout: `X [N_words, L, D]` holds the words (not sub-words; the caller pools them) of
all sentences back to back; `sentence_index [N_words]` says which tree each word belongs to
(an index into `trees`; each sentence is one contiguous run); `trees[s]` gives the heads of
sentence s, CoNLL-U style (0 = root, else the 1-based index of the head word).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import ParamSpec, TypeVar, cast

import numpy as np
import numpy.typing as npt
import torch

from bertscope.base.errors import Cancelled, InputError
from bertscope.base.progress import Progress, outcome
from bertscope.model.device import resolve_device

P = ParamSpec("P")
T = TypeVar("T")

SPEARMAN_LENGTHS = (5, 50)  # the paper averages Spearman over sentences of 5 to 50 words
INIT_RANGE = 0.05
MIN_IMPROVEMENT = 1e-4  # dev loss must drop by this much to count as better (the paper's value)
# Learning rate × this after an epoch without improvement. The paper's 0.1 froze each probe after a few unlucky epochs,
# so the result followed the seed and the inputs' last digits: on MiniLM over 1,800 EWT sentences, three seeds' UUAS
# spread by up to 0.02 per layer with 0.1, 0.005-0.01 with 0.5, whose UUAS was as high or higher at every layer
# (benchmarks/README.md, "Structural probe numbers").
PLATEAU_FACTOR = 0.5
MST_EPSILON = 1e-12  # csgraph reads a zero as "no edge"; a zero predicted distance is an edge
SCORE_PAIRS = 1 << 18  # word pairs per scoring batch
# The paper's 30 epochs were over the Penn Treebank's 40,000 sentences; on 119 (the shipped sample) an epoch is 4 Adam
# steps and most layers were still improving at 30. Early stopping ends real treebanks sooner (EWT: 11-19 epochs).
EPOCHS = 100


# --- trees ---------------------------------------------------------------------------------


def tree_depths(heads: Sequence[int]) -> np.ndarray:
    """Edges from each word to the root word `[n]` (the root has depth 0)."""
    _check_heads(heads)
    n = len(heads)
    depths = np.full(n, -1, dtype=np.int64)
    for start in range(n):
        path, word = [], start
        while depths[word] < 0 and heads[word] != 0:
            path.append(word)
            word = heads[word] - 1
            if len(path) > n:
                raise InputError(f"dependency heads {tuple(heads)} contain a cycle; each word must reach the root")
        base = 0 if heads[word] == 0 else depths[word]
        depths[word] = base
        for step, node in enumerate(reversed(path), start=1):
            depths[node] = base + step
    return depths


def tree_distances(heads: Sequence[int]) -> npt.NDArray[np.int64]:
    """Path lengths `[n, n]` between all words in the undirected dependency tree."""
    # scipy loads only for structural probes (0.6 s of every probe run's start-up); it ships no type information
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    tree_depths(heads)  # validates, cycles included
    n = len(heads)
    children = [i for i in range(n) if heads[i] != 0]
    graph = csr_matrix((np.ones(len(children)), (children, [heads[i] - 1 for i in children])), shape=(n, n))
    return cast(npt.NDArray[np.int64], shortest_path(graph, directed=False, unweighted=True).astype(np.int64))


def _check_heads(heads: Sequence[int]) -> None:
    n = len(heads)
    if n == 0:
        raise InputError("an empty dependency tree; every sentence needs at least one word")
    if any(not 0 <= h <= n for h in heads):
        raise InputError(f"dependency heads {tuple(heads)} point outside the sentence; use 0 for the root or 1..{n}")
    if sum(h == 0 for h in heads) != 1:
        raise InputError(f"dependency heads {tuple(heads)} need exactly one root (head 0)")
    if any(h == i + 1 for i, h in enumerate(heads)):
        raise InputError(f"dependency heads {tuple(heads)}: a word cannot be its own head")


# --- results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StructuralProbes:
    """Trained probes of every layer, each at its best epoch on the dev set."""

    distance: np.ndarray  # [L, D, rank]
    depth: np.ndarray  # [L, D, rank]
    distance_epoch: np.ndarray  # [L] 1-based epoch kept for the distance probe
    depth_epoch: np.ndarray  # [L]
    distance_loss: np.ndarray  # [L] dev loss at that epoch
    depth_loss: np.ndarray  # [L]
    # [L] how each layer's training ended: `converged` (no better dev loss for `patience` epochs) or `epoch limit`
    distance_endings: tuple[str, ...] = ()
    depth_endings: tuple[str, ...] = ()


@dataclass(frozen=True)
class StructuralScores:
    """Per layer `[L]`, as reported by Hewitt & Manning 2019.

    - spearman: for each word, Spearman's rho between its predicted and gold distances to
      all words of its sentence (itself included, as in the paper's code); averaged over the
      words of all sentences of one length, then over the lengths present in 5-50 words
      (`spearman_lengths`).
    - depth_spearman: for each sentence, rho between predicted and gold depths; averaged
      per length, then over the lengths present in 5-50.
    - uuas: gold edges found by the minimum spanning tree of the predicted distances, over
      all gold edges (all sentences, summed). Words marked in `skip` leave both trees;
      gold edges touching them are not counted.
    - root_accuracy: share of sentences whose shallowest predicted (not skipped) word is
      the gold root.

    Rows or sentences whose predictions are constant have no rank correlation and are left
    out; a layer with nothing left, or a corpus without sentences of 5-50 words, gives nan.
    A near-perfect trained probe scores a Spearman a little below 1: gold distances tie, its
    predictions do not.
    """

    spearman: np.ndarray
    uuas: np.ndarray
    depth_spearman: np.ndarray
    root_accuracy: np.ndarray


# --- corpus layout -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Sentence:
    tree: int  # index into trees (and skip)
    start: int
    length: int


def _sentences(X: np.ndarray, sentence_index: np.ndarray, trees: Sequence[Sequence[int]]) -> list[_Sentence]:
    """Split the words into their sentences and check them against the trees."""
    if X.ndim != 3:
        raise InputError(f"word representations must be [words, layers, hidden]; got shape {X.shape}")
    sentence_index = np.asarray(sentence_index)
    if sentence_index.shape != (X.shape[0],):
        raise InputError(f"sentence_index has shape {sentence_index.shape}; it needs one entry per word ({X.shape[0]})")
    if len(sentence_index) == 0:
        raise InputError("no words to probe; the corpus is empty")
    starts = np.flatnonzero(np.r_[True, sentence_index[1:] != sentence_index[:-1]])
    ends = np.r_[starts[1:], len(sentence_index)]
    sentences = [_Sentence(int(sentence_index[s]), int(s), int(e - s)) for s, e in zip(starts, ends)]
    seen = set()
    for sentence in sentences:
        if not 0 <= sentence.tree < len(trees):
            raise InputError(f"sentence_index {sentence.tree} has no tree; there are {len(trees)} trees")
        if sentence.tree in seen:
            raise InputError(f"the words of sentence {sentence.tree} are not one contiguous run in sentence_index")
        seen.add(sentence.tree)
        if len(trees[sentence.tree]) != sentence.length:
            raise InputError(f"sentence {sentence.tree} has {sentence.length} words but its tree has {len(trees[sentence.tree])}")
        try:
            tree_depths(trees[sentence.tree])
        except InputError as error:
            raise InputError(f"sentence {sentence.tree}: {error}") from None
    return sentences


@dataclass
class _Batch:
    words: torch.Tensor  # [W] rows of X, sentence after sentence
    rows: torch.Tensor  # [B, n] position in `words` of each padded slot
    mask: torch.Tensor  # [B, n] real words
    distances: torch.Tensor  # [B, n, n] gold, 0 on padding
    depths: torch.Tensor  # [B, n]
    lengths: torch.Tensor  # [B] float


def _batches(sentences: Sequence[_Sentence], trees: Sequence[Sequence[int]], batch_size: int, device: torch.device) -> list[_Batch]:
    """Consecutive `batch_size` runs of `sentences`, padded to their longest."""
    batches = []
    for first in range(0, len(sentences), batch_size):
        chunk = sentences[first : first + batch_size]
        lengths = np.array([s.length for s in chunk])
        longest = int(lengths.max())
        offsets = np.arange(longest)
        mask = offsets[None, :] < lengths[:, None]
        starts = np.r_[0, np.cumsum(lengths)[:-1]]
        rows = starts[:, None] + np.minimum(offsets[None, :], lengths[:, None] - 1)
        distances = np.zeros((len(chunk), longest, longest), dtype=np.float32)
        depths = np.zeros((len(chunk), longest), dtype=np.float32)
        for b, sentence in enumerate(chunk):
            n, heads = sentence.length, trees[sentence.tree]
            distances[b, :n, :n], depths[b, :n] = tree_distances(heads), tree_depths(heads)
        batches.append(
            _Batch(
                words=torch.as_tensor(np.concatenate([np.arange(s.start, s.start + s.length) for s in chunk]), device=device),
                rows=torch.as_tensor(rows, device=device),
                mask=torch.as_tensor(mask, device=device),
                distances=torch.as_tensor(distances, device=device),
                depths=torch.as_tensor(depths, device=device),
                lengths=torch.as_tensor(lengths, dtype=torch.float32, device=device),
            )
        )
    return batches


def _by_length(sentences: Sequence[_Sentence], rng: np.random.Generator | None = None) -> list[_Sentence]:
    """Sorted by length (so batches carry little padding); ties in random order given `rng`."""
    order = np.arange(len(sentences)) if rng is None else rng.permutation(len(sentences))
    order = order[np.argsort([sentences[i].length for i in order], kind="stable")]
    return [sentences[i] for i in order]


# --- training ------------------------------------------------------------------------------


class _Projector:
    """Both probes' projections of a batch, padded: `[L, B, n, 2·rank]`.

    The batch's words are copied into one reused buffer: a fresh tensor per batch would
    cost about as much as the matrix product itself (page faults on the CPU).
    """

    def __init__(self, X: torch.Tensor, batches: Sequence[_Batch]):
        self.X = X
        self.buffer = X.new_empty((max(len(b.words) for b in batches), *X.shape[1:]))

    def __call__(self, weights: torch.Tensor, batch: _Batch) -> torch.Tensor:
        words = torch.index_select(self.X, 0, batch.words, out=self.buffer[: len(batch.words)])
        return torch.bmm(words.transpose(0, 1), weights)[:, batch.rows]


def _losses(project: _Projector, weights: torch.Tensor, batch: _Batch, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-layer sums over the batch's sentences of the normalised L1 losses, `[L]` each."""
    projected = project(weights, batch)
    spans, deep = projected[..., :rank], projected[..., rank:]
    norms = spans.square().sum(-1)  # [L, B, n]
    predicted = norms[..., :, None] + norms[..., None, :] - 2 * spans @ spans.transpose(-1, -2)
    pairs = batch.mask[:, :, None] & batch.mask[:, None, :]
    pairs &= ~torch.eye(pairs.shape[-1], dtype=torch.bool, device=pairs.device)  # 0 on the diagonal, as in the paper
    distance = torch.where(pairs, (predicted - batch.distances).abs(), 0).sum((-1, -2)) / batch.lengths.square()
    depth = torch.where(batch.mask, (deep.square().sum(-1) - batch.depths).abs(), 0).sum(-1) / batch.lengths
    return distance.sum(-1), depth.sum(-1)


@dataclass(frozen=True)
class StructuralTraining:
    """How the structural probes train: their `rank`, at most `epochs` epochs of Adam at `lr` on batches of
    `batch_size` sentences, stopping once no probe improved its dev loss for `patience` epochs (None: every epoch)."""

    rank: int = 64
    epochs: int = EPOCHS
    lr: float = 1e-3
    batch_size: int = 32
    patience: int | None = 5


def iter_structural_training(
    X_train: np.ndarray,
    sent_train: np.ndarray,
    trees_train: Sequence[Sequence[int]],
    X_dev: np.ndarray,
    sent_dev: np.ndarray,
    trees_dev: Sequence[Sequence[int]],
    *,
    training: StructuralTraining = StructuralTraining(),
    device: str | torch.device = "cpu",
    seed: int = 0,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[StructuralProbes]]:
    """Train distance and depth probes for every layer; yield after each epoch, the probes on the last.

    Each item's `partial` is that epoch's dev losses `[2, L]` (distance, depth) of the current parameters.

    Batches hold sentences of similar length; their composition is drawn once (from `seed`)
    and their order reshuffled every epoch. Training stops early once no probe of any
    layer has improved its dev loss for `training.patience` epochs (None: run all epochs). Raises
    `Cancelled` between batches when `cancel` is set. On a GPU the words are copied there once.
    """
    device = resolve_device(device) if isinstance(device, str) else device
    rank, epochs, batch_size, patience = training.rank, training.epochs, training.batch_size, training.patience
    train = _sentences(X_train, sent_train, trees_train)
    dev = _sentences(X_dev, sent_dev, trees_dev)
    if X_train.shape[1:] != X_dev.shape[1:]:
        raise InputError(f"train and dev representations differ in shape: {X_train.shape[1:]} and {X_dev.shape[1:]}")
    if rank < 1 or epochs < 1 or batch_size < 1:
        raise InputError("rank, epochs and batch_size must be at least 1")
    layers, hidden = X_train.shape[1:]
    rng = np.random.default_rng(seed)
    train, dev = _by_length(train, rng), _by_length(dev)
    train_batches = _batches(train, trees_train, batch_size, device)
    dev_batches = _batches(dev, trees_dev, batch_size, device)
    project_train = _Projector(torch.as_tensor(np.asarray(X_train, dtype=np.float32), device=device), train_batches)
    project_dev = _Projector(torch.as_tensor(np.asarray(X_dev, dtype=np.float32), device=device), dev_batches)

    generator = torch.Generator().manual_seed(seed)
    best = (torch.rand(2, layers, hidden, rank, generator=generator) * 2 - 1) * INIT_RANGE  # [probe, L, D, rank]
    parts: list[list[torch.Tensor]] = [
        [torch.nn.Parameter(best[probe, layer].clone().to(device)) for layer in range(layers)] for probe in (0, 1)
    ]
    # one parameter group per probe and layer, each with its own learning-rate schedule
    optimizer = torch.optim.Adam([{"params": [part]} for row in parts for part in row], lr=training.lr)
    best_loss = np.full((2, layers), np.inf)
    best_epoch = np.zeros((2, layers), dtype=np.int64)

    for epoch in range(1, epochs + 1):
        for index in rng.permutation(len(train_batches)):
            if cancel is not None and cancel.is_set():
                raise Cancelled("structural probe training was cancelled")
            batch = train_batches[index]
            weights = torch.cat([torch.stack(parts[0]), torch.stack(parts[1])], dim=-1)
            distance, depth = _losses(project_train, weights, batch, rank)
            optimizer.zero_grad(set_to_none=True)
            ((distance + depth).sum() / len(batch.lengths)).backward()
            optimizer.step()

        with torch.no_grad():
            weights = torch.cat([torch.stack(parts[0]), torch.stack(parts[1])], dim=-1)
            # a tensor: dev has batches
            totals = cast(torch.Tensor, sum(torch.stack(_losses(project_dev, weights, batch, rank)) for batch in dev_batches))
        loss = (totals / len(dev)).cpu().numpy()  # [2, L]: distance, depth
        improved = loss < best_loss - MIN_IMPROVEMENT
        best_loss[improved] = loss[improved]
        best_epoch[improved] = epoch
        for probe, layer in zip(*np.nonzero(improved)):
            best[probe, layer] = parts[probe][layer].detach().cpu()
        for probe, layer in zip(*np.nonzero(~improved)):
            optimizer.param_groups[probe * layers + layer]["lr"] *= PLATEAU_FACTOR
        finished = epoch == epochs or (patience is not None and (epoch - best_epoch).min() >= patience)
        probes = None
        if finished:
            settled = epoch - best_epoch >= (patience if patience is not None else epochs + 1)  # [2, L]
            endings = [tuple("converged" if done else "epoch limit" for done in row) for row in settled]
            probes = StructuralProbes(
                distance=best[0].numpy().copy(),
                depth=best[1].numpy().copy(),
                distance_epoch=best_epoch[0].copy(),
                depth_epoch=best_epoch[1].copy(),
                distance_loss=best_loss[0].astype(np.float32),
                depth_loss=best_loss[1].astype(np.float32),
                distance_endings=endings[0],
                depth_endings=endings[1],
            )
        yield Progress(f"epoch {epoch}", epoch, epochs, result=probes, partial=loss.copy())
        if finished:
            return


def _to_the_end(steps: Callable[P, Iterator[Progress[T]]], what: str) -> Callable[P, T]:
    """`steps`' function run to its last record: the same arguments, its result returned."""

    @functools.wraps(steps)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return outcome(steps(*args, **kwargs), what)

    run.__doc__ = f"`{steps.__name__}` run to the end, for callers that need no progress: the same arguments, the probes returned."
    return run


train_structural_probes = _to_the_end(iter_structural_training, "structural probe training")


# --- scoring -------------------------------------------------------------------------------


def _row_spearman(predicted: np.ndarray, gold_ranks: np.ndarray) -> np.ndarray:
    """Spearman's rho along the last axis; nan where the prediction is constant."""
    from scipy.stats import rankdata

    ranks = rankdata(predicted, axis=-1)
    ranks -= ranks.mean(-1, keepdims=True)
    covariance = (ranks * gold_ranks).sum(-1)
    scale = np.sqrt(np.square(ranks).sum(-1) * np.square(gold_ranks).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(scale > 0, covariance / scale, np.nan)


def _centred_ranks(gold: np.ndarray) -> npt.NDArray[np.float64]:
    from scipy.stats import rankdata

    ranks = rankdata(gold, axis=-1)
    return cast(npt.NDArray[np.float64], ranks - ranks.mean(-1, keepdims=True))


def _mst_edges(distances: np.ndarray, words: np.ndarray) -> set[tuple[int, int]]:
    """Undirected edges (i < j, as word indices) of the minimum spanning tree over `words`."""
    from scipy.sparse.csgraph import minimum_spanning_tree

    graph = distances + MST_EPSILON
    np.fill_diagonal(graph, 0)
    tree = minimum_spanning_tree(graph).tocoo()
    return {(int(min(a, b)), int(max(a, b))) for a, b in zip(words[tree.row], words[tree.col])}


def _predict(X: np.ndarray, chunk: Sequence[_Sentence], weights: torch.Tensor, device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    """Predicted squared distances `[B, L, n, n]` and depths `[B, L, n]` of same-length sentences."""
    n, rank = chunk[0].length, weights.shape[-1] // 2
    order = np.concatenate([np.arange(s.start, s.start + n) for s in chunk])
    words = torch.as_tensor(np.asarray(X[order], dtype=np.float32), device=device).transpose(0, 1)
    with torch.no_grad():
        product = torch.bmm(words, weights)  # [L, B·n, 2·rank]
    projected = product.cpu().double().numpy().reshape(len(weights), len(chunk), n, 2 * rank).swapaxes(0, 1)
    spans, deep = projected[..., :rank], projected[..., rank:]
    norms = np.square(spans).sum(-1)
    distances = np.maximum(norms[..., :, None] + norms[..., None, :] - 2 * spans @ spans.swapaxes(-1, -2), 0)
    distances[..., np.arange(n), np.arange(n)] = 0
    return distances, np.square(deep).sum(-1)


class _Tally:
    """Running sums behind `StructuralScores`."""

    def __init__(self, layers: int):
        self.layers = layers
        self.rho: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {"distance": {}, "depth": {}}
        self.edges_found, self.edges = np.zeros(layers), 0
        self.roots_found, self.sentences = np.zeros(layers), 0

    def add_rho(self, name: str, length: int, rho: np.ndarray) -> None:
        """Add correlations `[B, L, rows]`; nan (constant predictions) is left out."""
        total, count = self.rho[name].get(length, (np.zeros(self.layers), np.zeros(self.layers)))
        valid = ~np.isnan(rho)
        self.rho[name][length] = (total + np.where(valid, rho, 0).sum((0, 2)), count + valid.sum((0, 2)))

    def add_tree(self, heads: Sequence[int], distances: np.ndarray, depths: np.ndarray, kept: np.ndarray) -> None:
        """Edges of the spanning trees and the shallowest word of one sentence, every layer."""
        words = np.flatnonzero(kept)
        if len(words) == 0:
            return
        gold = {(min(i, h - 1), max(i, h - 1)) for i, h in enumerate(heads) if h and kept[i] and kept[h - 1]}
        root = list(heads).index(0)
        self.edges += len(gold)
        self.sentences += 1
        for layer in range(self.layers):
            if gold:
                self.edges_found[layer] += len(_mst_edges(distances[layer][np.ix_(words, words)], words) & gold)
            self.roots_found[layer] += words[np.argmin(depths[layer, words])] == root

    def length_average(self, name: str) -> npt.NDArray[np.float32]:
        """Mean per sentence length, then mean over the lengths (nan where nothing was scored)."""
        per_length = [np.where(count > 0, total / np.maximum(count, 1), np.nan) for total, count in self.rho[name].values()]
        if not per_length:
            return np.full(self.layers, np.nan, dtype=np.float32)
        means = np.stack(per_length)
        present = ~np.isnan(means)
        with np.errstate(invalid="ignore"):
            return cast(npt.NDArray[np.float32], (np.where(present, means, 0).sum(0) / present.sum(0)).astype(np.float32))

    def scores(self) -> StructuralScores:
        nan = np.full(self.layers, np.nan)
        return StructuralScores(
            spearman=self.length_average("distance"),
            uuas=(self.edges_found / self.edges if self.edges else nan).astype(np.float32),
            depth_spearman=self.length_average("depth"),
            root_accuracy=(self.roots_found / self.sentences if self.sentences else nan).astype(np.float32),
        )


def score_structural(
    probes: StructuralProbes,
    X: np.ndarray,
    sent_index: np.ndarray,
    trees: Sequence[Sequence[int]],
    skip: Sequence[np.ndarray] | None = None,
    *,
    spearman_lengths: tuple[int, int] = SPEARMAN_LENGTHS,
    device: str | torch.device = "cpu",
) -> StructuralScores:
    """Score every layer's probes on a (dev or test) corpus; see `StructuralScores`.

    `skip[s]` marks the words of `trees[s]` to leave out of UUAS and root accuracy (the paper
    leaves out punctuation); Spearman uses all words, as in the paper. Sentences are
    scored in batches of equal length and about SCORE_PAIRS word pairs, so memory stays flat.
    """
    device = resolve_device(device) if isinstance(device, str) else device
    sentences = _sentences(X, sent_index, trees)
    layers = X.shape[1]
    if probes.distance.shape[:2] != (layers, X.shape[2]) or probes.depth.shape != probes.distance.shape:
        raise InputError(f"probes are for [layers, hidden] {probes.distance.shape[:2]}; the data is {X.shape[1:]}")
    weights = torch.as_tensor(np.concatenate([probes.distance, probes.depth], axis=-1), device=device)
    tally = _Tally(layers)
    by_length: dict[int, list[_Sentence]] = {}
    for sentence in sentences:
        by_length.setdefault(sentence.length, []).append(sentence)

    for n, group in sorted(by_length.items()):
        per_batch = max(1, SCORE_PAIRS // (n * n))
        for first in range(0, len(group), per_batch):
            chunk = group[first : first + per_batch]
            distances, depths = _predict(X, chunk, weights, device)
            heads = [trees[s.tree] for s in chunk]
            if spearman_lengths[0] <= n <= spearman_lengths[1]:
                gold_distances = _centred_ranks(np.stack([tree_distances(h) for h in heads])[:, None])
                gold_depths = _centred_ranks(np.stack([tree_depths(h) for h in heads])[:, None])
                tally.add_rho("distance", n, _row_spearman(distances, gold_distances).reshape(len(chunk), layers, -1))
                tally.add_rho("depth", n, _row_spearman(depths, gold_depths)[..., None])
            for b, sentence in enumerate(chunk):
                kept = np.ones(n, dtype=bool) if skip is None else ~np.asarray(skip[sentence.tree], dtype=bool)
                if kept.shape != (n,):
                    raise InputError(f"skip for sentence {sentence.tree} has {kept.size} entries; the sentence has {n} words")
                tally.add_tree(heads[b], distances[b], depths[b], kept)
    return tally.scores()
