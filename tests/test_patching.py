"""Activation patching (analyses.patching) on tiny random encoders: checks whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope.analyses.patching import _activations, _Group, _patched_hidden, patch
from bertscope.analyses.patching_results import PatchMetric
from bertscope.base.errors import InputError

CLEAN = "the keys to the cabinet are here"
CORRUPT = "the key to the cabinet is here"


def run(session, clean=CLEAN, corrupt=CORRUPT, metric="preserve", answers=None, classes=None, **options):
    return list(patch(session, clean, corrupt, metric=PatchMetric(metric, answers, classes), **options))[-1].result


@pytest.fixture(scope="module")
def preserved(tiny_session):
    return run(tiny_session, metric="preserve", per_position=True)


def test_the_inputs_differ_where_they_should(tiny_session, preserved):
    clean, corrupt = tiny_session.encode(CLEAN), tiny_session.encode(CORRUPT)
    assert preserved.tokens == clean.tokens and preserved.corrupt_tokens == corrupt.tokens
    assert preserved.differing == tuple(int(i) for i in np.flatnonzero(clean.input_ids != corrupt.input_ids))
    assert preserved.clean_metric == 0.0 and preserved.corrupt_metric < 0  # the clean run preserves itself best


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_the_whole_residual_stream_carries_everything_and_nothing_carries_nothing(tiny_session, direction):
    clean_run = _activations(tiny_session, tiny_session.encode(CLEAN))
    corrupt_run = _activations(tiny_session, tiny_session.encode(CORRUPT))
    base, source = (corrupt_run, clean_run) if direction == "denoise" else (clean_run, corrupt_run)
    last = tiny_session.num_layers
    length = clean_run.hidden.shape[1]
    for layer in (0, last):  # the embedding output, and the last layer's output
        every = _Group(layer, 1, store=None, residual=torch.ones((1, length), dtype=torch.bool))
        nothing = _Group(layer, 1, store=None, residual=torch.zeros((1, length), dtype=torch.bool))
        patched = _patched_hidden(tiny_session, base, source, every, slice(0, 1), last)
        unchanged = _patched_hidden(tiny_session, base, source, nothing, slice(0, 1), last)
        torch.testing.assert_close(patched[0], source.hidden[last], atol=1e-5, rtol=0)  # effect 1
        torch.testing.assert_close(unchanged[0], base.hidden[last], atol=1e-5, rtol=0)  # effect 0


def test_the_last_layer_positions_share_out_the_preserve_metric(preserved):
    """m is a sum over tokens, so patching each final position restores its own share: the shares sum to 1."""
    assert preserved.positions[-1].sum() == pytest.approx(1.0, abs=1e-5)
    assert (preserved.positions[-1] >= -1e-6).all()


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_an_embedding_that_differs_carries_the_whole_difference(tiny_session, direction):
    """One differing word piece: swapping its embedding turns one input into the other (effect 1); the others change nothing."""
    clean, corrupt = "the keys are here", "the key are here"  # keys -> key: one token
    result = run(tiny_session, clean, corrupt, metric="preserve", sweeps=("positions",), direction=direction)
    (position,) = result.differing
    assert result.positions[0, position] == pytest.approx(1.0, abs=1e-5)
    others = np.delete(result.positions[0], position)
    np.testing.assert_allclose(others, 0.0, atol=1e-6)


def test_a_patched_head_equals_a_hand_written_run(tiny_session, preserved):
    """Replace one head's context slice in a whole forward pass of the corrupted input, by hand; compare effects."""
    layer, head = 1, 2
    model = tiny_session.model.base_model
    projection = model.encoder.layer[layer].attention.output.dense
    width = projection.in_features // tiny_session.num_heads
    inputs = {
        name: torch.as_tensor(getattr(tiny_session.encode(text), name))[None]
        for text in (CLEAN,)
        for name in ("input_ids", "token_type_ids")
    }
    corrupt_inputs = {name: torch.as_tensor(getattr(tiny_session.encode(CORRUPT), name))[None] for name in ("input_ids", "token_type_ids")}
    seen = {}
    handle = projection.register_forward_pre_hook(lambda module, args: seen.setdefault("clean", args[0].clone()))
    with torch.inference_mode():
        clean_final = model(**inputs).last_hidden_state
    handle.remove()

    def swap(module, args):
        context = args[0].clone()
        context[..., head * width : (head + 1) * width] = seen["clean"][..., head * width : (head + 1) * width]
        return (context,)

    handle = projection.register_forward_pre_hook(swap)
    with torch.inference_mode():
        patched_final = model(**corrupt_inputs).last_hidden_state
    handle.remove()
    with torch.inference_mode():
        corrupt_final = model(**corrupt_inputs).last_hidden_state
    m_patched = -float(((patched_final - clean_final) ** 2).sum())
    m_corrupt = -float(((corrupt_final - clean_final) ** 2).sum())
    assert preserved.corrupt_metric == pytest.approx(m_corrupt, rel=1e-4)
    assert preserved.heads[layer, head] == pytest.approx((m_patched - m_corrupt) / (0.0 - m_corrupt), abs=1e-4)
    # a head patched at every position is the head patched everywhere, not the sum of its positions
    assert preserved.head_positions.shape == (tiny_session.num_layers, tiny_session.num_heads, len(preserved.tokens))


def test_layer_sweep_reports_both_components(preserved):
    assert preserved.layers.shape[1] == 2
    payload = preserved.as_json()
    assert {entry["component"] for entry in payload["layers"]} == {"attention", "feed_forward"}
    assert {"metric", "direction", "tokens", "clean_metric", "corrupt_metric", "heads", "layers", "positions"} <= set(payload)
    assert payload["positions"][0] == {"layer": 0, "position": 0, "token": "[CLS]", "effect": payload["positions"][0]["effect"]}


def test_mlm_metric_compares_two_answers(tiny_mlm_session):
    result = run(
        tiny_mlm_session,
        "the keys to the cabinet [MASK] here",
        "the key to the cabinet [MASK] here",
        metric="mlm",
        answers=("is", "are"),
        sweeps=("layers",),
    )
    assert result.metric_description.startswith("logit(is) - logit(are) at the [MASK]")
    assert np.isfinite(result.layers).all()


def test_inputs_of_different_lengths_are_refused_with_the_tokens(tiny_session):
    with pytest.raises(InputError, match="have 6 and 7 tokens.*position 4: clean .here \\[SEP\\]. vs corrupted .right here") as refused:
        run(tiny_session, "the cat sat here", "the cat sat right here")
    assert refused.value.setting == "corrupt"


def test_inputs_that_score_the_same_are_refused(tiny_session, tiny_mlm_session):
    with pytest.raises(InputError, match="same tokens"):
        run(tiny_session, CLEAN, CLEAN)
    with pytest.raises(InputError, match="not a sequence classifier"):
        run(tiny_session, metric="class")
    with pytest.raises(InputError, match="not one token"):
        run(tiny_mlm_session, "the cat [MASK] here", "the dog [MASK] here", metric="mlm", answers=("is", "zzqxv"))


def test_class_metric_compares_two_classes_of_a_classifier(tmp_path):
    from bertscope.model.session import Session
    from tests.helpers.models import save_tiny

    directory = save_tiny(
        tmp_path / "classifier",
        "BertForSequenceClassification",
        seed=3,
        num_labels=3,
        id2label={0: "negative", 1: "neutral", 2: "positive"},
        label2id={"negative": 0, "neutral": 1, "positive": 2},
    )
    session = Session.open(str(directory), device="cpu")
    result = run(session, metric="class", classes=("positive", "negative"), sweeps=("positions",))
    assert result.metric_description == "logit(positive) - logit(negative) of the classifier"
    with torch.inference_mode():
        logits = [session.model(**session.tokenizer(text, return_tensors="pt")).logits[0] for text in (CLEAN, CORRUPT)]
    expected = [float(values[2] - values[0]) for values in logits]  # the classifier's own forward, not the patching code
    assert result.clean_metric == pytest.approx(expected[0], abs=1e-4)
    assert result.corrupt_metric == pytest.approx(expected[1], abs=1e-4)
    # BERT's classifier reads [CLS] of the last layer; a random tiny classifier's two logits differ by little, so float
    # rounding in batches of another size is a larger share of the difference than on a trained model
    tolerance = 1e-5 / abs(result.clean_metric - result.corrupt_metric)
    assert result.positions[-1, 0] == pytest.approx(1.0, abs=tolerance)
    np.testing.assert_allclose(result.positions[-1, 1:], 0.0, atol=tolerance)
