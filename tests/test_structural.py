"""Structural probes (Hewitt & Manning 2019): gold trees, scoring, and recovery of a planted tree."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from bertscope.analyses.probing.structural import (
    Cancelled,
    StructuralProbes,
    StructuralTraining,
    iter_structural_training,
    score_structural,
    train_structural_probes,
    tree_depths,
    tree_distances,
)
from bertscope.base.errors import InputError

CAT_SAT = (2, 3, 0, 6, 6, 3)  # The cat sat on the mat: The->cat->sat(root)<-mat<-{on, the}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tensors here are tiny, so extra threads only add synchronisation; on a busy
    machine their spin-waits made these tests twenty times slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_tree_distances_and_depths_of_a_chain():
    heads = (0, 1, 2, 3)  # 1 <- 2 <- 3 <- 4
    expected = np.abs(np.arange(4)[:, None] - np.arange(4)[None, :])
    np.testing.assert_array_equal(tree_distances(heads), expected)
    np.testing.assert_array_equal(tree_depths(heads), [0, 1, 2, 3])


def test_tree_distances_and_depths_of_a_star():
    heads = (2, 0, 2, 2, 2)
    distances = tree_distances(heads)
    expected = np.full((5, 5), 2)
    expected[1, :] = expected[:, 1] = 1
    np.fill_diagonal(expected, 0)
    np.testing.assert_array_equal(distances, expected)
    np.testing.assert_array_equal(tree_depths(heads), [1, 0, 1, 1, 1])


def test_tree_of_the_cat_sat_on_the_mat():
    distances = tree_distances(CAT_SAT)
    expected = np.array(
        [
            # The cat sat on the mat
            [0, 1, 2, 4, 4, 3],
            [1, 0, 1, 3, 3, 2],
            [2, 1, 0, 2, 2, 1],
            [4, 3, 2, 0, 2, 1],
            [4, 3, 2, 2, 0, 1],
            [3, 2, 1, 1, 1, 0],
        ]
    )
    np.testing.assert_array_equal(distances, expected)
    np.testing.assert_array_equal(tree_depths(CAT_SAT), [2, 1, 0, 2, 2, 1])


@pytest.mark.parametrize("heads", [(), (0, 0), (2, 3, 1), (0, 5), (1,), (0, 2)])
def test_malformed_trees_are_input_errors(heads):
    with pytest.raises(InputError):
        tree_distances(heads)


# --- a corpus with a planted tree ----------------------------------------------------------

HIDDEN, LAYERS = 32, 3


def random_heads(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    """A random recursive tree: words join in random order, each under an earlier word."""
    order = rng.permutation(n)
    heads = [0] * n
    for k in range(1, n):
        heads[order[k]] = int(order[rng.integers(k)]) + 1
    return tuple(heads)


def planted_corpus(seed: int, sentences: int):
    """Layer 2 holds the tree exactly, layer 1 the tree plus noise, layer 0 only noise.

    Each edge of a sentence gets its own orthogonal unit direction and a word is the sum of the
    edges on its path from the root, so ||h_i - h_j||² is the path length and ||h_i||² the
    depth: the identity is a perfect probe.
    """
    rng = np.random.default_rng(seed)
    trees = [random_heads(rng, int(rng.integers(6, 16))) for _ in range(sentences)]
    words = []
    for heads in trees:
        n = len(heads)
        # one direction per word, for the edge to its head: signed unit vectors, exact in float32
        directions = np.eye(HIDDEN)[:, rng.permutation(HIDDEN)[:n]] * rng.choice([-1, 1], size=n)
        paths = np.zeros((n, n))  # paths[i, k]: word k is on the way from word i to the root
        for i in range(n):
            k = i
            while heads[k] != 0:
                paths[i, k] = 1
                k = heads[k] - 1
        tree = paths @ directions.T
        noise = rng.standard_normal((n, HIDDEN)) / np.sqrt(HIDDEN) * 2
        words.append(np.stack([noise, tree + noise, tree], axis=1))
    X = np.concatenate(words).astype(np.float32)
    index = np.repeat(np.arange(sentences), [len(h) for h in trees])
    return X, index, trees


@pytest.fixture(scope="module")
def corpora():
    return planted_corpus(0, 200), planted_corpus(1, 100)


@pytest.fixture(scope="module")
def probes(corpora):
    train, dev = corpora
    return train_structural_probes(*train, *dev, training=StructuralTraining(rank=HIDDEN, batch_size=20, epochs=30), seed=0)


def test_identity_probe_scores_perfectly_on_the_planted_layer(corpora):
    _, (X, index, trees) = corpora
    scores = score_structural(identity_probes(), X, index, trees)
    assert scores.uuas[2] == pytest.approx(1.0)
    assert scores.spearman[2] == pytest.approx(1.0)
    assert scores.depth_spearman[2] == pytest.approx(1.0)
    assert scores.root_accuracy[2] == pytest.approx(1.0)


def test_training_recovers_the_planted_tree(corpora, probes):
    _, dev = corpora
    scores = score_structural(probes, *dev)
    assert scores.uuas[2] >= 0.9
    assert scores.spearman[2] >= 0.8
    assert scores.depth_spearman[2] >= 0.8
    assert scores.root_accuracy[2] >= 0.8
    assert scores.uuas[0] < 0.5  # chance is about 2/n
    assert scores.root_accuracy[0] < 0.5
    assert scores.uuas[0] < scores.uuas[1] < scores.uuas[2]
    assert probes.distance.shape == probes.depth.shape == (LAYERS, HIDDEN, HIDDEN)
    assert np.all((probes.distance_epoch >= 1) & (probes.distance_epoch <= 30))


def test_skipped_words_leave_uuas_and_root_accuracy(corpora, probes):
    _, (X, index, trees) = corpora
    # skipping the root of every sentence: no sentence can have its root found
    skip = [np.array(heads) == 0 for heads in trees]
    scores = score_structural(probes, X, index, trees, skip=skip)
    full = score_structural(probes, X, index, trees)
    np.testing.assert_array_equal(scores.root_accuracy, 0)
    np.testing.assert_array_equal(scores.spearman, full.spearman)  # Spearman uses every word, as in the paper
    assert scores.uuas[2] >= 0.5


def test_scores_are_deterministic_for_a_seed(corpora):
    train, dev = corpora
    runs = [train_structural_probes(*train, *dev, training=StructuralTraining(rank=8, epochs=2), seed=3) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].distance, runs[1].distance)
    first, second = (score_structural(run, *dev) for run in runs)
    for name in ("spearman", "uuas", "depth_spearman", "root_accuracy"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))


def test_cancel_raises_cancelled(corpora):
    train, dev = corpora
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        train_structural_probes(*train, *dev, training=StructuralTraining(rank=8, epochs=2), cancel=cancel)


def test_training_yields_progress_per_epoch(corpora):
    train, dev = corpora
    items = list(iter_structural_training(*train, *dev, training=StructuralTraining(rank=8, epochs=3, patience=None)))
    assert [item.done for item in items] == [1, 2, 3] and {item.total for item in items} == {3}
    assert [item.finished for item in items] == [False, False, True]
    assert items[-1].partial.shape == (2, LAYERS)  # the epoch's dev losses: distance, depth


def test_constant_predictions_give_nan_spearman_and_still_a_tree(corpora):
    _, (X, index, trees) = corpora
    scores = score_structural(zero_probes(), X, index, trees)
    assert np.isnan(scores.spearman).all() and np.isnan(scores.depth_spearman).all()
    assert np.all((scores.uuas >= 0) & (scores.uuas <= 1))  # zero distances still span a tree


def test_spearman_averages_only_the_chosen_lengths(corpora):
    _, (X, index, trees) = corpora
    scores = score_structural(identity_probes(), X, index, trees, spearman_lengths=(100, 200))
    assert np.isnan(scores.spearman).all() and np.isnan(scores.depth_spearman).all()
    assert scores.uuas[2] == pytest.approx(1.0)  # UUAS and root accuracy count every length


def test_words_must_match_their_trees(corpora):
    _, (X, index, trees) = corpora
    with pytest.raises(InputError, match="words"):
        score_structural(zero_probes(), X[:-1], index[:-1], trees)
    with pytest.raises(InputError, match="sentence 1: .*root"):
        score_structural(zero_probes(), X, index, [trees[0], (0,) * len(trees[1]), *trees[2:]])


def zero_probes() -> StructuralProbes:
    zeros = np.zeros(LAYERS)
    weights = np.zeros((LAYERS, HIDDEN, 4), dtype=np.float32)
    return StructuralProbes(weights, weights, zeros, zeros, zeros, zeros)


def identity_probes() -> StructuralProbes:
    """Exact on the planted layer: its squared distances and norms are the tree's."""
    identity = np.broadcast_to(np.eye(HIDDEN, dtype=np.float32), (LAYERS, HIDDEN, HIDDEN))
    zeros = np.zeros(LAYERS)
    return StructuralProbes(identity, identity, zeros, zeros, zeros, zeros)
