"""Amnesic probing with LEACE: the eraser against scikit-learn, the hook against layers run by hand, the analysis end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import bertscope
from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.erasure import Eraser, erasing, run_erasure
from bertscope.base.errors import InputError
from bertscope.cli import main
from bertscope.data.corpus import read_sentences, sample_corpus
from bertscope.data.splits import make_splits
from tests.family_models import FAMILIES, save_tiny_family
from tests.helpers.models import save_tiny

TEXT = "The keys to the cabinet are on the table."


def gaussian_classes(n: int, seed: int, dim: int = 10):
    """Three classes (shares 0.5, 0.3, 0.2) whose means differ along a few directions, with correlated noise."""
    rng = np.random.default_rng(seed)
    y = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    means = rng.normal(scale=2.0, size=(3, dim))
    mixing = rng.normal(size=(dim, dim)) / np.sqrt(dim)
    return (means[y] + rng.normal(size=(n, dim)) @ mixing + 5.0).astype(np.float32), y


def test_after_leace_a_logistic_regression_falls_to_the_majority_rate():
    from sklearn.linear_model import LogisticRegression

    features, labels = gaussian_classes(8000, seed=0)
    X, y, X_test, y_test = features[:4000], labels[:4000], features[4000:], labels[4000:]
    eraser = Eraser.leace(X, y, 3)
    before = LogisticRegression(max_iter=2000).fit(X, y)
    assert before.score(X_test, y_test) > 0.8
    erased, erased_test = eraser.apply(X), eraser.apply(X_test)
    majority_train, majority_test = np.mean(y == 0), np.mean(y_test == 0)
    after = LogisticRegression(max_iter=2000).fit(erased, y)
    assert abs(after.score(erased, y) - majority_train) <= 0.02  # on the features it was fitted on
    assert abs(after.score(erased_test, y_test) - majority_test) <= 0.02  # and held out
    assert eraser.rank == 2  # K − 1 directions for K classes
    assert 0 < eraser.variance_share(X) < 1
    np.testing.assert_allclose(erased.mean(0), X.mean(0), atol=1e-3)  # affine: the mean is kept


def test_the_random_control_removes_as_many_orthogonal_directions():
    X, _ = gaussian_classes(500, seed=1)
    control = Eraser.random(10, 3, X.mean(0), seed=4)
    once = control.apply(X)
    np.testing.assert_allclose(control.apply(once), once, atol=1e-4)  # a projection
    centred = once - X.mean(0)
    assert np.linalg.matrix_rank(centred, tol=1e-3) == 7  # three directions gone
    np.testing.assert_allclose(control.left.T @ control.left, np.eye(3), atol=1e-5)
    assert Eraser.random(10, 3, X.mean(0), seed=4).left.equal(control.left)


def hooks(session) -> list[int]:
    """How many hooks each layer has (transformers keeps its own there)."""
    return [len(module._forward_hooks) + len(module._forward_pre_hooks) for module in session.layer_modules]


def shift_eraser(dim: int, seed: int = 0) -> Eraser:
    """A rank-2 random projection: any edit will do to check where the hook applies it."""
    return Eraser.random(dim, 2, torch.randn(dim, generator=torch.Generator().manual_seed(seed)), seed)


@pytest.mark.parametrize("layer", [0, 1, 3])
def test_the_erased_forward_equals_the_layers_run_by_hand_on_the_erased_state(tiny_session, layer):
    """Hidden state `layer` of the erased pass is the eraser applied to the plain one; the layers above read it."""
    session = tiny_session
    eraser = shift_eraser(session.hidden_size)
    plain = session.forward(TEXT)
    kept = hooks(session)
    with erasing(session, layer, eraser):
        erased = session.forward(TEXT)
    hidden = torch.as_tensor(plain.hidden_states)
    np.testing.assert_allclose(erased.hidden_states[:layer], plain.hidden_states[:layer], atol=1e-6)
    edited = eraser(hidden[layer][None])
    np.testing.assert_allclose(erased.hidden_states[layer], edited[0].numpy(), atol=1e-5)
    with torch.inference_mode(), session.lock:
        above = [session.run_layers(edited, layer, stop)[0].numpy() for stop in range(layer + 1, session.num_layers + 1)]
    for index, by_hand in enumerate(above, start=layer + 1):
        np.testing.assert_allclose(erased.hidden_states[index], by_hand, atol=1e-4)
    assert hooks(session) == kept  # ours removed


def test_erasure_composes_with_head_masks_and_its_hook_goes_when_the_pass_fails(tiny_session):
    session, eraser = tiny_session, shift_eraser(tiny_session.hidden_size, seed=1)
    masked = session.forward(TEXT, mask="0:1,1:*")
    kept = hooks(session)
    with erasing(session, 2, eraser):
        both = session.forward(TEXT, mask="0:1,1:*")
    np.testing.assert_allclose(both.hidden_states[2], eraser(torch.as_tensor(masked.hidden_states[2]))[...].numpy(), atol=1e-5)
    with pytest.raises(RuntimeError, match="boom"), erasing(session, 1, eraser):
        raise RuntimeError("boom")
    assert hooks(session) == kept
    with pytest.raises(InputError, match="out of range"), erasing(session, 9, eraser):
        pass


# The families of the BERT layout, built as conftest builds the tiny BERT: (model class, config class, config overrides).
BERT_LAYOUTS = {
    "bert": ("BertForMaskedLM", "BertConfig", {}),
    "roberta": ("RobertaForMaskedLM", "RobertaConfig", {"pad_token_id": 1, "max_position_embeddings": 66}),
    "xlm-roberta": ("XLMRobertaForMaskedLM", "XLMRobertaConfig", {"pad_token_id": 1, "max_position_embeddings": 66}),
    "electra": ("ElectraForMaskedLM", "ElectraConfig", {"embedding_size": 16}),  # embeddings projected up to the layers
}
CONVOLVED = "deberta-v2 with a convolution"  # DeBERTa-v2's convolution beside its first layer, reading the embeddings


def tiny_of(family: str, directory) -> str:
    if family in BERT_LAYOUTS:
        model_class, config_class, overrides = BERT_LAYOUTS[family]
        return str(save_tiny(directory, model_class, seed=3, config_class_name=config_class, **overrides))
    if family == CONVOLVED:
        return str(save_tiny_family(directory, "deberta-v2", "ForMaskedLM", seed=3, conv_kernel_size=3))
    return str(save_tiny_family(directory, family, "ForMaskedLM", seed=3))


@pytest.mark.parametrize("family", [*BERT_LAYOUTS, *FAMILIES, CONVOLVED])
def test_every_family_reports_and_reads_the_erased_state_at_every_layer(family, tmp_path):
    """At each hidden-state index, 0 included: the state the model reports there is the eraser applied to the plain
    one, those below are as they were, the layers above (run by hand on the erased state) give what the model gives,
    and the next state moves."""
    session = bertscope.load(tiny_of(family, tmp_path), device="cpu")
    eraser = shift_eraser(session.hidden_size, seed=2)
    plain = session.forward(TEXT)
    kept = hooks(session)
    for layer in range(session.num_layers + 1):
        with erasing(session, layer, eraser):
            erased = session.forward(TEXT)
        expected = eraser(torch.as_tensor(plain.hidden_states[layer])[None])
        with torch.inference_mode(), session.lock:  # the layers above, run by hand on the erased state
            top = session.run_layers(expected, layer, session.num_layers)[0] if layer < session.num_layers else expected[0]
        where = f"{family} layer {layer}"
        np.testing.assert_allclose(erased.hidden_states[layer], expected[0].numpy(), atol=1e-4, err_msg=where)
        np.testing.assert_allclose(erased.hidden_states[:layer], plain.hidden_states[:layer], atol=1e-5, err_msg=where)
        np.testing.assert_allclose(erased.hidden_states[-1], top.numpy(), atol=1e-4, err_msg=where)
        if layer < session.num_layers:
            assert np.abs(erased.hidden_states[layer + 1] - plain.hidden_states[layer + 1]).max() > 1e-3, where
    assert hooks(session) == kept


def treebank_splits():
    treebank = list(read_sentences(sample_corpus("conllu"), limit=40))
    return make_splits(treebank * 2, treebank[:8], treebank[8:])


def test_erasing_a_property_a_probe_reads_costs_more_than_the_random_control(tiny_session):
    """The measure here is a probe for the erased task two layers up: a reader built to use the property."""
    result = list(
        run_erasure(tiny_session, "upos", treebank_splits(), layer=1, measure="probe:upos", probe_layer=3, job=JobOptions(cache_dir=False))
    )[-1].result
    at = result.guardedness[0]
    assert at["layer"] == 1 and at["accuracy_before"] > result.majority + 0.2
    assert abs(at["accuracy_after"] - result.majority) <= 0.05  # guarded at the layer erased
    assert [row["layer"] for row in result.guardedness] == [1, 2, 3]
    assert result.guardedness[-1]["accuracy_after"] < result.guardedness[-1]["accuracy_before"] - 0.1  # read off the erased pass
    m = result.measure
    assert m["none"] - m["erased"] > m["none"] - m["control"] and m["none"] > m["erased"]
    assert result.rank == result.counts["classes"] - 1 and 0 < result.variance_share < 1


def test_erase_through_the_api_gives_the_issue_s_json(tiny_mlm_session, tmp_path):
    result = bertscope.erase(tiny_mlm_session, "upos", limit=120, layer=2, cache_dir=tmp_path)
    data = json.loads(json.dumps(result.as_json()))
    assert {"task", "layer", "rank", "variance_share", "majority", "guardedness", "measure"} <= set(data)
    assert data["measure"]["name"] == "mlm"  # the model has an MLM head
    assert {"name", "none", "erased", "control"} <= set(data["measure"])
    assert [set(row) for row in data["guardedness"]] == [{"layer", "accuracy_before", "accuracy_after"}] * 2
    assert result.table() == data["guardedness"] and "erased at layer 2" in repr(result)
    lines = {line.get_label(): line for line in result.figure().axes[0].get_lines()}
    np.testing.assert_allclose(lines["after erasure"].get_ydata()[2:], [row["accuracy_after"] for row in result.guardedness])
    preserve = bertscope.erase(tiny_mlm_session, "upos", limit=120, layer=2, cache_dir=tmp_path, measure="preserve")
    assert preserve.measure["none"] == pytest.approx(1.0) and preserve.measure["loss"]["none"] == pytest.approx(0.0, abs=1e-6)
    assert preserve.measure["erased"] < 1.0


def test_the_cli_prints_json_and_a_table(tiny_bert_dir, tmp_path):
    base = [
        "erase",
        "--task",
        "upos",
        "--layer",
        "1",
        "--limit",
        "100",
        "--measure",
        "preserve",
        "-m",
        str(tiny_bert_dir),
        "--cache-dir",
        str(tmp_path),
    ]
    result = CliRunner().invoke(main, [*base, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["layer"] == 1 and data["measure"]["name"] == "preserve" and data["model"]
    result = CliRunner().invoke(main, base, catch_exceptions=False)
    assert result.exit_code == 0 and "linear guardedness" in result.stdout and "random directions" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--task", "depth"], "structural probe"),
        (["--task", "upos", "--measure", "nonsense"], "unknown measure 'nonsense'"),
        (["--task", "upos", "--measure", "probe"], "unknown measure 'probe'"),
        (["--task", "upos", "--layer", "9"], "--layer 9 is out of range: hidden-state layers are 0 (embeddings) to 3"),
    ],
)
def test_the_cli_refuses_before_torch(tiny_bert_dir, args, message):
    from tests.helpers.cli import assert_refused_before_torch

    assert_refused_before_torch(["erase", *args, "-m", str(tiny_bert_dir)], message)


def test_an_eraser_fitted_alone_erases_a_forward_as_the_analysis_does(tiny_session):
    """What the explorer would hold: the eraser of `run_erasure`, applied to any forward pass under `erasing`."""
    from bertscope.analyses.erasure import fit_eraser

    splits = treebank_splits()
    eraser = list(fit_eraser(tiny_session, "upos", splits.train, layer=2, job=JobOptions(cache_dir=False)))[-1].result
    assert isinstance(eraser, Eraser) and eraser.kind == "leace" and eraser.rank > 0
    plain = tiny_session.forward(TEXT)
    with erasing(tiny_session, 2, eraser):
        erased = tiny_session.forward(TEXT, mask="0:1")
    masked = tiny_session.forward(TEXT, mask="0:1")
    np.testing.assert_allclose(erased.hidden_states[2], eraser(torch.as_tensor(masked.hidden_states[2])).numpy(), atol=1e-5)
    assert not np.allclose(erased.attentions[2], plain.attentions[2])  # the layers above attend differently


def test_other_threads_forward_passes_are_not_erased(tiny_session):
    """A job erasing in its worker thread leaves the explorer's passes in other threads as they are."""
    import threading

    eraser = shift_eraser(tiny_session.hidden_size, seed=3)
    plain = tiny_session.forward(TEXT)
    seen = {}
    with erasing(tiny_session, 1, eraser):
        other = threading.Thread(target=lambda: seen.setdefault("other", tiny_session.forward(TEXT)))
        other.start()
        other.join()
        here = tiny_session.forward(TEXT)
    np.testing.assert_allclose(seen["other"].hidden_states, plain.hidden_states, atol=1e-6)
    assert not np.allclose(here.hidden_states[-1], plain.hidden_states[-1], atol=1e-4)


@pytest.mark.parametrize("family", [*BERT_LAYOUTS, *FAMILIES])
def test_the_explorers_corpus_views_run_with_a_live_erasure_on_every_family(family, tmp_path):
    """The overview's patterns, the syntax heads and geometry take the explorer's erasure (`E`) through the backend:
    what reads the hidden states below the erased one is as it was, the layer that reads it is not, and the hook goes
    with the stream (the run after it is the model as it is again)."""
    from bertscope.analyses.erasure_results import LiveErasure
    from bertscope.session_backend import SessionBackend

    session = bertscope.load(tiny_of(family, tmp_path), device="cpu")
    backend = SessionBackend(session)
    backend._erasers["upos", 1] = shift_eraser(session.hidden_size, seed=2)  # as `fit_erasure` keeps a fitted one
    erasure = LiveErasure(task="upos", layer=1, rank=2, sentences=0)
    sentences = list(bertscope.treebank(limit=12).sentences)

    def last(steps):
        return list(steps)[-1].result

    plain, erased = last(backend.steps(bertscope.patterns, None, sentences)), last(backend.steps(bertscope.patterns, erasure, sentences))
    np.testing.assert_allclose(erased.statistics["entropy"][0], plain.statistics["entropy"][0], atol=1e-6, err_msg=family)
    # random tiny maps are near uniform: layer 1's entropy moves by 1e-5, tens of float32 steps, where the same run moves none
    assert np.abs(erased.statistics["entropy"][1] - plain.statistics["entropy"][1]).max() > 1e-6, family
    np.testing.assert_array_equal(
        last(backend.steps(bertscope.patterns, None, sentences)).statistics["entropy"], plain.statistics["entropy"]
    )
    syntax_plain, syntax_erased = (
        last(backend.steps(bertscope.syntax, None, sentences)),
        last(backend.steps(bertscope.syntax, erasure, sentences)),
    )
    np.testing.assert_array_equal(syntax_erased.correct[:, :, 0], syntax_plain.correct[:, :, 0])
    geometry_plain = last(backend.steps(bertscope.geometry, None, sentences, max_rows=60))
    geometry_erased = last(backend.steps(bertscope.geometry, erasure, sentences, max_rows=60))
    np.testing.assert_allclose(geometry_erased.projection[0], geometry_plain.projection[0], atol=1e-5, err_msg=family)
    assert not np.allclose(geometry_erased.projection[1], geometry_plain.projection[1]), family
