"""SAE features switched off or clamped in the pass: nothing switched is the model's own pass on every family, a
feature off is h − a_f·W_dec[f] at the SAE's hidden state (and the layers above read it), a clamp is h + (c − a_f)·W_dec[f];
the explorer's backend applies them as it applies an erasure."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import bertscope
from bertscope.analyses.conditions import Conditions, LiveEdits
from bertscope.analyses.sae.autoencoder import TopKSAE
from bertscope.analyses.sae.files import SAEConfig
from bertscope.analyses.sae.results import LiveFeatures
from bertscope.base.errors import InputError
from bertscope.model.masks import HeadMask
from bertscope.model.session import Session
from tests.family_models import FAMILIES, save_tiny_family

TEXT = "The keys to the cabinet are on the table."


def random_sae(session: Session, layer: int, directory, *, dead: int = 0, seed: int = 0) -> TopKSAE:
    """A random TopK SAE on hidden state `layer` saved in `directory` (feature `dead` never fires: its encoder bias is
    far below any input's)."""
    generator = torch.Generator().manual_seed(seed)
    d_in = session.hidden_size
    sae = TopKSAE(d_in, 4 * d_in, 4, generator=generator)
    with torch.no_grad():
        sae.b_dec.copy_(0.1 * torch.randn(d_in, generator=generator))
        sae.b_enc[dead] = -1e4
    sae.save(directory, SAEConfig(d_in, 4 * d_in, 4, layer, session.source, session.fingerprint))
    return sae


def hand_switched(sae: TopKSAE, h: np.ndarray, switched: dict[int, float | None]) -> np.ndarray:
    """h + Σ_f (c_f − a_f(h))·W_dec[f] by hand: the activations from the dense encoding, in float64."""
    with torch.no_grad():
        dense = sae.encode(torch.as_tensor(h)).double().numpy()
    decoder = sae.W_dec.detach().double().numpy()
    out = h.astype(np.float64)
    for feature, value in switched.items():
        out = out + ((value or 0.0) - dense[:, feature])[:, None] * decoder[feature]
    return out


def spliced_pass(session: Session, layer: int, state: np.ndarray):
    """The model's pass with hidden state `layer` replaced by `state` `[T, D]`, by a hook of the test's own."""
    module = session.family.hidden_state_module(session.model, layer)
    replacement = torch.as_tensor(state, dtype=torch.float32)[None]

    def splice(_module, _args, output):
        return replacement if isinstance(output, torch.Tensor) else (replacement, *output[1:])

    handle = module.register_forward_hook(splice, prepend=True)
    try:
        return session.forward(TEXT, attentions=False)
    finally:
        handle.remove()


@pytest.mark.parametrize("family", ["bert", *FAMILIES])
def test_switching_is_the_models_pass_with_the_features_changed(family, tmp_path, tiny_bert_dir):
    """On every family: a switched feature that never fires leaves the pass as it is (float noise); one switched off is
    the pass with h − a_f·W_dec[f] at the SAE's hidden state, and one clamped h + (c − a_f)·W_dec[f]."""
    directory = tiny_bert_dir if family == "bert" else save_tiny_family(tmp_path / family, family, seed=2)
    session = Session.open(str(directory), device="cpu")
    layer = 1  # DeBERTa-v2's convolution gives hidden state 1
    sae = random_sae(session, layer, tmp_path / "sae", dead=3)
    plain = session.forward(TEXT, attentions=False)
    h = plain.hidden_states[layer]
    with torch.no_grad():
        firing = sae.encode(torch.as_tensor(h)).numpy()
    feature = int((firing > 0).sum(0).argmax())  # the feature that fires on the most tokens
    assert (firing[:, feature] > 0).any() and not (firing[:, 3] > 0).any()

    with bertscope.switched(session, sae=tmp_path / "sae", features=[3]):
        untouched = session.forward(TEXT, attentions=False)
    np.testing.assert_allclose(untouched.hidden_states, plain.hidden_states, atol=1e-5)

    for switched in ({feature: None}, {feature: 2.5, 3: 1.0}):
        with bertscope.switched(session, sae=tmp_path / "sae", features=switched) as live:
            found = session.forward(TEXT, attentions=False)
        assert live.values == switched and live.layer == layer
        expected = hand_switched(sae, h, switched)
        np.testing.assert_allclose(found.hidden_states[layer], expected, atol=1e-4)
        np.testing.assert_allclose(found.hidden_states[:layer], plain.hidden_states[:layer], atol=1e-6)
        by_hand = spliced_pass(session, layer, expected)
        np.testing.assert_allclose(found.hidden_states, by_hand.hidden_states, atol=1e-4)
        assert np.abs(found.hidden_states[-1] - plain.hidden_states[-1]).max() > 1e-3  # the layers above read it
    after = session.forward(TEXT, attentions=False)  # the hook is gone once the block ends
    np.testing.assert_array_equal(after.hidden_states, plain.hidden_states)


def test_switching_off_is_the_reconstruction_without_the_feature_plus_the_error(tiny_session, tmp_path):
    """The identity the switch rests on: x̂ without f, plus h − x̂, is h − a_f·W_dec[f] (float noise)."""
    from bertscope.analyses.sae.switch import FeatureSwitch

    sae = random_sae(tiny_session, 2, tmp_path / "sae")
    h = torch.as_tensor(tiny_session.forward(TEXT, attentions=False).hidden_states[2])
    with torch.no_grad():
        latents = sae.encode(h)
        feature = int((latents > 0).sum(0).argmax())
        without = latents.clone()
        without[:, feature] = 0
        expected = sae.decode(without) + (h - sae.decode(latents))
        np.testing.assert_allclose(FeatureSwitch.of(sae, {feature: None})(h).numpy(), expected.numpy(), atol=1e-5)


def test_the_backend_switches_features_in_its_passes_and_measures(tiny_session, tmp_path):
    """The explorer's backend: `forward`, an analysis's steps and `measure` run with the features switched (the
    objective's reference left as the model is), and an SAE of another width or no SAE is one line."""
    from bertscope import api
    from bertscope.base.progress import outcome
    from bertscope.session_backend import SessionBackend

    backend = SessionBackend(tiny_session)
    sae = random_sae(tiny_session, 2, tmp_path / "sae")
    opened, notes = backend.open_sae(str(tmp_path / "sae"))
    assert opened == LiveFeatures(str(tmp_path / "sae"), 2, sae.d_sae) and notes == ()
    encoding = tiny_session.encode(TEXT)
    features, values = backend.sae_tokens(encoding, opened, top=3)
    assert features.shape == values.shape == (len(encoding), 3) and (np.diff(values, axis=1) <= 0).all()
    feature = int(np.bincount(features[:, 0]).argmax())
    live = LiveEdits(features=opened.with_(feature, None))
    assert Conditions(HeadMask.none(2, 2), features=live.features).note().endswith(f"sae@2 off {feature}")

    plain = backend.forward(encoding)
    switched = backend.forward(encoding, erasure=live)
    expected = hand_switched(sae, plain.hidden_states[2], {feature: None})
    np.testing.assert_allclose(switched.hidden_states[2], expected, atol=1e-4)
    mixing = outcome(backend.steps(api.mixing, live, encoding, method="attention"))
    assert not np.allclose(mixing.per_layer, outcome(backend.steps(api.mixing, None, encoding, method="attention")).per_layer)

    objective = backend.objective("preserve", bertscope.corpus([TEXT]))
    assert backend.measure(objective).loss == pytest.approx(0, abs=1e-6)  # the model against itself
    assert backend.measure(objective, erasure=live).loss > 1e-4  # against the model as it is, not as switched

    other = tmp_path / "wide"
    wide = TopKSAE(tiny_session.hidden_size + 1, 8, 2)
    wide.save(other, SAEConfig(tiny_session.hidden_size + 1, 8, 2, 1, "other", "x"))
    for directory, message in ((other, "-wide hidden states and this model's are"), (tmp_path, "is not an SAE directory")):
        with pytest.raises(InputError, match=message) as refused:
            backend.open_sae(str(directory))
        assert "\n" not in str(refused.value)


def test_live_features_say_what_is_switched_and_refuse_what_cannot_be():
    live = LiveFeatures("sae", 3, 100).with_(40, None).with_(12, None).with_(7, 2.5)
    assert live.short() == "sae@3 off 12,40 clamp 7=2.5"
    assert LiveFeatures("sae", 3, 100, LiveFeatures.parse_spec(live.spec())) == live
    assert live.without(40).without(7).short() == "sae@3 off 12"
    with pytest.raises(InputError, match="feature 100 is out of range"):
        live.with_(100, None)
    with pytest.raises(InputError, match="not a feature"):
        LiveFeatures.parse_spec("12,x")
