"""Attribution on tiny random models, checked against captum and against transformers' own forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope.analyses.attribution import Target, attribute, gauss_legendre, rollout
from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.base.errors import InputError
from bertscope.data.probing_tasks import generate, write_senteval
from tests.helpers.models import save_tiny

TEXT = "Dante was born in [MASK], a city of Tuscany."


def result_of(steps):
    return list(steps)[-1].result


@pytest.fixture(scope="module")
def sharp_dir(tmp_path_factory):
    """A tiny MLM with larger random weights: its output bends along the IG path, as a trained model's does."""
    return save_tiny(tmp_path_factory.mktemp("sharp-mlm"), "BertForMaskedLM", seed=1, initializer_range=0.3)


@pytest.fixture(scope="module")
def tiny_mlm_session(sharp_dir):
    from bertscope.model.session import Session

    return Session.open(str(sharp_dir), device="cpu")


@pytest.fixture(scope="module")
def reference(sharp_dir):
    """The tiny MLM loaded by transformers directly (eager attention, so it reports weights)."""
    from transformers import AutoTokenizer, BertForMaskedLM

    model = BertForMaskedLM.from_pretrained(sharp_dir, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(sharp_dir)
    inputs = tokenizer(TEXT, return_tensors="pt")
    ids = inputs["input_ids"]
    position = int((ids[0] == tokenizer.mask_token_id).nonzero()[0, 0])
    with torch.no_grad():
        token = int(model(**inputs).logits[0, position].argmax())
        embeds = model.get_input_embeddings()(ids)
        kept = (ids == tokenizer.cls_token_id) | (ids == tokenizer.sep_token_id) | (ids == tokenizer.mask_token_id)
        baseline = model.get_input_embeddings()(torch.where(kept, ids, torch.full_like(ids, tokenizer.pad_token_id)))

    def f(inputs_embeds):
        logits = model(inputs_embeds=inputs_embeds, token_type_ids=torch.zeros_like(ids).expand(len(inputs_embeds), -1)).logits
        return torch.log_softmax(logits[:, position].double(), -1)[:, token]

    return {
        "model": model,
        "tokenizer": tokenizer,
        "inputs": inputs,
        "position": position,
        "token": token,
        "embeds": embeds,
        "baseline": baseline,
        "f": f,
    }


def test_integrated_gradients_agree_with_captum(tiny_mlm_session, reference):
    from captum.attr import IntegratedGradients

    ours = result_of(attribute(tiny_mlm_session, TEXT, method="integrated-gradients", ig_steps=32))
    assert ours.target["kind"] == "mlm" and ours.target["position"] == reference["position"]
    assert ours.target["index"] == reference["token"]
    expected, delta = IntegratedGradients(reference["f"]).attribute(
        reference["embeds"],
        baselines=reference["baseline"],
        n_steps=32,
        method="gausslegendre",
        return_convergence_delta=True,
    )
    expected = expected[0].sum(-1).detach().numpy()
    np.testing.assert_allclose(ours.scores, expected, rtol=1e-3, atol=1e-4 * np.abs(expected).max())
    with torch.no_grad():
        f_x, f_b = (float(reference["f"](e)) for e in (reference["embeds"], reference["baseline"]))
    assert ours.output == pytest.approx(f_x, abs=1e-4) and ours.baseline_output == pytest.approx(f_b, abs=1e-4)
    assert ours.completeness_error == pytest.approx(abs(float(delta)) / abs(f_x - f_b), abs=1e-3)
    # [CLS], [SEP] and the [MASK] are in the baseline too: nothing moves along the path there.
    kept = [i for i, t in enumerate(ours.tokens) if t in ("[CLS]", "[SEP]", "[MASK]")]
    assert np.all(ours.scores[kept] == 0)


def test_completeness_error_is_what_it_says_and_small_with_enough_steps(tiny_mlm_session):
    few = result_of(attribute(tiny_mlm_session, TEXT, method="integrated-gradients", ig_steps=4))
    many = result_of(attribute(tiny_mlm_session, TEXT, method="integrated-gradients", ig_steps=128))
    for result in (few, many):
        difference = result.output - result.baseline_output
        assert result.completeness_error == pytest.approx(abs(result.scores.sum() - difference) / abs(difference), rel=1e-3, abs=1e-5)
    assert many.completeness_error < 0.01 < few.completeness_error
    default = result_of(attribute(tiny_mlm_session, TEXT, method="integrated-gradients"))
    assert default.completeness_error < 0.05 and default.steps >= 32 and not default.notes


def test_gradient_methods_equal_autograd_on_the_model(tiny_mlm_session, reference):
    embeds = reference["embeds"].clone().requires_grad_()
    (grad,) = torch.autograd.grad(reference["f"](embeds).sum(), embeds)
    grad = grad[0]
    saliency = result_of(attribute(tiny_mlm_session, TEXT, method="gradient"))
    times_input = result_of(attribute(tiny_mlm_session, TEXT, method="gradient-x-input"))
    np.testing.assert_allclose(saliency.scores, grad.norm(dim=-1).numpy(), rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(times_input.scores, (grad * reference["embeds"][0]).sum(-1).numpy(), rtol=1e-3, atol=1e-6)
    assert np.all(saliency.scores >= 0)


def test_attention_rollout_follows_abnar_and_zuidema(tiny_mlm_session, reference):
    with torch.no_grad():
        attentions = reference["model"](**reference["inputs"], output_attentions=True).attentions
    length = attentions[0].shape[-1]
    joint = torch.eye(length, dtype=torch.float64)
    for layer in attentions:
        mixed = 0.5 * layer[0].double().mean(0) + 0.5 * torch.eye(length, dtype=torch.float64)
        joint = (mixed / mixed.sum(-1, keepdim=True)) @ joint
    ours = result_of(attribute(tiny_mlm_session, TEXT, method="attention-rollout"))
    np.testing.assert_allclose(ours.scores, joint[reference["position"]].numpy(), atol=1e-5)
    assert ours.scores.sum() == pytest.approx(1.0, abs=1e-5)
    # a zero-ablated head has no weights; rows stay distributions
    masked = rollout(np.zeros((2, 1, 3, 3)), 2, np.array([1]))
    np.testing.assert_allclose(masked, [0, 1, 0])


@pytest.mark.parametrize("method", ["attention-flow", "norms", "value-zeroing", "alti"])
def test_context_mixing_methods_read_the_decisions_row_rolled_out(tiny_mlm_session, reference, method):
    """The rolled-out measure from the input to the last layer, at the [MASK] the MLM decision reads, under the mask."""
    from bertscope.analyses.attribution_results import MIXING
    from bertscope.analyses.mixing.run import context_mixing

    mask = tiny_mlm_session.mask("0:1")
    ours = result_of(attribute(tiny_mlm_session, TEXT, method=method, conditions=Conditions(mask)))
    mixing = result_of(context_mixing(tiny_mlm_session, TEXT, method=MIXING[method], conditions=Conditions(mask)))
    np.testing.assert_allclose(ours.scores, mixing.rolled[-1][reference["position"]], atol=1e-6)
    assert ours.scores.sum() == pytest.approx(1.0, abs=1e-5) and (ours.scores >= 0).all()
    assert ours.mask.spec() == "0:1" and ours.target["kind"] == "mlm"
    unmasked = result_of(attribute(tiny_mlm_session, TEXT, method=method))
    assert not np.allclose(unmasked.scores, ours.scores)


def test_a_head_mask_reaches_the_attributed_forward(tiny_mlm_session):
    plain = result_of(attribute(tiny_mlm_session, TEXT, method="integrated-gradients", ig_steps=16))
    mask = tiny_mlm_session.mask("1:*,2:0")
    masked = result_of(
        attribute(
            tiny_mlm_session,
            TEXT,
            method="integrated-gradients",
            ig_steps=16,
            conditions=Conditions(mask),
            target=Target(label=plain.target["label"]),
        )
    )
    assert masked.output != pytest.approx(plain.output)
    from bertscope.analyses.mlm import fill

    guesses = fill(tiny_mlm_session, TEXT, top=1, mask=mask, layers=False).blanks[0]
    logits = tiny_mlm_session.forward(TEXT.replace("[MASK]", "[MASK]"), mask=mask).mlm_logits[guesses.position]
    expected = logits[plain.target["index"]] - np.log(np.exp(logits.astype(np.float64) - logits.max()).sum()) - logits.max()
    assert masked.output == pytest.approx(expected, abs=1e-4)
    assert masked.as_json()["mask"] == "1:*,2:0"


def test_a_named_target_and_a_chosen_mask_position(tiny_mlm_session):
    text = "[MASK] was born in [MASK]."
    result = result_of(attribute(tiny_mlm_session, text, method="gradient", target=Target(label="paris", position=5)))
    assert result.target == {
        "kind": "mlm",
        "label": "paris",
        "index": tiny_mlm_session.tokenizer.convert_tokens_to_ids("paris"),
        "position": 5,
    }
    with pytest.raises(InputError, match="not a \\[MASK\\].*1, 5"):
        list(attribute(tiny_mlm_session, text, method="gradient", target=Target(position=2)))
    with pytest.raises(InputError, match="not one token"):
        list(attribute(tiny_mlm_session, text, method="gradient", target=Target(label="florencetown")))
    with pytest.raises(InputError, match="no \\[MASK\\]"):
        list(attribute(tiny_mlm_session, "No blank.", method="gradient"))
    with pytest.raises(InputError, match="unknown attribution method"):
        list(attribute(tiny_mlm_session, text, method="shap"))


def test_probe_decisions_on_a_model_without_an_mlm_head(tiny_session, tmp_path):
    with pytest.raises(InputError, match="neither an MLM head nor a classifier.*probe's decision") as refused:
        list(attribute(tiny_session, "The keys are here.", method="gradient"))
    assert refused.value.setting == "probe"  # the CLI names --probe, the explorer its probe box
    sentences = generate("subject_number", train=80, dev=20, test=20)
    data = tmp_path / "subject_number.tsv"
    write_senteval(data, sentences)
    from bertscope.analyses.probing.decision import decision_probe

    probe = list(decision_probe(tiny_session, "subject_number", data=data, cache_dir=tmp_path))[-1].result
    assert probe.classes == ("NN", "NNS") and 0 <= probe.layer <= tiny_session.num_layers
    # the torch rebuild scores a sentence as the numpy probe scores its cached feature
    text = sentences[0].text
    hidden = torch.as_tensor(tiny_session.forward(text).hidden_states)  # [L+1, T, D]
    special = torch.as_tensor(tiny_session.encode(text).special)
    rebuilt = probe.logits(hidden[probe.layer][None], special)[0].numpy()
    np.testing.assert_allclose(rebuilt, probe.trained.logits(hidden[:, 0].numpy()[None])[0, probe.layer], rtol=1e-4, atol=1e-4)

    target = Target(probe="subject_number", data=str(data), label="NN", layer=2)
    import bertscope.analyses.probing.decision as module

    key_count = len(module._trained.get(tiny_session, {}))
    result = result_of(attribute(tiny_session, text, method="integrated-gradients", target=target, job=JobOptions(cache_dir=tmp_path)))
    assert result.target["label"] == "NN" and result.target["layer"] == 2 and result.target["task"] == "subject_number"
    assert result.completeness_error < 0.05
    rolled = result_of(attribute(tiny_session, text, method="attention-rollout", target=target, job=JobOptions(cache_dir=tmp_path)))
    assert rolled.scores.sum() == pytest.approx(1.0, abs=1e-5)
    # a rolled-out measure stops at the layer the probe reads (hidden state 2: the output of layer 1), at [CLS]'s row
    from bertscope.analyses.mixing.run import context_mixing

    zeroed = result_of(attribute(tiny_session, text, method="value-zeroing", target=target, job=JobOptions(cache_dir=tmp_path)))
    mixing = result_of(context_mixing(tiny_session, text, method="value-zeroing"))
    np.testing.assert_allclose(zeroed.scores, mixing.rolled[1][0], atol=1e-6)
    assert len(module._trained[tiny_session]) == key_count  # trained once, reused
    (cached,) = tmp_path.glob("probe-*.npz")
    module._trained.clear()
    again = list(decision_probe(tiny_session, "subject_number", data=data, cache_dir=tmp_path))[-1].result
    np.testing.assert_array_equal(again.trained.weights, probe.trained.weights)
    assert again.layer == probe.layer and again.classes == probe.classes
    cached.write_bytes(b"damaged")
    assert module._load(cached, "subject_number", str(data), "cls", tiny_session) is None  # trained again, not trusted
    with pytest.raises(InputError, match="not a class here; classes: NN, NNS"):
        list(
            attribute(
                tiny_session,
                text,
                method="gradient",
                target=Target(probe="subject_number", data=str(data), label="VB"),
                job=JobOptions(cache_dir=tmp_path),
            )
        )
    with pytest.raises(InputError, match="unknown probing task"):
        list(attribute(tiny_session, text, method="gradient", target=Target(probe="nonsense"), job=JobOptions(cache_dir=tmp_path)))


def test_sequence_classification_outputs(tmp_path):
    from transformers import BertForSequenceClassification

    from bertscope.model.session import Session

    directory = save_tiny(
        tmp_path / "cls",
        "BertForSequenceClassification",
        seed=3,
        num_labels=3,
        id2label={0: "neg", 1: "neu", 2: "pos"},
        label2id={"neg": 0, "neu": 1, "pos": 2},
    )
    session = Session.open(str(directory), device="cpu")
    result = result_of(attribute(session, "A fine film.", method="integrated-gradients", target=Target(label="POS"), ig_steps=64))
    assert result.target["kind"] == "class" and result.target["label"] == "pos" and result.target["index"] == 2
    model = BertForSequenceClassification.from_pretrained(directory).eval()
    with torch.no_grad():
        logits = model(**session.tokenizer("A fine film.", return_tensors="pt")).logits[0].double()
    assert result.output == pytest.approx(float(torch.log_softmax(logits, -1)[2]), abs=1e-4)
    assert result.completeness_error < 0.05
    probability = result_of(attribute(session, "A fine film.", method="gradient", target=Target(label="0"), score="probability"))
    assert probability.target["label"] == "neg" and probability.output == pytest.approx(float(torch.softmax(logits, -1)[0]), abs=1e-5)


def test_gauss_legendre_integrates_polynomials_exactly():
    alphas, weights = gauss_legendre(4)
    assert weights.sum() == pytest.approx(1.0) and np.all((alphas > 0) & (alphas < 1))
    assert (weights * alphas**7).sum() == pytest.approx(1 / 8)  # degree 2n - 1 is exact


def test_words_sum_their_pieces(tiny_mlm_session):
    result = result_of(attribute(tiny_mlm_session, "Tuscany is [MASK].", method="gradient-x-input"))
    words = result.words()
    pieces = [i for i, t in enumerate(result.tokens) if t.startswith("##")]
    assert words[0]["word"] == "tuscany" and len(words[0]["positions"]) == 1 + len(pieces)
    assert words[0]["score"] == pytest.approx(float(result.scores[words[0]["positions"]].sum()), rel=1e-5)
