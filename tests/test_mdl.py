"""Description length probes (Voita & Titov 2020): the online code held to its definition and to one written by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.optimize import minimize
from scipy.special import log_softmax

import bertscope
from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.probing.mdl import PORTIONS, OnlineCode, block_ends, online_codes, uniform_codelength
from bertscope.analyses.probing.run import run_probe
from bertscope.base.errors import InputError
from bertscope.cli import main
from bertscope.data.corpus import read_sentences, sample_corpus
from bertscope.data.splits import make_splits


def deterministic_problem(n: int, seed: int = 0, classes: int = 4, dim: int = 12, layers: int = 2):
    """Features `[n, layers, dim]` and labels that are a function of layer 1's features (its first `classes` argmax),
    noise at layer 0."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, layers, dim)).astype(np.float32)
    return X, X[:, 1, :classes].argmax(1).astype(np.int64)


def test_the_block_schedule_by_hand():
    # ⌊share · n⌋ at 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50, 100 %
    assert block_ends(1000) == [1, 2, 4, 8, 16, 32, 62, 125, 250, 500, 1000]
    assert block_ends(20000) == [20, 40, 80, 160, 320, 640, 1250, 2500, 5000, 10000, 20000]
    # too few examples for the first shares: each block has at least one example, repeated ends are dropped
    assert block_ends(10) == [1, 2, 5, 10]
    assert block_ends(1) == [1]
    assert PORTIONS == (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1.0)
    with pytest.raises(InputError):
        block_ends(0)


def test_the_uniform_codelength_is_n_log2_k_and_the_first_block_is_sent_with_it():
    assert uniform_codelength(1000, 17) == 1000 * math.log2(17)
    X, y = deterministic_problem(1000)
    ((code, _),) = online_codes(X, [y], num_classes=4, l2=[1e-3, 1e-3])
    assert code.examples == 1000 and code.uniform_bits == 1000 * math.log2(4) == 2000.0
    assert code.blocks[0] == (1, math.log2(4))  # ⌊0.1 % of 1000⌋ = 1 example, 2 bits
    assert [count for count, _ in code.blocks] == np.diff([0, *block_ends(1000)]).tolist()
    assert code.online_bits == pytest.approx(sum(bits for _, bits in code.blocks))
    assert code.compression == pytest.approx(code.uniform_bits / code.online_bits)
    by_hand = OnlineCode(4, ((2, 4.0), (2, 1.0)))
    assert (by_hand.uniform_bits, by_hand.online_bits, by_hand.compression) == (8.0, 5.0, 1.6)
    assert by_hand.as_json() == {"online_bits": 5.0, "uniform_bits": 8.0, "compression": 1.6, "blocks": [[2, 4.0], [2, 1.0]]}


def test_compression_grows_with_data_on_a_deterministic_task():
    compressions = []
    for n in (200, 800, 3200):
        X, y = deterministic_problem(n, seed=n)
        noise, signal = online_codes(X, [y], num_classes=4, l2=[1e-3, 1e-3])[0]
        compressions.append(signal.compression)
        assert noise.compression < 1.1  # layer 0 knows nothing of the labels: no better than the uniform code
    assert compressions[0] < compressions[1] < compressions[2] and compressions[0] > 1.5


def hand_written_online_code(
    X: np.ndarray, y: np.ndarray, classes: int, l2: float, seed: int, dev: tuple[np.ndarray, np.ndarray] | None = None
) -> list[float]:
    """The online code written out: examples in the seed's order, blocks at ⌊share·N⌋, the first sent uniform, each
    next one at −Σ log₂ p(y|x) of a multinomial logistic regression fitted to the examples before it by scipy, on
    features standardised with all N's mean and std, its loss mean cross-entropy + λ·(‖W‖² + ‖b‖²), λ = l2·N/t.
    With `dev` (features and labels), λ is chosen on it: l2·N/t, then the stronger of 1e-4 … 1, 10, 100, 1000 in
    turn, stopping at the first whose dev codelength is no shorter than the last one's."""
    n, dim = X.shape
    order = np.random.default_rng(seed).permutation(n)
    mean, std = X.mean(0), np.maximum(X.std(0), 1e-6)
    Z = ((X - mean) / std)[order].astype(np.float64)
    y = y[order]
    ends = sorted({max(1, int(share * n + 1e-9)) for share in (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1)})

    def fitted(rows: np.ndarray, labels: np.ndarray, penalty: float) -> tuple[np.ndarray, np.ndarray]:
        onehot = np.eye(classes)[labels]

        def loss(theta):
            W, b = theta[: classes * dim].reshape(classes, dim), theta[classes * dim :]
            p = np.exp(log_softmax(rows @ W.T + b, axis=1))
            value = -(onehot * np.log(p)).sum() / len(rows) + penalty * (np.square(W).sum() + np.square(b).sum())
            error = (p - onehot) / len(rows)
            return value, np.concatenate([(error.T @ rows + 2 * penalty * W).ravel(), error.sum(0) + 2 * penalty * b])

        theta = minimize(loss, np.zeros(classes * (dim + 1)), jac=True, method="L-BFGS-B", options={"gtol": 1e-12, "maxiter": 10000}).x
        return theta[: classes * dim].reshape(classes, dim), theta[classes * dim :]

    def bits_of(W: np.ndarray, b: np.ndarray, rows: np.ndarray, labels: np.ndarray) -> float:
        return -log_softmax(rows @ W.T + b, axis=1)[np.arange(len(rows)), labels].sum() / math.log(2)

    bits = [ends[0] * math.log2(classes)]
    for start, stop in zip(ends, ends[1:]):
        prior = l2 * n / start
        penalties = [prior] if dev is None else [prior, *(s for s in (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0) if s > prior)]
        best, chosen = math.inf, None
        for penalty in penalties:
            W, b = fitted(Z[:start], y[:start], penalty)
            if dev is None:
                chosen = (W, b)
                break
            on_dev = bits_of(W, b, ((dev[0] - mean) / std).astype(np.float64), dev[1])
            if on_dev >= best:
                break
            best, chosen = on_dev, (W, b)
        bits.append(bits_of(*chosen, Z[start:stop], y[start:stop]))
    return bits


def test_the_online_code_equals_one_written_by_hand():
    X, y = deterministic_problem(600, seed=3, classes=3, dim=6)
    noisy = np.where(np.random.default_rng(4).random(600) < 0.2, (y + 1) % 3, y)  # 20 % of the labels wrong: probabilities matter
    for seed, l2 in ((0, 1e-3), (5, 0.05)):
        ((_, code),) = online_codes(X, [noisy], num_classes=3, l2=[l2, l2], seed=seed)
        reference = hand_written_online_code(X[:, 1], noisy, 3, l2, seed)
        assert len(code.blocks) == len(reference) == 10  # 0.1 % and 0.2 % of 600 both end at the first example
        np.testing.assert_allclose([bits for _, bits in code.blocks], reference, rtol=2e-3, atol=2e-3)
        assert code.online_bits == pytest.approx(sum(reference), rel=1e-4)


def test_strengths_chosen_on_dev_equal_the_hand_written_search():
    X, y = deterministic_problem(600, seed=3, classes=3, dim=6)
    noisy = np.where(np.random.default_rng(4).random(600) < 0.2, (y + 1) % 3, y)
    X_dev, y_dev = deterministic_problem(200, seed=11, classes=3, dim=6)
    ((_, code),) = online_codes(X, [noisy], num_classes=3, l2=[1e-3, 1e-3], X_dev=X_dev, dev_label_sets=[y_dev])
    reference = hand_written_online_code(X[:, 1], noisy, 3, 1e-3, 0, dev=(X_dev[:, 1], y_dev))
    np.testing.assert_allclose([bits for _, bits in code.blocks], reference, rtol=2e-3, atol=2e-3)
    assert code.online_bits == pytest.approx(sum(reference), rel=1e-4)


def test_a_probe_that_overfits_small_blocks_still_ranks_the_layers_on_dev():
    """Many dimensions, few examples, a weak signal: at a fixed weak prior the probes are sure and often wrong, and both
    layers code the labels in four to eight times the uniform code's bits, the one that holds them too; chosen on dev,
    the layer of noise stays within a few per cent of the uniform code and the informative one compresses."""
    rng = np.random.default_rng(0)
    n, dim = 400, 120
    X = rng.normal(size=(n + 200, 2, dim)).astype(np.float32)
    y = (X[:, 1, 0] + 1.5 * rng.normal(size=n + 200) > 0).astype(np.int64)  # layer 1 holds a noisy copy of the label
    ((fixed_noise, fixed_signal),) = online_codes(X[:n], [y[:n]], num_classes=2, l2=[1e-4, 1e-4])
    ((noise, signal),) = online_codes(X[:n], [y[:n]], num_classes=2, l2=[1e-4, 1e-4], X_dev=X[n:], dev_label_sets=[y[n:]])
    assert fixed_signal.compression < 0.3 and fixed_noise.compression < 0.3
    assert signal.compression > 1.01 and 0.95 < noise.compression < 1.01


def test_a_task_and_its_control_share_the_passes_as_if_fitted_alone():
    X, y = deterministic_problem(500, seed=7)
    control = np.random.default_rng(8).integers(0, 4, 500)
    together = online_codes(X, [y, control], num_classes=4, l2=[1e-2, 1e-2])
    alone = [online_codes(X, [labels], num_classes=4, l2=[1e-2, 1e-2])[0] for labels in (y, control)]
    for codes, single in zip(together, alone):
        for layer in range(2):
            np.testing.assert_allclose([b for _, b in codes[layer].blocks], [b for _, b in single[layer].blocks], rtol=1e-4)
    assert together[0][1].compression > 2 > together[1][1].compression  # the control's labels are noise


def test_the_order_is_the_seeds():
    X, y = deterministic_problem(400, seed=9)
    ((_, first),) = online_codes(X, [y], num_classes=4, l2=[1e-2, 1e-2], seed=0)
    ((_, again),) = online_codes(X, [y], num_classes=4, l2=[1e-2, 1e-2], seed=0)
    ((_, other),) = online_codes(X, [y], num_classes=4, l2=[1e-2, 1e-2], seed=1)
    assert first == again and first != other


def treebank_splits():
    treebank = list(read_sentences(sample_corpus("conllu"), limit=20))
    return make_splits(treebank * 3, treebank[:5], treebank[5:])


def test_probe_with_mdl_on_a_word_task_reads_the_features_once(tiny_session, tmp_path, monkeypatch):
    from bertscope.analyses.probing import run as probing

    extracted = []
    extract = probing.extract_sharded

    def counted(*args, **options):
        extracted.append(1)
        return extract(*args, **options)

    monkeypatch.setattr(probing, "extract_sharded", counted)
    report = list(run_probe(tiny_session, "upos", treebank_splits(), job=JobOptions(cache_dir=False), random_baseline=False, mdl=True))[
        -1
    ].result
    assert len(extracted) == 3  # train, dev and test, once each: accuracy and description length share them
    n, classes = report.counts["train"], report.counts["classes"]
    for layer in report.layers:
        code = layer["mdl"]
        assert set(code) == {"online_bits", "uniform_bits", "compression", "blocks", "control"}
        assert code["uniform_bits"] == pytest.approx(n * math.log2(classes), abs=1e-3)
        assert [count for count, _ in code["blocks"]] == np.diff([0, *block_ends(n)]).tolist()
        assert code["blocks"][0][1] == pytest.approx(block_ends(n)[0] * math.log2(classes), abs=1e-3)
        assert code["online_bits"] == pytest.approx(sum(bits for _, bits in code["blocks"]), abs=0.01)
        assert code["compression"] == pytest.approx(code["uniform_bits"] / code["online_bits"], rel=1e-3)
        assert set(code["control"]) == {"online_bits", "uniform_bits", "compression", "blocks"}
    assert report.mdl["examples"] == n and report.mdl["unit"] == "words" and report.mdl["control"]
    assert report.mdl["seed"] == 0 and report.mdl["probe"].startswith("linear") and report.mdl["block_ends"] == block_ends(n)
    row = report.table()[1]
    assert "mdl" not in row and row["compression"] == report.layers[1]["mdl"]["compression"]
    assert row["control_compression"] == report.layers[1]["mdl"]["control"]["compression"]
    assert report.compression().shape == (len(report.layers),) and "compression" in repr(report)
    assert json.loads(json.dumps(report.as_json()))["mdl"]["examples"] == n


def test_probe_without_mdl_says_nothing_of_it(tiny_session, tmp_path):
    report = list(run_probe(tiny_session, "upos", treebank_splits(), job=JobOptions(cache_dir=tmp_path), random_baseline=False))[-1].result
    assert "mdl" not in report.layers[0] and "mdl" not in report.as_json() and "compression" not in report.table()[0]
    with pytest.raises(InputError, match="mdl=True"):
        report.compression()


def test_mdl_on_a_sentence_task_and_with_mlp_probes(tiny_session, tmp_path):
    data = sample_corpus("senteval")
    linear = bertscope.probe(tiny_session, "length", data=data, mdl=True, random_baseline=False, cache_dir=tmp_path)
    assert "control" not in linear.layers[0]["mdl"] and linear.mdl["unit"] == "sentences" and not linear.mdl["control"]
    assert "control_compression" not in linear.table()[0]
    mlp = bertscope.probe(tiny_session, "length", data=data, mdl=True, random_baseline=False, cache_dir=tmp_path, kind="mlp")
    assert mlp.mdl["probe"].startswith("mlp")
    for layer in mlp.layers:
        assert np.isfinite(layer["mdl"]["online_bits"]) and layer["mdl"]["online_bits"] > 0


def test_structural_tasks_have_no_description_length(tiny_session):
    with pytest.raises(InputError, match="structural probes") as refused:
        bertscope.probe(tiny_session, "depth", mdl=True)
    assert refused.value.setting == "mdl"


def test_the_figure_draws_compression_when_asked(tiny_session, tmp_path):
    report = list(run_probe(tiny_session, "upos", treebank_splits(), job=JobOptions(cache_dir=tmp_path), random_baseline=False, mdl=True))[
        -1
    ].result
    scores, codes = report.figure(mdl=True).axes  # the accuracy above, the compression below (issue 54)
    np.testing.assert_allclose(scores.get_lines()[0].get_ydata(), [layer["accuracy"] for layer in report.layers])
    lines = {line.get_label(): line for line in codes.get_lines()}
    np.testing.assert_allclose(lines["upos"].get_ydata(), report.compression())
    np.testing.assert_allclose(lines["control task"].get_ydata(), report.compression(control=True))
    np.testing.assert_allclose(lines["uniform code"].get_ydata(), 1.0)
    accuracy = {line.get_label(): line for line in report.figure().axes[0].get_lines()}
    np.testing.assert_allclose(accuracy["upos"].get_ydata(), [layer["accuracy"] for layer in report.layers])


def test_the_cli_prints_mdl_as_json_csv_and_a_table(tiny_bert_dir, tmp_path):
    base = [
        "probe",
        "--task",
        "upos",
        "--data",
        str(sample_corpus("conllu")),
        "--limit",
        "40",
        "-m",
        str(tiny_bert_dir),
        "--cache-dir",
        str(tmp_path),
        "--no-random-baseline",
        "--mdl",
    ]
    result = CliRunner().invoke(main, [*base, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"online_bits", "uniform_bits", "compression", "blocks", "control"} <= set(data["layers"][0]["mdl"])
    assert data["mdl"]["order"] == "the training words shuffled with seed 0"
    result = CliRunner().invoke(main, [*base, "--csv"], catch_exceptions=False)
    header = result.stdout.splitlines()[0].split(",")
    assert {"online_bits", "compression", "control_online_bits", "control_compression"} <= set(header) and "mdl" not in header
    result = CliRunner().invoke(main, [*base, "--figure", str(tmp_path / "codes.svg")], catch_exceptions=False)
    assert result.exit_code == 0 and "compr." in result.stdout and "description length" in result.stdout
    assert "compression" in (tmp_path / "codes.svg").read_text()


def test_the_cli_refuses_mdl_on_a_structural_task_before_torch(tiny_bert_dir):
    from tests.helpers.cli import assert_refused_before_torch

    assert_refused_before_torch(["probe", "--task", "depth", "--mdl", "-m", str(tiny_bert_dir)], "structural probes")
