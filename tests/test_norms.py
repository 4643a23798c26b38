"""Value-weighted attention norms (Kobayashi et al. 2020) against a computation written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope.analyses.conditions import Conditions, JobOptions

SENTENCE = "The keys to the cabinet are on the table."
SENTENCES = [SENTENCE, "A dog barked, twice."]


def hand_norms(model, hidden_states: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """`[L, H, T, T]`: ‖α_ij (x_j W_V^h + b_V^h) W_O^h‖, projecting every value to the hidden size explicitly."""
    config = model.config
    heads, width = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    out = []
    for index, layer in enumerate(model.base_model.encoder.layer):
        x = torch.as_tensor(hidden_states[index], dtype=torch.float64)  # the layer's input [T, D]
        value_layer = layer.attention.self.value
        values = x @ value_layer.weight.double().T + value_layer.bias.double()  # [T, H * d]
        output_weight = layer.attention.output.dense.weight.double()  # [D, H * d]
        per_head = []
        for head in range(heads):
            columns = slice(head * width, (head + 1) * width)
            f = values[:, columns] @ output_weight[:, columns].T  # [T, D]: f_h(x_j), no bias of W_O
            alpha = torch.as_tensor(weights[index, head], dtype=torch.float64)  # [T, T]
            per_head.append(torch.linalg.vector_norm(alpha[:, :, None] * f[None, :, :], dim=-1))
        out.append(torch.stack(per_head))
    return torch.stack(out).detach().numpy()


def test_norms_equal_a_hand_written_computation(tiny_session):
    result = tiny_session.forward(SENTENCE, norms=True)
    assert result.norms.shape == result.attentions.shape
    expected = hand_norms(tiny_session.model, result.hidden_states, result.attentions)
    np.testing.assert_allclose(result.norms, expected, rtol=1e-4, atol=1e-6)
    assert result.norms.min() >= 0 and result.norms.max() > 0


def test_norms_come_with_the_weights_and_do_not_change_them(tiny_session):
    plain = tiny_session.forward(SENTENCE)
    with_norms = tiny_session.forward(SENTENCE, attentions=False, norms=True)  # norms imply weights
    assert plain.norms is None
    np.testing.assert_array_equal(with_norms.attentions, plain.attentions)
    np.testing.assert_array_equal(with_norms.hidden_states, plain.hidden_states)


def test_a_zero_masked_head_has_zero_norms(tiny_session):
    result = tiny_session.forward(SENTENCE, mask="1:2,2:*", norms=True)
    assert not result.norms[1, 2].any()
    assert not result.norms[2].any()
    assert result.norms[1, 1].max() > 0 and result.norms[0].max() > 0
    expected = hand_norms(tiny_session.model, result.hidden_states, result.attentions)
    np.testing.assert_allclose(result.norms, expected, rtol=1e-4, atol=1e-6)


def test_a_uniform_head_moves_its_values_uniformly(tiny_session):
    result = tiny_session.forward(SENTENCE, mask="1:2", ablation="uniform", norms=True)
    rows = result.norms[1, 2]
    np.testing.assert_allclose(rows, np.broadcast_to(rows[0], rows.shape), rtol=1e-6)  # every query: 1/n ‖f(x_j)‖
    expected = hand_norms(tiny_session.model, result.hidden_states, result.attentions)
    np.testing.assert_allclose(result.norms, expected, rtol=1e-4, atol=1e-6)


def test_batched_norms_with_padding_equal_one_sentence_at_a_time(tiny_session):
    inputs = tiny_session.tokenize_batch(SENTENCES)
    seen: dict[int, torch.Tensor] = {}
    with torch.inference_mode():
        tiny_session.run(inputs, attentions=True, hidden_states=False, on_norms=seen.__setitem__)
    assert sorted(seen) == list(range(tiny_session.num_layers))
    for row, sentence in enumerate(SENTENCES):
        single = tiny_session.forward(sentence, norms=True)
        length = len(single.tokens)
        batched = np.stack([seen[layer][row, :, :length, :length].numpy() for layer in sorted(seen)])
        np.testing.assert_allclose(batched, single.norms, rtol=1e-4, atol=1e-6)
        assert not seen[0][row, :, :length, length:].any()  # nothing moves from padding


@pytest.mark.parametrize("spec", ["2:1", "1:*"])
def test_reusing_lower_layers_gives_the_same_norms(tiny_session, spec):
    plain = tiny_session.forward(SENTENCE, norms=True)
    reused = tiny_session.forward(plain.encoding, mask=spec, norms=True, reuse=plain)
    fresh = tiny_session.forward(SENTENCE, mask=spec, norms=True)
    np.testing.assert_allclose(reused.norms, fresh.norms, rtol=1e-5, atol=1e-6)
    without = tiny_session.forward(SENTENCE)  # a result without norms cannot be reused for them
    again = tiny_session.forward(without.encoding, mask=spec, norms=True, reuse=without)
    np.testing.assert_allclose(again.norms, fresh.norms, rtol=1e-5, atol=1e-6)


# --- over a corpus: shares of norm beside shares of weight ------------------------------------


class Text:
    def __init__(self, text, pair=None):
        self.text, self.pair = text, pair


CORPUS = ["The keys to the cabinet are on the table.", "A dog barked, loudly!", "Is it (really) over?", "Yes."]


def corpus_result(session, texts, **options):
    from bertscope.analyses.attention.patterns import pattern_statistics

    return list(pattern_statistics(session, [Text(t) for t in texts], **options))[-1].result


def test_norm_shares_equal_the_per_sentence_shares_of_the_norm_rows(tiny_session):
    """Each share of norm is the share of weight computed on the norm map with its rows scaled to sum to one."""
    from bertscope.analyses.attention.headstats import head_figures
    from bertscope.analyses.attention.patterns_results import NORM_SHARES

    result = corpus_result(tiny_session, CORPUS, job=JobOptions(batch_size=3), norms=True)
    expected = {name: 0.0 for name in NORM_SHARES}
    for text in CORPUS:
        single = tiny_session.forward(text, norms=True)
        rows = single.norms / single.norms.sum(-1, keepdims=True)
        figures = head_figures(rows, single.tokens, single.encoding.special)
        for name in NORM_SHARES:
            expected[name] = expected[name] + figures[name] / len(CORPUS)
    for name in NORM_SHARES:
        np.testing.assert_allclose(result.statistics[f"norm_{name}"], expected[name], atol=1e-5, err_msg=name)


def test_norms_leave_the_weight_statistics_as_they_were(tiny_session):
    from bertscope.analyses.attention.patterns_results import STATISTICS

    plain = corpus_result(tiny_session, CORPUS)
    with_norms = corpus_result(tiny_session, CORPUS, norms=True)
    assert not plain.has_norms and with_norms.has_norms
    for name in STATISTICS:
        np.testing.assert_allclose(with_norms.statistics[name], plain.statistics[name], atol=1e-6)
    np.testing.assert_array_equal(with_norms.pattern_shares, plain.pattern_shares)


def test_norm_shares_are_shares_and_vanish_for_a_zeroed_head(tiny_session):
    result = corpus_result(tiny_session, CORPUS, norms=True, conditions=Conditions(tiny_session.mask("1:2")))
    norm = {name: result.statistics[f"norm_{name}"] for name in ("cls", "sep", "punct", "self", "prev", "next")}
    for values in norm.values():
        assert np.all(values >= 0) and np.all(values <= 1 + 1e-6)
    assert np.all(norm["cls"] + norm["sep"] + norm["punct"] <= 1 + 1e-5)  # disjoint sets of keys
    assert all(values[1, 2] == 0 for values in norm.values())  # a head switched off moves nothing
    assert norm["cls"][1, 1] > 0


def test_equal_value_norms_give_the_weight_shares(tiny_session):
    """Where every value has the same norm, a share of norm is the share of weight."""
    from bertscope.analyses.attention.headstats import PunctuationIds
    from bertscope.analyses.attention.patterns import batch_tensors, encode_sorted, norm_shares, shares

    encoded = encode_sorted(tiny_session, [Text(t) for t in CORPUS])
    inputs, masks = batch_tensors(tiny_session, encoded, PunctuationIds(tiny_session.tokenizer))
    with torch.inference_mode():
        weights = tiny_session.run(inputs, attentions=True, hidden_states=False).attentions[0]
    by_weight, by_norm = shares(weights, masks), norm_shares(weights * 3.5, masks)
    for name, value in by_weight.items():
        torch.testing.assert_close(by_norm[name], value, atol=1e-6, rtol=1e-5)


def test_norm_shares_do_not_depend_on_the_batching(tiny_session):
    texts = [" ".join(["word"] * (3 + i % 9)) + ", end." for i in range(24)]
    one = corpus_result(tiny_session, texts, job=JobOptions(batch_size=1), chunk_size=5, norms=True)
    many = corpus_result(tiny_session, texts, job=JobOptions(batch_size=16), chunk_size=24, norms=True)
    for name, values in one.statistics.items():
        np.testing.assert_allclose(values, many.statistics[name], atol=1e-5, err_msg=name)


def test_a_pruned_model_gives_the_masked_models_norms(tiny_mlm_session, tmp_path):
    """Heads sliced out of the weights: the kept heads' norms in their original numbers, the pruned ones zero."""
    from bertscope.analyses.importance.pruned_export import write_pruned_model
    from bertscope.model.session import Session

    remove = [(0, 1), (0, 3), (2, 0), (2, 1), (2, 2), (2, 3)]
    write_pruned_model(tiny_mlm_session, remove, tmp_path / "model", timing_texts=CORPUS, extra={})
    pruned = Session.open(str(tmp_path / "model"), device="cpu")
    small = pruned.forward(SENTENCE, norms=True)
    masked = tiny_mlm_session.forward(SENTENCE, mask="0:1,0:3,2:*", norms=True)
    np.testing.assert_allclose(small.norms, masked.norms, rtol=1e-4, atol=1e-5)
    assert not small.norms[2].any() and not small.norms[0, 1].any() and small.norms[0, 0].max() > 0


def test_the_public_api_gives_norms_as_numpy(tiny_session):
    import bertscope

    out = tiny_session.forward(SENTENCE, norms=True)  # `bertscope.load()` returns this session type
    assert isinstance(out.norms, np.ndarray) and out.norms.dtype == np.float32
    stats = bertscope.patterns(tiny_session, CORPUS, norms=True)
    assert stats.has_norms and isinstance(stats.statistics["norm_sep"], np.ndarray)
    assert stats.statistics["norm_sep"].shape == (tiny_session.num_layers, tiny_session.num_heads)
    assert not bertscope.patterns(tiny_session, CORPUS).has_norms
