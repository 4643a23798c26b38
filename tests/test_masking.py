"""Head masking against an explicit reference forward, hooks, gradients and batching."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope.model import ablation as ablation_module

SENTENCES = ["The keys to the cabinet are on the table.", "A dog barked."]


def reference_hidden_states(model, inputs, gates: torch.Tensor, mode: str) -> list[torch.Tensor]:
    """BERT written out by hand, masking heads the way transformers 4.x and Kovaleva et al. did.

    zero: attention probabilities multiplied by `head_mask` (transformers 4.x `head_mask`).
    uniform: a masked head's probabilities replaced by 1/n over the n real tokens.
    """
    base = model.base_model
    config = model.config
    heads, width = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    real = inputs["attention_mask"].bool()  # [B, T]
    hidden = base.embeddings(input_ids=inputs["input_ids"], token_type_ids=inputs["token_type_ids"])
    states = [hidden]
    batch, length, _ = hidden.shape
    for index, layer in enumerate(base.encoder.layer):
        attention = layer.attention.self

        def split(x):
            return x.view(batch, length, heads, width).transpose(1, 2)

        query, key, value = split(attention.query(hidden)), split(attention.key(hidden)), split(attention.value(hidden))
        scores = query @ key.transpose(-1, -2) / width**0.5
        scores = scores.masked_fill(~real[:, None, None, :], torch.finfo(scores.dtype).min)
        probs = scores.softmax(-1)
        gate = gates[index].view(1, heads, 1, 1)
        if mode == "zero":
            probs = probs * gate
        else:
            uniform = (real.float() / real.float().sum(-1, keepdim=True))[:, None, None, :].expand_as(probs)
            probs = gate * probs + (1 - gate) * uniform
        context = (probs @ value).transpose(1, 2).reshape(batch, length, heads * width)
        attended = layer.attention.output.LayerNorm(layer.attention.output.dense(context) + hidden)
        hidden = layer.output(layer.intermediate(attended), attended)
        states.append(hidden)
    return states


@pytest.mark.parametrize("mode", ["zero", "uniform"])
@pytest.mark.parametrize("spec", ["0:1", "0:0,1:*,2:3", "2:*"])
def test_masking_equals_reference(tiny_session, mode, spec):
    session = tiny_session
    inputs = session.tokenize_batch(SENTENCES)  # padded: the shorter sentence has padding
    gates = torch.as_tensor(session.mask(spec).gates())
    with torch.inference_mode():
        expected = reference_hidden_states(session.model, inputs, gates, mode)
        for attentions in (False, True):  # SDPA path and eager path
            outputs = session.run(inputs, gates=gates, ablation=mode, attentions=attentions)
            real = inputs["attention_mask"].bool()
            for got, want in zip(outputs.hidden_states, expected, strict=True):
                torch.testing.assert_close(got[real], want[real], atol=2e-5, rtol=1e-4)


def test_masking_changes_the_output_and_no_mask_does_not(tiny_session):
    plain = tiny_session.forward(SENTENCES[0])
    same = tiny_session.forward(SENTENCES[0], mask="")
    masked = tiny_session.forward(SENTENCES[0], mask="0:*")
    np.testing.assert_array_equal(plain.hidden_states, same.hidden_states)
    assert np.abs(masked.hidden_states[1] - plain.hidden_states[1]).max() > 1e-2
    np.testing.assert_array_equal(masked.hidden_states[0], plain.hidden_states[0])  # embeddings untouched


def test_reported_attention_of_masked_heads(tiny_session):
    zero = tiny_session.forward(SENTENCES[0], attentions=True, mask="1:2", ablation="zero")
    assert np.all(zero.attentions[1, 2] == 0)
    np.testing.assert_allclose(zero.attentions[1, 1].sum(-1), 1, atol=1e-5)
    uniform = tiny_session.forward(SENTENCES[0], attentions=True, mask="1:2", ablation="uniform")
    tokens = len(uniform.tokens)
    np.testing.assert_allclose(uniform.attentions[1, 2], np.full((tokens, tokens), 1 / tokens), atol=1e-6)


def test_uniform_ignores_padding(tiny_session):
    inputs = tiny_session.tokenize_batch(SENTENCES)
    gates = torch.as_tensor(tiny_session.mask("0:0").gates())
    with torch.inference_mode():
        outputs = tiny_session.run(inputs, gates=gates, ablation="uniform", attentions=True)
    short = 1
    real = inputs["attention_mask"][short].bool()
    weights = outputs.attentions[0][short, 0]  # [T, T]
    assert torch.all(weights[:, ~real] == 0)
    torch.testing.assert_close(weights[real][:, real], torch.full_like(weights[real][:, real], 1 / real.sum().item()))


def test_batched_gates_equal_one_mask_at_a_time(tiny_session):
    """A [B, L, H] gate tensor runs several masks in one batch (used for ablation sweeps)."""
    session = tiny_session
    specs = ["", "0:1", "1:*", "2:0,2:3"]
    inputs = session.tokenize_batch([SENTENCES[0]] * len(specs))
    batched = torch.stack([torch.as_tensor(session.mask(spec).gates()) for spec in specs])
    for mode in ("zero", "uniform"):
        with torch.inference_mode():
            together = session.run(inputs, gates=batched, ablation=mode).hidden_states[-1]
        for row, spec in enumerate(specs):
            alone = session.forward(SENTENCES[0], mask=spec, ablation=mode).hidden_states[-1]
            np.testing.assert_allclose(together[row].numpy(), alone, atol=2e-5)


@pytest.mark.parametrize("mode", ["zero", "uniform"])
def test_float_gates_carry_gradients(tiny_session, mode):
    """Michel et al.'s importance is dL/d(gate) at gate = 1: it must be finite and non-zero."""
    session = tiny_session
    inputs = session.tokenize_batch(SENTENCES)
    gates = torch.ones(session.num_layers, session.num_heads, requires_grad=True)
    outputs = session.run(inputs, gates=gates, ablation=mode)
    outputs.hidden_states[-1].pow(2).sum().backward()
    assert gates.grad is not None and torch.isfinite(gates.grad).all()
    assert (gates.grad.abs() > 0).all()


def test_gate_gradient_matches_finite_difference(tiny_session):
    session = tiny_session
    inputs = session.tokenize_batch(SENTENCES[:1])
    session.model.double()
    try:
        gates = torch.ones(session.num_layers, session.num_heads, dtype=torch.float64, requires_grad=True)
        session.run(inputs, gates=gates).hidden_states[-1].sum().backward()
        step = 1e-6
        with torch.inference_mode():
            shifted = torch.ones_like(gates.detach())
            shifted[1, 2] -= step
            low = session.run(inputs, gates=shifted).hidden_states[-1].sum()
            high = session.run(inputs, gates=torch.ones_like(shifted)).hidden_states[-1].sum()
        assert gates.grad[1, 2].item() == pytest.approx(((high - low) / step).item(), rel=1e-4, abs=1e-6)
    finally:
        session.model.float()


def hook_count(session) -> int:
    return sum(len(site.projection._forward_pre_hooks) for site in session._layers)


def test_hooks_removed_after_a_forward(tiny_session):
    tiny_session.forward(SENTENCES[0], mask="0:1")
    assert hook_count(tiny_session) == 0
    assert ablation_module._current_pass.get() is None


def test_hooks_removed_when_the_forward_raises(tiny_session):
    session = tiny_session
    broken = {"input_ids": torch.tensor([[101, 999_999, 102]]), "token_type_ids": torch.zeros(1, 3, dtype=torch.long)}
    gates = torch.as_tensor(session.mask("0:1,1:*").gates())
    for mode in ("zero", "uniform"):
        with pytest.raises(IndexError), torch.inference_mode():
            session.run(broken, gates=gates, ablation=mode)
        assert hook_count(session) == 0
        assert ablation_module._current_pass.get() is None
    # and the model still works normally afterwards
    assert np.isfinite(session.forward(SENTENCES[0]).hidden_states).all()


def test_hooks_removed_when_a_layer_raises_midway(tiny_session):
    session = tiny_session
    layer = session.model.base_model.encoder.layer[1]

    def explode(*_):
        raise RuntimeError("boom")

    handle = layer.register_forward_pre_hook(explode)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            session.forward(SENTENCES[0], mask="0:0,2:1")
    finally:
        handle.remove()
    assert hook_count(session) == 0
    assert not session.lock._is_owned()


def test_wrong_gate_shape_is_refused(tiny_session):
    with pytest.raises(ValueError, match=r"\[L, H\]"):
        tiny_session.run(tiny_session.tokenize_batch(["a"]), gates=torch.ones(2, 2))
    assert hook_count(tiny_session) == 0


def test_attention_rows_sum_to_one_with_and_without_padding(tiny_session):
    inputs = tiny_session.tokenize_batch(SENTENCES)
    with torch.inference_mode():
        outputs = tiny_session.run(inputs, attentions=True)
    weights = torch.stack(outputs.attentions)  # [L, B, H, T, T]
    real = inputs["attention_mask"].bool()
    sums = weights.sum(-1)  # [L, B, H, T]
    torch.testing.assert_close(sums.permute(1, 3, 0, 2)[real], torch.ones_like(sums.permute(1, 3, 0, 2)[real]))


def test_weights_path_and_sdpa_path_agree(tiny_session):
    plain = tiny_session.forward(SENTENCES[0], attentions=False)
    eager = tiny_session.forward(SENTENCES[0], attentions=True)
    np.testing.assert_allclose(plain.hidden_states, eager.hidden_states, atol=1e-5)


def test_mask_predictions_equal_a_direct_softmax(tiny_mlm_session):
    session = tiny_mlm_session
    result = session.forward("The capital of France is [MASK].")
    (prediction,) = session.mask_predictions(result, top=3)
    assert result.tokens[prediction.position] == "[MASK]"
    logits = torch.as_tensor(result.mlm_logits[prediction.position], dtype=torch.float64)
    probabilities, ids = logits.softmax(-1).topk(3)
    assert prediction.tokens == tuple(session.tokenizer.convert_ids_to_tokens(ids.tolist()))
    np.testing.assert_allclose(prediction.probabilities, probabilities.numpy(), rtol=1e-6)


def test_no_predictions_without_mlm_head(tiny_session):
    assert tiny_session.mask_predictions(tiny_session.forward("The capital is [MASK].")) == []


@pytest.mark.parametrize("mode", ["zero", "uniform"])
@pytest.mark.parametrize("spec", ["1:2", "2:*", "1:0,2:3"])
def test_reusing_the_unmasked_layers_gives_the_same_result(tiny_mlm_session, mode, spec):
    session = tiny_mlm_session
    encoding = session.encode("The keys to the cabinet are on the table.")
    plain = session.forward(encoding, attentions=True)
    full = session.forward(encoding, attentions=True, mask=spec, ablation=mode)
    reused = session.forward(encoding, attentions=True, mask=spec, ablation=mode, reuse=plain)
    np.testing.assert_allclose(reused.hidden_states, full.hidden_states, atol=1e-5)
    np.testing.assert_allclose(reused.attentions, full.attentions, atol=1e-6)
    np.testing.assert_allclose(reused.mlm_logits, full.mlm_logits, atol=1e-4)
    assert reused.mask == full.mask and reused.ablation == mode
    assert hook_count(session) == 0


def test_reuse_is_ignored_when_it_does_not_fit(tiny_session):
    plain = tiny_session.forward("one sentence here", attentions=True)
    other = tiny_session.forward("another sentence", attentions=True, mask="2:1", reuse=plain)
    assert other.tokens[1] == "another"
    full = tiny_session.forward("another sentence", attentions=True, mask="2:1")
    np.testing.assert_allclose(other.hidden_states, full.hidden_states, atol=1e-6)
