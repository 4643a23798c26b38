"""Every encoder family opens, and bertscope reads it exactly (issue 30).

The references are written here, on the plain transformers model loaded with eager attention, with hooks of
this file's own (module paths spelled out below, not taken from bertscope's adapters): head masking by zeroing
the head's slice of the input of its output projection, uniform attention by replacing that slice with the mean
of the values the head may see, value-weighted norms from the eager weights and the values by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

import bertscope
from bertscope.base.errors import ModelLoadError
from tests.family_models import FAMILIES, save_tiny_family

TEXT = "The keys to the cabinet are on the table."
BATCH = ("The keys to the cabinet are on the table.", "The cat sat.")  # padded: uniform must skip the padding


def _layers(model, family):
    base = model.base_model
    if family == "distilbert":
        return list(base.transformer.layer)
    if family == "albert":  # the shared layer, once: its hooks fire at every application
        return [base.encoder.albert_layer_groups[0].albert_layers[0]]
    if family == "modernbert":
        return list(base.layers)
    return list(base.encoder.layer)


# per family: (output projection of the heads, its values [B, T, H·d]) of a layer, as the modeling files name them
PATHS = {
    "distilbert": lambda layer: (layer.attention.out_lin, layer.attention.v_lin, None),
    "albert": lambda layer: (layer.attention.dense, layer.attention.value, None),
    "deberta-v2": lambda layer: (layer.attention.output.dense, layer.attention.self.value_proj, None),
    "modernbert": lambda layer: (layer.attn.Wo, layer.attn.Wqkv, slice(2, 3)),  # Wqkv: [q | k | v]
    "mpnet": lambda layer: (layer.attention.attn.o, layer.attention.attn.v, None),
}


class Reference:
    """The plain transformers model (eager) with hooks that mask or read heads, layer by layer application."""

    def __init__(self, directory, family):
        config = transformers.AutoConfig.from_pretrained(directory)
        model_class = getattr(transformers, config.architectures[0])
        self.model = model_class.from_pretrained(directory, attn_implementation="eager").eval()
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        self.family, self.config = family, config
        self.heads = config.num_attention_heads

    def window(self, layer):
        if self.family == "modernbert" and self.config.layer_types[layer] == "sliding_attention":
            return self.config.local_attention // 2
        return None

    def run(self, texts, masked=(), ablation="zero"):
        """Outputs of `texts` with heads `masked` ([(layer, head)]) switched off, and each layer's values."""
        batch = self.tokenizer(list(texts), padding=True, return_tensors="pt")
        if self.family in ("distilbert", "modernbert", "mpnet"):
            batch.pop("token_type_ids", None)
        real = batch["attention_mask"].bool()
        calls = {"values": 0, "output": 0}
        values = {}
        handles = []
        for layer in _layers(self.model, self.family):
            projection, value_projection, part = PATHS[self.family](layer)

            def keep_values(module, args, output, part=part):
                if part is not None:  # the fused projection: the value third
                    output = output.chunk(3, dim=-1)[2]
                values[calls["values"]] = output
                calls["values"] += 1

            def mask_heads(module, args):
                index = calls["output"]
                calls["output"] += 1
                context = args[0].clone()
                size = context.shape[-1] // self.heads
                for layer_index, head in masked:
                    if layer_index != index:
                        continue
                    span = slice(head * size, (head + 1) * size)
                    if ablation == "zero":
                        context[..., span] = 0
                    else:  # the mean of the values the head may see, for every query
                        allowed = real[:, None, :].expand(-1, context.shape[1], -1).clone()  # [B, Q, K]
                        if self.window(index) is not None:
                            positions = torch.arange(context.shape[1])
                            allowed &= (positions[:, None] - positions[None, :]).abs() <= self.window(index)
                        weights = allowed.float() / allowed.float().sum(-1, keepdim=True).clamp_min(1)  # padding rows: none
                        context[..., span] = weights @ values[index][..., span]
                return (context, *args[1:])

            handles.append(value_projection.register_forward_hook(keep_values))
            handles.append(projection.register_forward_pre_hook(mask_heads))
        try:
            with torch.no_grad():
                outputs = self.model(**batch, output_hidden_states=True, output_attentions=True)
        finally:
            for handle in handles:
                handle.remove()
        return outputs, values, real

    def norms(self, outputs, values):
        """‖α_ij f_h(x_j)‖ by hand: each head's value through its slice of the output projection."""
        result = []
        for index, weights in enumerate(outputs.attentions):
            weights = weights.detach()
            layer = _layers(self.model, self.family)[0 if self.family == "albert" else index]
            projection = PATHS[self.family](layer)[0].weight.detach()  # [D, H·d]
            size = projection.shape[1] // self.heads
            per_head = []
            for head in range(self.heads):
                span = slice(head * size, (head + 1) * size)
                moved = values[index][0][:, span] @ projection[:, span].T  # [K, D]
                per_head.append(weights[0, head] * moved.norm(dim=-1)[None, :])
            result.append(torch.stack(per_head))
        return torch.stack(result).numpy()


@pytest.fixture(scope="module", params=FAMILIES)
def family_models(request, tmp_path_factory):
    """A bare, an MLM and a classifier model of one family, loaded by bertscope and by the reference."""
    family = request.param
    made = {}
    for head in ("Model", "ForMaskedLM", "ForSequenceClassification"):
        directory = save_tiny_family(tmp_path_factory.mktemp(f"{family}-{head}"), family, head, seed=3)
        made[head] = (bertscope.load(str(directory), device="cpu"), Reference(directory, family))
    return family, made


def test_hidden_states_attentions_and_heads_are_the_models_own(family_models):
    family, made = family_models
    for head, (session, reference) in made.items():
        ours = session.forward(TEXT)
        theirs, _, _ = reference.run([TEXT])
        np.testing.assert_allclose(ours.hidden_states, torch.stack(theirs.hidden_states)[:, 0].numpy(), atol=2e-5)
        np.testing.assert_allclose(ours.attentions, torch.stack(theirs.attentions)[:, 0].numpy(), atol=2e-6)
        if head == "ForMaskedLM":
            np.testing.assert_allclose(ours.mlm_logits, theirs.logits[0].numpy(), atol=1e-4)
        if head == "ForSequenceClassification":
            np.testing.assert_allclose(ours.class_logits, theirs.logits[0].numpy(), atol=1e-5)
            last = torch.as_tensor(ours.hidden_states[-1])[None]
            np.testing.assert_allclose(session.class_logits(last)[0].detach().numpy(), theirs.logits[0].numpy(), atol=1e-5)
        assert session.info.family.lower().replace("-", "") == family.replace("-", "")


@pytest.mark.parametrize("ablation", ["zero", "uniform"])
def test_masked_heads_match_an_independent_masked_forward(family_models, ablation):
    family, made = family_models
    session, reference = made["ForMaskedLM"]
    masked = [(0, 1), (1, 0), (1, 3), (session.num_layers - 1, 2)]
    spec = ",".join(f"{layer}:{head}" for layer, head in masked)
    theirs, _, real = reference.run(BATCH, masked, ablation)
    inputs = session.tokenize_batch(list(BATCH))
    with torch.inference_mode():
        ours = session.run(inputs, gates=session.gate_tensor(session.mask(spec)), ablation=ablation, attentions=True)
    for index in range(session.num_layers + 1):
        np.testing.assert_allclose(ours.hidden_states[index][real], theirs.hidden_states[index][real], atol=3e-5)
    np.testing.assert_allclose(ours.logits[real], theirs.logits[real], atol=3e-4)
    for layer, head in masked:
        weights = ours.attentions[layer][0, head]  # the first sentence: no padding
        if ablation == "zero":
            assert float(weights.abs().max()) == 0.0
        else:  # uniform over what the head may see
            window = reference.window(layer)
            seen = weights > 0
            assert torch.allclose(weights.sum(-1), torch.ones(len(weights)), atol=1e-5)
            if window is not None:
                distance = (torch.arange(len(weights))[:, None] - torch.arange(len(weights))[None, :]).abs()
                assert bool((seen == (distance <= window)).all())
    # the one-sentence path (with the reused lower layers) agrees with the batched one
    plain = session.forward(BATCH[0])
    single = session.forward(BATCH[0], mask=spec, ablation=ablation, reuse=plain)
    np.testing.assert_allclose(single.hidden_states, torch.stack(ours.hidden_states)[:, 0].numpy(), atol=3e-5)


def test_value_weighted_norms_equal_a_hand_computation(family_models):
    family, made = family_models
    session, reference = made["Model"]
    ours = session.forward(TEXT, norms=True)
    theirs, values, _ = reference.run([TEXT])
    np.testing.assert_allclose(ours.norms, reference.norms(theirs, values), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("ablation", ["zero", "uniform"])
def test_one_layer_run_alone_and_figures_reduced_layer_by_layer_equal_a_full_pass(family_models, ablation):
    """What the explorer holds of a long input: every layer's figures without its maps, then one layer's maps
    computed from the hidden state entering it."""
    from bertscope.analyses.attention.headstats import head_figures
    from bertscope.session_backend import SessionBackend

    family, made = family_models
    session, _ = made["ForMaskedLM"]
    backend = SessionBackend(session)
    mask = session.mask("1:0,1:2")
    full = session.forward(TEXT, mask=mask, ablation=ablation, norms=True)
    plain = backend.forward(TEXT, figures=True)
    current = backend.forward(plain.encoding, mask=mask, ablation=ablation, reuse=plain, figures=True)  # layers 1.. again
    assert plain.attentions is None and current.attentions is None and current.norms is None
    np.testing.assert_allclose(current.hidden_states, full.hidden_states, atol=3e-5)
    for name, values in head_figures(full.attentions, full.tokens, full.encoding.special).items():
        np.testing.assert_allclose(current.figures[name], values, rtol=1e-5, atol=1e-6, err_msg=f"{family} {name}")
    for layer in range(session.num_layers):
        weights, norms = backend.layer_maps(plain.encoding, layer, mask=mask, ablation=ablation, start_from=current)
        np.testing.assert_allclose(weights, full.attentions[layer], atol=2e-6, err_msg=f"{family} layer {layer}")
        np.testing.assert_allclose(norms, full.norms[layer], rtol=1e-4, atol=1e-6, err_msg=f"{family} layer {layer}")
    with pytest.raises(ValueError, match="start_from"):  # maps of another mask than the result's states
        backend.layer_maps(plain.encoding, 1, mask=mask, ablation=ablation, start_from=plain)


def test_albert_masks_one_application_of_its_shared_layer(tmp_path):
    """Switching off head 3 of layer 1 leaves layers 0 and 2, which run the same weights, untouched."""
    session = bertscope.load(str(save_tiny_family(tmp_path / "albert", "albert")), device="cpu")
    plain, masked = session.forward(TEXT), session.forward(TEXT, mask="1:3")
    assert session.num_layers == 3
    np.testing.assert_array_equal(plain.attentions[0], masked.attentions[0])
    np.testing.assert_array_equal(plain.hidden_states[:2], masked.hidden_states[:2])
    assert float(np.abs(masked.attentions[1, 3]).max()) == 0.0 and float(np.abs(plain.attentions[1, 3]).max()) > 0
    assert float(np.abs(masked.attentions[2, 3]).max()) > 0  # the next application of the same head still attends
    assert not np.allclose(plain.hidden_states[2], masked.hidden_states[2])
    shared = {id(p) for p in session.model.parameters()}
    assert len(shared) == len(list(session.model.parameters()))  # one set of weights, not three copies
    assert session.info.parameters == sum(p.numel() for p in transformers.AutoModel.from_pretrained(tmp_path / "albert").parameters())


def test_albert_with_several_layers_per_group_is_refused_before_loading(tmp_path):
    save_tiny_family(tmp_path / "albert", "albert", inner_group_num=2)
    with pytest.raises(ModelLoadError, match="inner_group_num=2") as raised:
        bertscope.load(str(tmp_path / "albert"), device="cpu")
    assert "\n" not in str(raised.value) and raised.value.setting == "model"


def test_other_architectures_are_refused_in_one_line(tmp_path):
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=50)
    transformers.GPT2Model(config).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError) as raised:
        bertscope.load(str(tmp_path), device="cpu")
    message = str(raised.value)
    assert "\n" not in message and "gpt2" in message and "modernbert" in message and "deberta-v2" in message


@pytest.mark.parametrize("family", FAMILIES)
def test_a_zeroed_copy_loads_in_plain_transformers_and_computes_the_masked_model(family, tmp_path):
    from bertscope.analyses.importance.pruned_export import write_pruned_model

    session = bertscope.load(str(save_tiny_family(tmp_path / "model", family, "ForMaskedLM")), device="cpu")
    heads = [(layer, 1) for layer in range(session.num_layers)]  # ALBERT: the same head of every application
    written = write_pruned_model(session, heads, tmp_path / "zeroed", timing_texts=[TEXT], extra={}, weights="zeroed")
    assert written.max_abs_difference == 0.0
    plain = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "zeroed", attn_implementation="eager").eval()
    batch = session.tokenizer([TEXT], return_tensors="pt")
    if family in ("distilbert", "modernbert", "mpnet"):
        batch.pop("token_type_ids", None)
    with torch.no_grad():
        theirs = plain(**batch).logits[0].numpy()
    ours = session.forward(TEXT, mask=",".join(f"{layer}:{head}" for layer, head in heads))
    np.testing.assert_allclose(ours.mlm_logits, theirs, atol=1e-4)


@pytest.mark.parametrize("family", ["albert", "modernbert", "mpnet"])
def test_families_whose_heads_cannot_be_sliced_say_to_zero_them(family, tmp_path):
    from bertscope.analyses.importance.pruned_export import write_pruned_model
    from bertscope.base.errors import InputError

    session = bertscope.load(str(save_tiny_family(tmp_path / "model", family)), device="cpu")
    with pytest.raises(InputError, match="zeroed instead") as raised:
        write_pruned_model(session, [(0, 1)], tmp_path / "sliced", timing_texts=[TEXT], extra={}, weights="sliced")
    assert raised.value.setting == "weights" and not (tmp_path / "sliced").exists()
    if family == "albert":  # one application's head is not something a saved copy can remove
        with pytest.raises(InputError, match="run the same weights"):
            write_pruned_model(session, [(0, 1)], tmp_path / "zeroed", timing_texts=[TEXT], extra={}, weights="zeroed")


@pytest.mark.parametrize("family", ["distilbert", "deberta-v2"])
def test_sliced_copies_are_smaller_and_compute_the_masked_model(family, tmp_path):
    from bertscope.analyses.importance.pruned_export import write_pruned_model

    session = bertscope.load(str(save_tiny_family(tmp_path / "model", family, "ForMaskedLM")), device="cpu")
    remove = [(0, 1), *((1, head) for head in range(session.num_heads))]  # layer 1 loses every head
    written = write_pruned_model(session, remove, tmp_path / "sliced", timing_texts=[TEXT], extra={})
    assert written.parameters_after < written.parameters_before
    assert written.max_abs_difference < 1e-4
    pruned = bertscope.load(str(tmp_path / "sliced"), device="cpu").forward(TEXT, norms=True)
    masked = session.forward(TEXT, mask=",".join(f"{layer}:{head}" for layer, head in remove), norms=True)
    for name in ("hidden_states", "attentions", "norms", "mlm_logits"):
        np.testing.assert_allclose(getattr(pruned, name), getattr(masked, name), atol=1e-5)
