"""Representation geometry: CKA, TwoNN, neighbourhoods and PCA on synthetic data; the corpus pass on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.geometry.representations import SmallestKeys, row_keys, stream_sample
from bertscope.analyses.geometry.run import (
    cka_matrices,
    linear_cka,
    nearest_neighbours,
    neighbourhood_overlap,
    pca_2d,
    representation_geometry,
    twonn_dimension,
)
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence, read_sentences, sample_corpus


def rotation(d: int, seed: int = 0) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def reference_debiased_cka(X: np.ndarray, Y: np.ndarray) -> float:
    """Song et al.'s unbiased HSIC written out on n × n Gram matrices (Kornblith et al., section 3)."""

    def hsic(K, L):
        n = len(K)
        K, L = K.copy(), L.copy()
        np.fill_diagonal(K, 0)
        np.fill_diagonal(L, 0)
        one = np.ones(n)
        return (np.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2)) - 2 / (n - 2) * one @ K @ L @ one) / (n * (n - 3))

    X, Y = X - X.mean(0), Y - Y.mean(0)
    K, L = X @ X.T, Y @ Y.T
    return hsic(K, L) / np.sqrt(hsic(K, K) * hsic(L, L))


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(0).normal(size=(300, 20))


@pytest.mark.parametrize("debiased", [False, True])
def test_cka_of_a_representation_with_itself_is_one(X, debiased):
    assert linear_cka(X, X, debiased=debiased) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("debiased", [False, True])
def test_cka_is_invariant_to_orthogonal_transforms_isotropic_scaling_and_shifts(X, debiased):
    Y = np.tanh(X[:, :12] @ np.random.default_rng(1).normal(size=(12, 16)))  # a different, related representation
    base = linear_cka(X, Y, debiased=debiased)
    assert 0.05 < base < 0.95
    moved = 3.7 * X @ rotation(20) + 5.0
    assert linear_cka(moved, Y, debiased=debiased) == pytest.approx(base, abs=1e-10)
    assert linear_cka(X, 0.01 * Y @ rotation(16, 2), debiased=debiased) == pytest.approx(base, abs=1e-10)


def test_cka_is_not_invariant_to_anisotropic_scaling(X):
    Y = X @ np.diag(np.linspace(0.1, 10, 20))
    assert linear_cka(X, Y) < 0.9


def test_debiased_cka_matches_the_gram_matrix_formula(X):
    Y = X[:, :5] @ np.random.default_rng(3).normal(size=(5, 8)) + np.random.default_rng(4).normal(size=(300, 8))
    assert linear_cka(X, Y, debiased=True) == pytest.approx(reference_debiased_cka(X, Y), abs=1e-10)


def test_debiased_cka_of_independent_noise_is_near_zero_where_the_plain_one_is_not():
    rng = np.random.default_rng(5)
    X, Y = rng.normal(size=(100, 80)), rng.normal(size=(100, 80))
    assert linear_cka(X, Y) > 0.3  # the bias Kornblith et al. warn of when d is close to n
    assert abs(linear_cka(X, Y, debiased=True)) < 0.05


def test_cka_matrices_are_symmetric_with_a_unit_diagonal(X):
    layers = [X, X @ rotation(20), np.tanh(X), X[:, :3]]
    biased, debiased = cka_matrices(layers)
    for matrix in (biased, debiased):
        np.testing.assert_allclose(matrix, matrix.T)
        np.testing.assert_allclose(np.diagonal(matrix), 1.0, atol=1e-12)
    assert biased[0, 1] == pytest.approx(1.0)
    rect, _ = cka_matrices(layers, layers[:2])
    np.testing.assert_allclose(rect, biased[:, :2])


@pytest.mark.parametrize("dimension", [2, 5, 8])
def test_twonn_finds_the_dimension_of_a_linear_manifold_within_ten_percent(dimension):
    rng = np.random.default_rng(dimension)
    points = rng.normal(size=(2000, dimension)) @ rotation(40, dimension)[:dimension]  # a d-dimensional subspace of R^40
    estimate, duplicates = twonn_dimension(points)
    assert duplicates == 0
    assert estimate == pytest.approx(dimension, rel=0.10)


def test_twonn_on_a_curved_manifold_and_with_duplicates():
    rng = np.random.default_rng(7)
    angles = rng.uniform(0, 2 * np.pi, size=(2000, 2))
    torus = np.stack(
        [(2 + np.cos(angles[:, 0])) * np.cos(angles[:, 1]), (2 + np.cos(angles[:, 0])) * np.sin(angles[:, 1]), np.sin(angles[:, 0])], axis=1
    )  # a 2-D torus in R^3
    with_copies = np.concatenate([torus, torus[:300]])
    estimate, duplicates = twonn_dimension(with_copies)
    assert duplicates == 300
    assert estimate == pytest.approx(2.0, rel=0.10)


def test_twonn_from_a_neighbour_search_equals_its_own_search_with_groups_of_every_size():
    rng = np.random.default_rng(11)
    points = rng.normal(size=(400, 6))
    copies = np.repeat(np.arange(400), rng.choice([1, 1, 1, 2, 5, 30], size=400))  # some groups longer than any list
    X = points[rng.permutation(copies)]
    expected = twonn_dimension(X)
    assert expected[1] == len(X) - 400
    for k in (1, 2, 3, 10):
        assert twonn_dimension(X, found=nearest_neighbours(X, k)) == expected
    assert twonn_dimension(points, found=nearest_neighbours(points, 4)) == twonn_dimension(points)  # no duplicates


def test_nearest_neighbours_match_brute_force_and_do_not_depend_on_the_block():
    X = np.random.default_rng(8).normal(size=(250, 16))
    indices, distances = nearest_neighbours(X, 5, block=64)
    full = np.linalg.norm(X[:, None] - X[None], axis=-1)
    np.fill_diagonal(full, np.inf)
    np.testing.assert_array_equal(indices, np.argsort(full, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(distances, np.sort(full, axis=1)[:, :5])
    np.testing.assert_array_equal(nearest_neighbours(X, 5, block=1000)[0], indices)


def test_ties_beyond_the_spare_candidates_still_go_to_the_lowest_index():
    """Thirty copies of one point (as the embedding layer repeats a token): each copy's neighbours are the
    lowest-numbered other copies, as a stable brute-force sort gives, not whichever topk kept."""
    rng = np.random.default_rng(12)
    X = np.concatenate([np.repeat(rng.normal(size=(1, 8)), 30, axis=0), rng.normal(size=(170, 8))])[rng.permutation(200)]
    indices, distances = nearest_neighbours(X, 5, block=64)
    full = np.linalg.norm(X[:, None] - X[None], axis=-1)
    np.fill_diagonal(full, np.inf)
    np.testing.assert_array_equal(indices, np.argsort(full, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(distances, np.sort(full, axis=1)[:, :5])


def test_neighbourhood_overlap():
    X = np.random.default_rng(9).normal(size=(200, 10))
    same, _ = nearest_neighbours(X, 10)
    assert neighbourhood_overlap(same, same) == 1.0
    assert neighbourhood_overlap(same, nearest_neighbours(2 * X @ rotation(10) + 1, 10)[0]) == 1.0  # distances kept
    unrelated, _ = nearest_neighbours(np.random.default_rng(10).normal(size=(200, 10)), 10)
    assert neighbourhood_overlap(same, unrelated) < 0.15  # chance is k / (n - 1) = 0.05


def test_pca_recovers_the_main_axes_and_their_variance():
    rng = np.random.default_rng(11)
    raw = rng.normal(size=(1000, 3)) * np.array([10.0, 3.0, 0.1])
    projection, explained = pca_2d(raw @ rotation(3, 12))
    assert explained[0] == pytest.approx(100 / 109.01, abs=0.02) and explained[1] == pytest.approx(9 / 109.01, abs=0.01)
    assert abs(np.corrcoef(projection[:, 0], raw[:, 0])[0, 1]) > 0.999
    np.testing.assert_array_equal(projection, pca_2d(raw @ rotation(3, 12))[0])  # reproducible signs


def test_the_sample_is_uniform_seeded_bounded_and_blind_to_batching():
    kept = np.zeros(100)
    sentence_of, place = np.arange(100) // 5, np.arange(100) % 5  # 20 sentences of 5 rows

    def sample(seed, batch):
        sampler, slots = SmallestKeys(10), np.full(10, -1)
        for start in range(0, 100, batch):
            rows = np.arange(start, min(start + batch, 100))
            origins = np.stack([sentence_of[rows], place[rows], np.zeros_like(rows)], axis=1)
            chosen, where = sampler.offer(row_keys(seed, origins[:, 0], origins[:, 1]), origins)
            slots[where] = rows[chosen]
        return slots

    for seed in range(400):
        slots = sample(seed, 7)
        assert (slots >= 0).all() and len(set(slots)) == 10
        kept[slots] += 1
        if seed < 20:  # the same rows whatever the batches they come in
            assert set(slots) == set(sample(seed, 3)) == set(sample(seed, 100))
    assert kept.min() > 10 and kept.max() < 70  # each row kept about 40 times in 400 runs
    assert set(sample(3, 7)) != set(sample(4, 7))


SENTENCES = [
    Sentence(text)
    for text in (
        "The cat sat on the mat.",
        "A dog barked at the mail carrier this morning.",
        "She said that the report was finished.",
        "Rain fell all night over the quiet town.",
        "They will visit their grandparents next week.",
        "The committee approved it.",
    )
]


def run_geometry(session, sentences, **options):
    steps = list(representation_geometry(session, sentences, **options))
    assert steps[-1].result is not None
    return steps[-1].result


def test_geometry_over_tokens_of_a_tiny_model(tiny_session):
    result = run_geometry(tiny_session, SENTENCES, max_rows=40, neighbours=5)
    layers = tiny_session.num_layers + 1
    assert result.unit == "token" and result.size == 40 and result.seen > 40
    assert result.cka.shape == (layers, layers) and result.projection.shape == (layers, 40, 2)
    np.testing.assert_allclose(np.diagonal(result.cka), 1.0, atol=1e-9)
    assert (
        len(result.neighbourhood_overlap) == layers - 1
        and ((0 <= result.neighbourhood_overlap) & (result.neighbourhood_overlap <= 1)).all()
    )
    assert np.isfinite(result.intrinsic_dimension).all()
    assert set(result.labels["token"]) <= {"[CLS]", "[SEP]", "punct", "word", "subword"}
    assert any("seeded sample of 40" in note for note in result.notes)
    payload = result.as_json("tiny", points=True)
    assert [entry["layer"] for entry in payload["layers"]] == list(range(layers))
    assert len(payload["layers"][0]["points"]) == 40 and len(payload["rows"]) == 40


def test_same_seed_same_sample_other_seed_other_sample(tiny_session):
    first = run_geometry(tiny_session, SENTENCES, max_rows=30, job=JobOptions(seed=1))
    again = run_geometry(tiny_session, SENTENCES, max_rows=30, job=JobOptions(seed=1))
    other = run_geometry(tiny_session, SENTENCES, max_rows=30, job=JobOptions(seed=2))
    assert first.texts == again.texts and np.array_equal(first.cka, again.cka)
    assert first.texts != other.texts


def test_sampled_rows_are_the_models_own_hidden_states(tiny_session):
    sentences = SENTENCES[:2]
    sample = [step for step in stream_sample([tiny_session], sentences, unit="token", max_rows=1000)][-1].result
    expected = np.concatenate([tiny_session.forward(s.text).hidden_states.transpose(1, 0, 2) for s in sentences])  # corpus order
    np.testing.assert_allclose(sample.states[0], expected, atol=1e-5)


def test_words_of_a_conllu_corpus_labelled_by_upos(tiny_session):
    sentences = list(read_sentences(sample_corpus("conllu"), limit=6))
    result = run_geometry(tiny_session, sentences)
    assert result.unit == "word" and result.size == sum(len(s.words) for s in sentences)
    assert "NOUN" in result.labels["upos"] and set(result.labels) == {"upos", "xpos", "deprel"}


def test_a_word_that_makes_no_token_has_no_row_and_the_others_keep_their_labels(tiny_session):
    """The uncased WordPiece tokenizer drops a zero-width space: its word gets no row, and each later word keeps its own
    text and tags (the rows are each word's first token, found for a whole batch at once)."""
    words = ("The", "\u200b", "cat", "sat", ".")
    odd = Sentence(text=" ".join(words), words=words, upos=("DET", "X", "NOUN", "VERB", "PUNCT"))
    plain = Sentence(text="Dogs bark .", words=("Dogs", "bark", "."), upos=("NOUN", "VERB", "PUNCT"))
    sample = list(stream_sample([tiny_session], [plain, odd, plain], unit="word", max_rows=1000))[-1].result
    rows = sorted(zip(sample.texts, sample.labels["upos"], strict=True))
    assert rows == sorted(
        [("Dogs", "NOUN"), ("bark", "VERB"), (".", "PUNCT")] * 2 + [("The", "DET"), ("cat", "NOUN"), ("sat", "VERB"), (".", "PUNCT")]
    )
    assert sample.truncated == 1  # the word with no token is counted as not represented


def test_sentence_units_from_senteval_and_errors(tiny_session):
    sentences = list(read_sentences(sample_corpus("senteval"), limit=12))
    result = run_geometry(tiny_session, sentences)
    assert result.unit == "sentence" and result.size == 12 and set(result.labels) == {"label"}
    with pytest.raises(InputError, match="CoNLL-U"):
        run_geometry(tiny_session, SENTENCES, unit="word")
    with pytest.raises(InputError, match="at least 4"):
        run_geometry(tiny_session, SENTENCES[:2], unit="sentence")


def test_geometry_can_be_cancelled(tiny_session):
    import threading

    cancel = threading.Event()
    steps = representation_geometry(tiny_session, SENTENCES * 20, job=JobOptions(batch_size=4, cancel=cancel))
    next(steps)
    cancel.set()
    assert all(step.result is None for step in steps)


def test_an_equal_sentence_gives_equal_rows_whatever_batch_it_ran_in(tiny_session, monkeypatch):
    from bertscope.analyses import streaming

    monkeypatch.setattr(streaming, "CHUNK", 2)  # the first copy runs padded beside a long sentence, the second alone
    short, long = SENTENCES[0], Sentence("A much longer sentence, which pads the short one in its batch to many more tokens.")
    sample = list(stream_sample([tiny_session], [short, long, short], unit="token", max_rows=1000))[-1].result
    first, second = np.flatnonzero(np.array(sample.texts) == "cat")[[0, 1]]
    np.testing.assert_array_equal(sample.states[0][first], sample.states[0][second])  # exact: TwoNN counts them as one
    geometry = run_geometry(tiny_session, [short, long, short], max_rows=1000)
    assert (geometry.duplicates[1:] == len(tiny_session.encode(short.text).input_ids)).all()
