"""Value-weighted attention norms (Kobayashi et al. 2020) against a computation written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

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
