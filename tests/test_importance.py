"""Head importance, objectives, pruning curves and physically pruned models, on tiny random encoders."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from bertscope.analyses.importance.objectives import make_objective
from bertscope.analyses.importance.pruned_export import PairedTiming, time_paired, write_pruned_model
from bertscope.analyses.importance.run import check_fraction, head_importance, measure, pruning_curve
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence, read_sentences, sample_corpus
from bertscope.model.session import Session
from tests.helpers.models import save_tiny

TEXTS = [s.text for s in read_sentences(sample_corpus(), limit=48)]
SENTENCES = [Sentence(text=t) for t in TEXTS]


def result_of(steps):
    return list(steps)[-1].result


@pytest.fixture(scope="module")
def pruned_pair(tmp_path_factory, tiny_mlm_session):
    """The tiny MLM model pruned of two heads of layer 0 and every head of layer 2."""
    directory = tmp_path_factory.mktemp("pruned") / "model"
    remove = [(0, 1), (0, 3), (2, 0), (2, 1), (2, 2), (2, 3)]
    written = write_pruned_model(tiny_mlm_session, remove, directory, timing_texts=TEXTS[:8], extra={"note": "test"})
    return tiny_mlm_session, Session.open(str(directory), device="cpu"), written


def test_pruned_model_equals_masked_original(pruned_pair):
    original, pruned, written = pruned_pair
    spec = "0:1,0:3,2:*"
    for text in TEXTS[:3]:
        masked = original.forward(text, attentions=True, mask=spec, ablation="zero")
        small = pruned.forward(text, attentions=True)
        np.testing.assert_allclose(small.hidden_states, masked.hidden_states, atol=1e-5)
        np.testing.assert_allclose(small.mlm_logits, masked.mlm_logits, atol=1e-4)
        np.testing.assert_allclose(small.attentions, masked.attentions, atol=1e-6)  # pruned heads report zeros
        assert np.all(small.attentions[2] == 0) and np.all(small.attentions[0, 1] == 0)
    assert written.max_abs_difference < 1e-5


def test_a_zeroed_export_loads_in_plain_transformers_and_equals_the_masked_model(tiny_mlm_session, tmp_path):
    """transformers 5 ignores pruned_heads, so the zeroed format keeps the shapes and zeroes the heads' output instead."""
    from transformers import AutoModel, AutoModelForMaskedLM

    remove = [(0, 1), (0, 3), (2, 0), (2, 1), (2, 2), (2, 3)]
    written = write_pruned_model(tiny_mlm_session, remove, tmp_path / "zeroed", timing_texts=TEXTS[:8], extra={}, weights="zeroed")
    config = json.loads((written.directory / "config.json").read_text())
    assert "pruned_heads" not in config or not config["pruned_heads"]
    assert (written.directory / "model.safetensors").is_file()
    record = json.loads((written.directory / "bertscope-pruning.json").read_text())
    assert record["format"] == "zeroed" and record["pruned_heads"] == {"0": [1, 3], "2": [0, 1, 2, 3]}
    assert record["timing"] == "same arithmetic" and record["speedup"] is None and record["speedup_spread"] is None
    assert written.parameters_after == written.parameters_before and written.max_abs_difference < 1e-5
    encoder = AutoModel.from_pretrained(written.directory).eval()  # plain transformers, no bertscope code
    with_head = AutoModelForMaskedLM.from_pretrained(written.directory).eval()
    for text in TEXTS[:3]:
        masked = tiny_mlm_session.forward(text, attentions=False, mask="0:1,0:3,2:*", ablation="zero")
        inputs = tiny_mlm_session.tokenizer(text, return_tensors="pt")
        with torch.inference_mode():
            hidden = encoder(**inputs).last_hidden_state[0].numpy()
            logits = with_head(**inputs).logits[0].numpy()
        np.testing.assert_allclose(hidden, masked.hidden_states[-1], atol=1e-5)
        np.testing.assert_allclose(logits, masked.mlm_logits, atol=1e-4)


def test_a_zeroed_export_of_a_sliced_model_is_refused(pruned_pair, tmp_path):
    _, pruned, _ = pruned_pair
    with pytest.raises(InputError, match="sliced out already"):
        write_pruned_model(pruned, [(1, 0)], tmp_path / "again", timing_texts=TEXTS[:2], extra={}, weights="zeroed")
    assert not (tmp_path / "again").exists()


def test_pruned_model_is_smaller_and_says_what_it_pruned(pruned_pair):
    original, pruned, written = pruned_pair
    head_params = 3 * (32 * 8 + 8) + 8 * 32  # q, k, v rows and the output projection's columns of one head
    assert written.parameters_before - written.parameters_after == 6 * head_params
    assert pruned.info.parameters == written.parameters_after and pruned.info.pruned_heads == 6
    config = json.loads((written.directory / "config.json").read_text())
    assert config["pruned_heads"] == {"0": [1, 3], "2": [0, 1, 2, 3]}
    (report,) = [p for p in written.directory.iterdir() if "pruning" in p.name]
    assert json.loads(report.read_text())["pruned_heads"] == config["pruned_heads"]
    layer = pruned.model.base_model.encoder.layer[0].attention
    assert layer.self.query.out_features == 16 and layer.output.dense.in_features == 16
    assert pruned.info.num_heads == 4  # head numbers stay those of the original model
    timing = written.timing
    assert timing is not None and timing.rounds == 7 and len(timing.seconds_after) == 7 and timing.sentences == 8
    low, high = timing.spread
    assert low <= written.speedup <= high and timing.verdict in ("faster", "slower", "within noise")
    record = json.loads(report.read_text())
    assert record["speedup"] == round(written.speedup, 4) and record["speedup_rounds"] == 7
    assert record["speedup_spread"] == [round(low, 4), round(high, 4)] and record["timing"] == timing.verdict


def test_a_zeroed_copy_is_not_timed(tiny_mlm_session, tmp_path, monkeypatch):
    """Issue 54: zeroed copies were reported 0.64-2.39x as fast: the same shapes run the same arithmetic, noise timed."""
    from bertscope.analyses.importance import pruned_export

    def no_timing(*args, **kwargs):
        raise AssertionError("a zeroed copy was timed")

    monkeypatch.setattr(pruned_export, "time_paired", no_timing)
    written = write_pruned_model(tiny_mlm_session, [(0, 1)], tmp_path / "zeroed", timing_texts=TEXTS[:4], extra={}, weights="zeroed")
    assert written.timing is None and written.speedup is None
    assert written.describe_speed() == "runs the same arithmetic as the original (heads zeroed, not removed)"
    said = written.timing_json()
    assert said["timing"] == "same arithmetic" and said["speedup"] is None and said["speedup_spread"] is None
    assert list(said) == list(PairedTiming((1.0,), (1.0,), sentences=1).as_json())  # one key set, whichever format


def test_paired_timing_reports_the_median_ratio_and_its_spread():
    faster = PairedTiming(seconds_before=(2.0, 2.2, 4.0, 2.0, 2.1), seconds_after=(1.0, 2.0, 2.0, 1.6, 1.5), sentences=32)
    assert faster.ratios == pytest.approx((2.0, 1.1, 2.0, 1.25, 1.4))
    assert faster.speedup == pytest.approx(1.4) and faster.spread == pytest.approx((1.1, 2.0)) and faster.verdict == "faster"
    assert faster.describe() == "encoder forward 1.40× as fast (median of 5 paired rounds on 32 sentences, 1.10–2.00×)"
    assert faster.as_json() == {
        "speedup": 1.4,
        "speedup_spread": [1.1, 2.0],
        "speedup_rounds": 5,
        "timing": "faster",
        "timed_sentences": 32,
        "encoder_seconds_before": 2.1,
        "encoder_seconds_after": 1.6,
    }
    slower = PairedTiming(seconds_before=(1.0, 1.0, 1.0), seconds_after=(1.25, 1.1, 2.0), sentences=3)
    assert slower.verdict == "slower" and slower.speedup == pytest.approx(1 / 1.25)
    assert slower.describe().startswith("encoder forward 0.80× as fast (median of 3 paired rounds")


def test_paired_timing_calls_a_spread_across_one_within_noise():
    """Issue 54: one quiet run said 1.00x and a loud one 36.04x; rounds that straddle 1 claim no speed-up."""
    noisy = PairedTiming(
        seconds_before=(1.0, 1.0, 1.0, 36.0, 1.0, 1.0, 1.0), seconds_after=(1.03, 0.97, 1.0, 1.0, 0.99, 1.01, 1.02), sentences=8
    )
    low, high = noisy.spread
    assert low < 1 < high and noisy.verdict == "within noise" and noisy.as_json()["timing"] == "within noise"
    assert noisy.speedup == pytest.approx(1.0)  # the loud round moves the spread, not the median
    assert noisy.describe() == "encoder forward: no measurable difference (0.97–36.00× over 7 paired rounds on 8 sentences)"


@pytest.mark.parametrize("before, after", [((), ()), ((1.0, 2.0), (1.0,)), ((1.0,), (0.0,))])
def test_paired_timing_needs_one_positive_time_of_each_per_round(before, after):
    with pytest.raises(ValueError):
        PairedTiming(seconds_before=before, seconds_after=after, sentences=1)


def test_time_paired_alternates_the_models_over_one_batch_after_a_warm_up():
    """Each round times both on the same batch, the first of the pair alternating, so neither gains from going second."""
    calls = []

    class Timed:
        device = torch.device("cpu")

        def __init__(self, name):
            self.name = name

        def tokenize_batch(self, texts):
            calls.append(("batch", len(texts), texts[0], texts[-1]))
            return {"input_ids": torch.zeros(len(texts), 3, dtype=torch.long)}

        def run(self, batch, **kwargs):
            calls.append((self.name, batch["input_ids"].shape[0]))
            assert kwargs == {"hidden_states": False, "encoder_only": True}

    texts = [f"sentence {i}" for i in range(100)]
    timing = time_paired(Timed("original"), Timed("copy"), texts, rounds=4)
    assert calls[0] == ("batch", 32, "sentence 0", "sentence 96")  # 32 sentences spread over the data, tokenised once
    order = [name for name, *_ in calls[1:]]
    assert order == ["original", "copy"] + ["original", "copy", "copy", "original"] * 2
    assert all(size == 32 for _, size in calls[1:])
    assert timing.rounds == 4 and timing.sentences == 32 and min(timing.seconds_before + timing.seconds_after) > 0


def test_masking_kept_heads_of_a_pruned_model(pruned_pair):
    original, pruned, _ = pruned_pair
    text = TEXTS[0]
    masked = original.forward(text, mask="0:1,0:3,0:2,1:0,2:*")
    small = pruned.forward(text, mask="0:2,1:0")
    np.testing.assert_allclose(small.hidden_states, masked.hidden_states, atol=1e-5)
    # masking a head that is already gone changes nothing
    np.testing.assert_allclose(pruned.forward(text, mask="0:1,2:*").hidden_states, pruned.forward(text).hidden_states, atol=1e-6)
    reused = pruned.forward(text, mask="1:0", reuse=pruned.forward(text, attentions=True), attentions=True)
    np.testing.assert_allclose(reused.hidden_states, pruned.forward(text, mask="1:0").hidden_states, atol=1e-5)


def test_pruned_model_gradients_and_random_copy(pruned_pair):
    _, pruned, _ = pruned_pair
    objective = make_objective(pruned, "preserve", SENTENCES[:6])
    result = result_of(head_importance(objective, "gradient", normalize=False))
    assert result.pruned == {(0, 1), (0, 3), (2, 0), (2, 1), (2, 2), (2, 3)}
    assert all(result.raw[head] == 0 for head in result.pruned) and (0, 1) not in result.order()
    assert result.raw[1].min() > 0
    assert pruned.random_copy().forward("a dog").hidden_states.shape[0] == 4


def test_writing_into_a_non_empty_directory_is_refused(tmp_path, tiny_session):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(InputError, match="not an empty directory"):
        write_pruned_model(tiny_session, [(0, 0)], tmp_path / "taken", timing_texts=TEXTS[:2], extra={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # no staging directory left behind


def test_mlm_gradient_importance_is_the_mean_absolute_per_sentence_gradient(tiny_mlm_session):
    session = tiny_mlm_session
    objective = make_objective(session, "mlm", SENTENCES[:4], batch_size=3, seed=3)
    result = result_of(head_importance(objective, "gradient", normalize=False))
    expected = np.zeros((session.num_layers, session.num_heads))
    for batch in objective.batches:  # one sentence at a time, the gradient of its own loss
        for row in range(batch.size):
            single = type(batch)(
                {k: v[row : row + 1] for k, v in batch.inputs.items()}, {k: v[row : row + 1] for k, v in batch.target.items()}
            )
            gates = torch.ones(session.num_layers, session.num_heads, requires_grad=True)
            objective.scores(single, gates, "zero").loss.sum().backward()
            expected += gates.grad.abs().numpy()
    np.testing.assert_allclose(result.raw, expected / 4, rtol=1e-3, atol=1e-6)
    assert result.metric == "masked-token accuracy" and 0 <= result.baseline_metric <= 1


@pytest.mark.parametrize("mode", ["zero", "uniform"])
def test_batched_ablation_equals_one_mask_at_a_time(tiny_mlm_session, mode):
    session = tiny_mlm_session
    objective = make_objective(session, "mlm", SENTENCES[:3], batch_size=2)
    result = result_of(head_importance(objective, "ablation", ablation=mode, normalize=False, max_rows=8))
    base = measure(objective, None, mode).loss
    for layer, head in [(0, 0), (2, 2)]:
        alone = measure(objective, session.mask(f"{layer}:{head}"), mode).loss
        assert result.raw[layer, head] == pytest.approx(alone - base, abs=1e-5)
    for layer in range(session.num_layers):
        alone = measure(objective, session.mask(f"{layer}:*"), mode).loss
        assert result.layers[layer] == pytest.approx(alone - base, abs=1e-5)
    assert result.baseline_loss == pytest.approx(base, abs=1e-6)


def test_preserve_gradient_ranks_heads_like_exact_ablation(tiny_session):
    """The distance has no gradient at the unmasked model; the projected estimate must still rank heads."""
    objective = make_objective(tiny_session, "preserve", SENTENCES)
    gradient = result_of(head_importance(objective, "gradient", normalize=False))
    exact = result_of(head_importance(objective, "ablation", normalize=False, layers=False))
    assert (gradient.raw > 0).all()
    assert spearmanr(gradient.raw.ravel(), exact.raw.ravel()).statistic > 0.8
    assert exact.baseline_loss == 0 and exact.baseline_metric == pytest.approx(1.0)


def test_layer_normalisation(tiny_session):
    objective = make_objective(tiny_session, "preserve", SENTENCES[:8])
    result = result_of(head_importance(objective, "gradient", normalize=True))
    np.testing.assert_allclose(np.linalg.norm(result.importance, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(result.importance * np.linalg.norm(result.raw, axis=1, keepdims=True), result.raw, rtol=1e-6)


def test_objectives_a_model_cannot_serve_are_refused_with_the_ones_that_work(tiny_session):
    with pytest.raises(InputError, match="MLM head.*objectives that work for this model: probe, preserve, similarity, embedding"):
        make_objective(tiny_session, "mlm", SENTENCES)
    with pytest.raises(InputError, match="classification.*probe, preserve"):
        make_objective(tiny_session, "classification", SENTENCES)


@pytest.mark.parametrize("value", [0, 1, 1.5, -0.2])
def test_fractions_outside_zero_one_are_refused(value):
    with pytest.raises(InputError, match="between 0 and 1"):
        check_fraction(value)


def test_classification_objective(tmp_path):
    directory = save_tiny(tmp_path / "cls", "BertForSequenceClassification", num_labels=3)
    session = Session.open(str(directory), device="cpu")
    data = [Sentence(text=t, label=str(i % 3), location=f"x:{i}") for i, t in enumerate(TEXTS[:9])]
    objective = make_objective(session, "classification", data)
    result = result_of(head_importance(objective, "ablation", normalize=False))
    assert result.metric == "accuracy" and 0 <= result.baseline_metric <= 1 and np.isfinite(result.raw).all()
    with pytest.raises(InputError, match="label 'seven' is not one of the model's labels"):
        make_objective(session, "classification", [Sentence(text="a", label="seven", location="x:1")])
    with pytest.raises(InputError, match="no label"):
        make_objective(session, "classification", [Sentence(text="a")])


def test_probe_objective_on_a_built_in_task(tiny_session):
    objective = make_objective(tiny_session, "probe", [], probe_task="bigram_shift", probe_layer=2)
    assert objective.layer == 2 and objective.sentences == 250
    result = result_of(head_importance(objective, "gradient"))
    assert result.metric == "probe accuracy" and result.raw.max() > 0
    assert any("dev accuracy on layer 2" in note for note in result.notes)
    with pytest.raises(InputError, match="needs a task"):
        make_objective(tiny_session, "probe", [])


def test_probe_objective_on_words(tiny_session):
    conllu = list(read_sentences(sample_corpus("conllu"), limit=20))
    objective = make_objective(tiny_session, "probe", conllu * 3, probe_task="upos", probe_layer=1)
    result = result_of(head_importance(objective, "ablation", layers=False))
    assert objective.level == "word" and np.isfinite(result.raw).all()


def test_pruning_curve(tiny_session):
    objective = make_objective(tiny_session, "preserve", SENTENCES[:6])
    importance = result_of(head_importance(objective, "gradient"))
    curve = list(pruning_curve(objective, importance=importance, step=0.25, max_drop=0.05))[-1].result
    fractions = [p.fraction for p in curve.points]
    assert fractions == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [p.heads_pruned for p in curve.points] == [0, 3, 6, 9, 12]
    assert curve.points[0].metric == pytest.approx(1.0) and curve.points[-1].mask == "0:*,1:*,2:*"
    # the first heads removed are the least important ones
    first = set(importance.order()[:3])
    assert set(tiny_session.mask(curve.points[1].mask).off) == first
    best = curve.prunable()
    drops = curve.drops()
    index = curve.points.index(best)
    assert all(d <= 0.05 for d in drops[: index + 1]) and (index == len(drops) - 1 or drops[index + 1] > 0.05)
    again = list(pruning_curve(objective, step=0.25, reestimate=True))[-1].result
    assert again.reestimate and len(again.points) == 5 and again.points[1].mask == curve.points[1].mask
