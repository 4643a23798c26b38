"""Layer-wise probes on synthetic features whose answers are known, checked against scikit-learn."""

import threading

import numpy as np
import pytest

from bertscope.analyses.probing.probes import (
    Cancelled,
    ProbeScores,
    ProbeTraining,
    control_labels,
    expected_layer,
    majority_baseline,
    score,
    selectivity,
    train_probes,
    train_with_control,
)
from bertscope.base.errors import InputError


def layered(n: int, seed: int, num_classes: int = 4, dim: int = 32):
    """Three layers: 0 is noise, 1 holds the class weakly, 2 strongly (Gaussian class means).

    Every feature gets its own scale, so that standardising matters.
    """
    means = np.random.default_rng(0).normal(size=(num_classes, dim))
    scales = np.exp(np.random.default_rng(1).normal(size=(3, dim)))
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, n)
    X = rng.normal(size=(n, 3, dim))
    X[:, 1] += 0.12 * means[y]
    X[:, 2] += 0.45 * means[y]
    return (X * scales).astype(np.float32), y


def logistic(n: int, seed: int, dim: int = 64, num_classes: int = 4, prior: float = 0.1):
    """One layer whose labels come from a true logistic model with weights drawn from N(0, prior).

    The best penalty is then the Gaussian prior's, fixed in scikit-learn's C; in our mean-loss
    form that is l2 = 1 / (2 * prior * N), so fewer rows call for a stronger penalty.
    """
    weights = np.random.default_rng(seed).normal(size=(dim, num_classes)) * prior**0.5
    rng = np.random.default_rng(seed + 1000)
    X = rng.normal(size=(n, 1, dim))
    logits = X[:, 0] @ weights
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (p.cumsum(1) > rng.random((n, 1))).argmax(1)
    return X.astype(np.float32), y


@pytest.fixture(scope="module")
def layered_sets():
    return layered(1500, 1), layered(1000, 2), layered(3000, 3)


@pytest.mark.parametrize("l2", [1e-3, 1e-2])
def test_linear_probe_matches_scikit_learn(layered_sets, l2):
    linear_model = pytest.importorskip("sklearn.linear_model")
    metrics = pytest.importorskip("sklearn.metrics")
    (X_train, y_train), (X_dev, y_dev), (X_test, y_test) = layered_sets
    probes = train_probes(X_train, y_train, X_dev, y_dev, num_classes=4, l2_grid=(l2,))
    scores = score(probes, X_test, y_test, num_classes=4)
    assert probes.weights.shape == (3, 32, 4) and probes.bias.shape == (3, 4)
    assert scores.l2.tolist() == [l2] * 3
    for layer in range(3):

        def standardise(X, layer=layer):
            return (X[:, layer] - probes.mean[layer]) / probes.std[layer]

        # Our loss, mean cross-entropy + l2 * ||W||², has the same minimum as scikit-learn's
        # C * sum cross-entropy + ||W||² / 2 for C = 1 / (2 * l2 * N).
        reference = linear_model.LogisticRegression(C=1 / (2 * l2 * len(y_train)), max_iter=10_000, tol=1e-8)
        reference.fit(standardise(X_train), y_train)
        predicted = reference.predict(standardise(X_test))
        assert scores.accuracy[layer] == pytest.approx(np.mean(predicted == y_test), abs=0.01)
        assert np.mean(predicted == probes.predict(X_test)[:, layer]) > 0.99
        assert np.abs(probes.weights[layer] - reference.coef_.T).max() < 0.02 * np.abs(reference.coef_).max()
        ours_f1 = metrics.f1_score(y_test, probes.predict(X_test)[:, layer], average="macro")
        assert scores.macro_f1[layer] == pytest.approx(ours_f1)

    chance = 0.25
    assert abs(scores.accuracy[0] - chance) < 0.04
    assert scores.accuracy[2] > scores.accuracy[1] + 0.2 > chance + 0.3
    assert 1 < expected_layer(scores.accuracy) < 2


def test_l2_selection_regularises_harder_with_few_rows():
    def mean_log_l2(rows: int) -> float:
        chosen = []
        for problem in range(6):  # dev accuracy is flat near its best: average over problems
            X, y = logistic(rows + 20_000, seed=problem)
            probes = train_probes(X[:rows], y[:rows], X[rows:], y[rows:], num_classes=4)
            chosen.append(probes.l2[0])
        return float(np.mean(np.log10(chosen)))

    # The prior's penalty is l2 = 1 / (2 * 0.1 * N): 5e-2 for 100 rows in 64 dimensions, 5e-4 for 10,000. The
    # choice keeps the strongest penalty within half a standard error of the best dev accuracy: at or above the
    # prior's, and more than a decade apart between the two sizes.
    few, many = mean_log_l2(100), mean_log_l2(10_000)
    assert few > -1.5 and many < -2 and few - many > 1, (few, many)


def test_a_strength_within_half_a_standard_error_of_the_best_goes_to_the_stronger_penalty():
    """Dev accuracies 0.80 (l2 1.0), 0.835 (0.1) and 0.84 (0.01) on 400 rows: half a standard error at the best is
    0.5 · √(0.84 · 0.16 / 400) = 0.009, so 0.1 is kept, not 0.01; 1.0 lies outside the band, and 0.83 would too."""
    from bertscope.analyses.probing.probes import _choose

    grid = np.array([1.0, 0.1, 0.01])
    assert _choose(np.array([[0.80, 0.835, 0.84]]), grid, 400).tolist() == [1]
    assert _choose(np.array([[0.80, 0.83, 0.84]]), grid, 400).tolist() == [2]
    assert _choose(np.array([[0.80, 0.835, 0.84]]), grid, 0).tolist() == [2]  # no dev size known: the plain best
    assert _choose(np.array([[np.nan, 0.835, 0.84]]), grid, 400).tolist() == [1]  # NaN: not tried
    # A flat curve, every strength within one whole error (0.025 at 0.5 on 400 rows): nothing to choose, the strongest.
    assert _choose(np.array([[0.49, 0.50, 0.51]]), grid, 400).tolist() == [0]
    assert _choose(np.array([[np.nan, 0.50, 0.51]]), grid, 400).tolist() == [1]


def test_ties_go_to_the_stronger_penalty():
    # Features without any information: every penalty gets the majority class right, equally.
    rng = np.random.default_rng(0)
    X = np.zeros((200, 2, 4), dtype=np.float32)
    y = (rng.random(200) < 0.8).astype(np.int64)
    probes = train_probes(X[:100], y[:100], X[100:], y[100:], num_classes=2, l2_grid=(1e-3, 1.0, 1e-2))
    assert probes.l2.tolist() == [1.0, 1.0]
    assert probes.dev_accuracy.shape == (3, 2)


def test_predict_reproduces_the_scores_seen_in_training(layered_sets):
    (X_train, y_train), (X_dev, y_dev), (X_test, y_test) = layered_sets
    probes = train_probes(X_train, y_train, X_dev, y_dev, num_classes=4)
    dev = score(probes, X_dev, y_dev, num_classes=4)
    chosen = [list(probes.l2_grid).index(l2) for l2 in probes.l2]
    seen_in_training = probes.dev_accuracy[chosen, range(3)]
    assert np.abs(dev.accuracy - seen_in_training).max() <= 1 / len(y_dev)  # numpy vs torch rounding
    test = score(probes, X_test, y_test, num_classes=4)
    assert test.accuracy.tolist() == (probes.predict(X_test) == y_test[:, None]).mean(0).tolist()
    assert probes.predict(X_test).shape == (3000, 3)


def test_training_is_deterministic(layered_sets):
    (X_train, y_train), (X_dev, y_dev), _ = layered_sets
    runs = [
        train_probes(
            X_train[:300], y_train[:300], X_dev, y_dev, num_classes=4, kind="mlp", training=ProbeTraining(hidden=16, epochs=5), seed=3
        )
        for _ in range(2)
    ]
    assert np.array_equal(runs[0].hidden_weights, runs[1].hidden_weights)
    assert np.array_equal(runs[0].weights, runs[1].weights)


def xor(n: int, seed: int):
    """Layer 1's class is the XOR of two signs: no straight line separates it."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2, 8)).astype(np.float32)
    y = ((X[:, 1, 0] > 0) ^ (X[:, 1, 1] > 0)).astype(np.int64)
    return X, y


def test_mlp_probe_beats_linear_on_a_nonlinear_property():
    (X_train, y_train), (X_dev, y_dev), (X_test, y_test) = xor(1000, 0), xor(500, 1), xor(1000, 2)
    linear = score(train_probes(X_train, y_train, X_dev, y_dev, num_classes=2), X_test, y_test, 2)
    mlp_probes = train_probes(
        X_train,
        y_train,
        X_dev,
        y_dev,
        num_classes=2,
        kind="mlp",
        l2_grid=(1e-4, 1e-2),
        training=ProbeTraining(epochs=150, hidden=32, lr=1e-2),
    )
    mlp = score(mlp_probes, X_test, y_test, 2)
    assert mlp_probes.hidden_weights.shape == (2, 8, 32) and mlp_probes.weights.shape == (2, 32, 2)
    assert linear.accuracy[1] < 0.6
    assert mlp.accuracy[1] > 0.9
    assert mlp.accuracy[0] < 0.6  # the noise layer stays at chance


def test_control_labels_are_fixed_per_type_and_follow_the_distribution():
    words = [f"w{i}" for i in range(4000)]
    distribution = [0.5, 0.3, 0.15, 0.05]
    labels = control_labels(words + words[:10], 4, seed=1, distribution=distribution)
    assert labels == control_labels(words, 4, seed=1, distribution=distribution)
    assert labels != control_labels(words, 4, seed=2, distribution=distribution)
    # A type's label does not depend on which other types are mapped with it.
    assert control_labels(words[::-1][:50], 4, seed=1, distribution=distribution) == {w: labels[w] for w in words[::-1][:50]}
    shares = np.bincount(list(labels.values()), minlength=4) / len(labels)
    assert np.abs(shares - distribution).max() < 0.03
    assert set(control_labels(["a", "b"], 3).values()) <= {0, 1, 2}
    with pytest.raises(InputError):
        control_labels(words, 3, distribution=distribution)


def test_control_task_is_chance_on_uninformative_features_and_learnt_from_word_identity():
    rng = np.random.default_rng(0)
    vocabulary = [f"type{i}" for i in range(100)]
    tokens = rng.integers(0, len(vocabulary), 3000)
    labels = control_labels(vocabulary, 4, seed=0)
    y = np.array([labels[vocabulary[t]] for t in tokens])
    identity = rng.normal(size=(len(vocabulary), 64))
    X = np.stack([rng.normal(size=(3000, 64)), identity[tokens] + 0.1 * rng.normal(size=(3000, 64))], axis=1)
    X = X.astype(np.float32)
    probes = train_probes(X[:2000], y[:2000], X[2000:2500], y[2000:2500], num_classes=4)
    control = score(probes, X[2500:], y[2500:], 4)
    chance = majority_baseline(y[:2000], y[2500:])
    assert abs(control.accuracy[0] - chance) < 0.06  # noise: nothing to memorise
    assert control.accuracy[1] > chance + 0.2  # the word's identity lets a probe memorise its control label


def test_selectivity_is_task_minus_control_accuracy():
    def scores(*accuracy):
        return ProbeScores(accuracy=np.array(accuracy), macro_f1=np.array(accuracy), l2=np.full(len(accuracy), 0.01))

    assert selectivity(scores(0.9, 0.95), scores(0.5, 0.85)).tolist() == pytest.approx([0.4, 0.1])


def test_majority_baseline():
    assert majority_baseline(np.array([0, 1, 1, 2]), np.array([1, 1, 0, 2])) == 0.5
    assert majority_baseline(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 1])) == 0.25  # ties: the lower label
    assert np.isnan(majority_baseline(np.array([0]), np.array([], dtype=int)))


def test_expected_layer():
    assert expected_layer(np.array([0.0, 1.0, 1.0])) == pytest.approx(1.0)
    assert expected_layer(np.array([0.0, 0.0, 1.0])) == pytest.approx(2.0)
    assert expected_layer(np.array([0.0, 0.5, 1.0])) == pytest.approx(1.5)
    # Δ = (0.2, 0.1, 0.1): (1*0.2 + 2*0.1 + 3*0.1) / 0.4
    assert expected_layer(np.array([0.5, 0.7, 0.8, 0.9])) == pytest.approx(1.75)
    # a loss in a later layer pulls the centre back: Δ = (0.4, -0.2)
    assert expected_layer(np.array([0.2, 0.6, 0.4])) == pytest.approx(0.0)
    assert expected_layer(np.maximum.accumulate([0.2, 0.6, 0.4])) == pytest.approx(1.0)
    assert np.isnan(expected_layer(np.array([0.7, 0.7, 0.7])))
    assert np.isnan(expected_layer(np.array([0.3, 0.6, 0.3])))
    assert np.isnan(expected_layer(np.array([0.9])))


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_cancel_raises_cancelled(layered_sets, kind):
    (X_train, y_train), (X_dev, y_dev), _ = layered_sets
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        train_probes(X_train, y_train, X_dev, y_dev, num_classes=4, kind=kind, cancel=cancel)

    class SetAfter:  # an event that is set while training runs
        def __init__(self, checks: int):
            self.checks = checks

        def is_set(self) -> bool:
            self.checks -= 1
            return self.checks < 0

    with pytest.raises(Cancelled):
        train_probes(X_train, y_train, X_dev, y_dev, num_classes=4, kind=kind, cancel=SetAfter(5))


def test_bad_input_is_an_input_error(layered_sets):
    (X_train, y_train), (X_dev, y_dev), _ = layered_sets
    with pytest.raises(InputError, match="0..3"):
        train_probes(X_train, y_train + 1, X_dev, y_dev, num_classes=4)
    with pytest.raises(InputError, match="layers"):
        train_probes(X_train, y_train, X_dev[:, :2], y_dev, num_classes=4)
    with pytest.raises(InputError, match="one per example"):
        train_probes(X_train, y_train[:-1], X_dev, y_dev, num_classes=4)
    with pytest.raises(InputError, match="kind"):
        train_probes(X_train, y_train, X_dev, y_dev, num_classes=4, kind="svm")
    with pytest.raises(InputError, match="grid"):
        train_probes(X_train, y_train, X_dev, y_dev, num_classes=4, l2_grid=())


def test_large_train_sets_choose_l2_on_a_subset_then_fit_on_all():
    """Above SELECTION_ROWS rows the grid runs on a subset; the final fit equals scikit-learn's at that C."""
    from bertscope.analyses.probing.probes import SELECTION_ROWS

    linear_model = pytest.importorskip("sklearn.linear_model")
    (X, y), (X_dev, y_dev), (X_test, y_test) = layered(SELECTION_ROWS + 2000, 4), layered(800, 5), layered(2000, 6)
    probes = train_probes(X, y, X_dev, y_dev, num_classes=4)
    ours = score(probes, X_test, y_test, 4).accuracy
    assert ours[2] > ours[1] > ours[0] + 0.05
    for layer in (1, 2):
        standardised = (X[:, layer] - probes.mean[layer]) / probes.std[layer]
        reference = linear_model.LogisticRegression(C=1 / (2 * probes.l2[layer] * len(y)), max_iter=2000, tol=1e-8)
        reference.fit(standardised, y)
        expected = reference.score((X_test[:, layer] - probes.mean[layer]) / probes.std[layer], y_test)
        assert abs(ours[layer] - expected) <= 0.01


def test_the_plain_matmul_fallback_trains_the_same_probes(layered_sets, monkeypatch):
    """Where torch lacks oneDNN's product operator, plain matmul gives the same probes."""
    from bertscope.model import cpu_linear

    (X_train, y_train), (X_dev, y_dev), _ = layered_sets
    default = train_probes(X_train, y_train, X_dev, y_dev, num_classes=4)
    monkeypatch.setattr(cpu_linear, "_available", False)
    fallback = train_probes(X_train, y_train, X_dev, y_dev, num_classes=4)
    assert fallback.l2.tolist() == default.l2.tolist()
    assert np.abs(fallback.weights - default.weights).max() < 1e-3 * np.abs(default.weights).max()


def test_baselines_train_at_the_strengths_another_probe_chose(layered_sets):
    """`layer_l2` trains each layer at one given strength (a baseline at the task's), and lands where the search did."""
    (X_train, y_train), (X_dev, y_dev), (X_test, y_test) = layered_sets
    grid = (1e-3, 1e-1, 3.0)
    task = train_probes(X_train, y_train, X_dev, y_dev, num_classes=4, l2_grid=grid)
    fixed = train_probes(X_train, y_train, X_dev, y_dev, num_classes=4, layer_l2=task.chosen_strengths)
    assert set(task.chosen_strengths) <= set(grid)
    assert fixed.chosen_strengths.tolist() == task.chosen_strengths.tolist()
    assert fixed.l2.tolist() == task.l2.tolist()
    tried = ~np.isnan(fixed.dev_accuracy)  # [G, L]: each layer tried its own strength only
    assert tried.sum(0).tolist() == [1, 1, 1]
    # The same loss from another start (zero, not the path's warm start): the same probes, to the tolerance.
    agree = (fixed.predict(X_test) == task.predict(X_test)).mean(0)
    assert agree.min() > 0.99, agree
    with pytest.raises(InputError, match="one non-negative number per layer"):
        train_probes(X_train, y_train, X_dev, y_dev, num_classes=4, layer_l2=[1e-3])
    with pytest.raises(InputError, match="linear probes"):
        train_probes(X_train, y_train, X_dev, y_dev, num_classes=4, kind="mlp", layer_l2=task.chosen_strengths)


def test_a_fit_that_starts_far_from_its_optimum_still_reaches_scikit_learns(layered_sets):
    """The fit runs in coordinates whitened by the features' correlation; strongly correlated features
    (each layer a mix of the same few directions) are where plain L-BFGS crawls: the minimum must not move."""
    linear_model = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(7)
    n, dim = 2000, 24
    mixing = rng.normal(size=(dim, dim)) * np.geomspace(1, 1e-3, dim)[:, None]  # condition number ~1e3
    latent = rng.normal(size=(n, dim))
    y = (latent[:, :3] @ rng.normal(size=(3, 3))).argmax(1)
    X = (latent @ mixing)[:, None, :].astype(np.float32)
    l2 = 1e-4
    probes = train_probes(X[:1500], y[:1500], X[1500:], y[1500:], num_classes=3, l2_grid=(l2,))
    standardised = (X[:, 0] - probes.mean[0]) / probes.std[0]
    reference = linear_model.LogisticRegression(C=1 / (2 * l2 * 1500), max_iter=20_000, tol=1e-10).fit(standardised[:1500], y[:1500])
    assert np.mean(reference.predict(standardised[1500:]) == probes.predict(X[1500:])[:, 0]) > 0.99

    def loss(weights, bias):  # ours: mean cross-entropy + l2 ||W||²; flat directions leave the weights loose, not the loss
        logits = standardised[:1500].astype(np.float64) @ weights + bias
        top = logits.max(1, keepdims=True)
        log_normaliser = np.log(np.exp(logits - top).sum(1)) + top[:, 0]
        return np.mean(log_normaliser - logits[np.arange(1500), y[:1500]]) + l2 * np.square(weights).sum()

    best = loss(reference.coef_.T, reference.intercept_)
    assert loss(probes.weights[0], probes.bias[0]) - best < 2e-3 * best  # the gradient tolerance (1e-4) leaves about 1e-3


def test_a_task_and_its_control_trained_together_are_the_probes_trained_apart():
    """`train_with_control` shares the two final fits' passes over the rows; each probe is the one trained alone."""
    from bertscope.analyses.probing.probes import SELECTION_ROWS

    (X, y), (X_dev, y_dev) = layered(SELECTION_ROWS + 1500, 8), layered(600, 9)
    words = np.random.default_rng(10).integers(0, 50, len(X) + len(X_dev))  # a word type per row
    by_type = np.random.default_rng(11).integers(0, 4, 50)
    control, control_dev = by_type[words[: len(X)]], by_type[words[len(X) :]]
    task, control_probes = train_with_control(X, y, X_dev, y_dev, control, control_dev, num_classes=4)
    alone = train_probes(X, y, X_dev, y_dev, num_classes=4)
    control_alone = train_probes(X, control, X_dev, control_dev, num_classes=4, layer_l2=alone.chosen_strengths)
    for together, apart in ((task, alone), (control_probes, control_alone)):
        assert together.l2.tolist() == apart.l2.tolist() and together.l2_grid.tolist() == apart.l2_grid.tolist()
        np.testing.assert_array_equal(np.isnan(together.dev_accuracy), np.isnan(apart.dev_accuracy))
        np.testing.assert_allclose(together.weights, apart.weights, rtol=1e-4, atol=1e-5 * np.abs(apart.weights).max())
        np.testing.assert_allclose(together.bias, apart.bias, rtol=1e-4, atol=1e-5)
