"""Pattern classes on synthetic maps with known answers, and statistics against a direct computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope.analyses.attention.headstats import PunctuationIds, head_figures
from bertscope.analyses.attention.patterns import (
    PATTERNS,
    STATISTICS,
    batch_tensors,
    classify_map,
    encode_sorted,
    head_features,
    pattern_statistics,
)
from bertscope.analyses.conditions import Conditions, JobOptions


class Text:
    def __init__(self, text, pair=None):
        self.text, self.pair = text, pair


LENGTH = 30  # [CLS], 13 words, [SEP], 14 words, [SEP]
SPECIAL = np.zeros(LENGTH, dtype=bool)
SPECIAL[[0, 14, 29]] = True
SEGMENTS = np.array([0] * 15 + [1] * 15)


def rows_to(columns_weights: dict[int, float]) -> np.ndarray:
    weights = np.zeros((LENGTH, LENGTH))
    for column, weight in columns_weights.items():
        weights[:, column] += weight
    return weights


def previous_token() -> np.ndarray:
    weights = np.eye(LENGTH, k=-1)
    weights[0, 0] = 1
    return weights


def block() -> np.ndarray:
    weights = np.zeros((LENGTH, LENGTH))
    for segment in (0, 1):
        words = np.flatnonzero((SEGMENTS == segment) & ~SPECIAL)
        for query in np.flatnonzero(SEGMENTS == segment):
            weights[query, words] = 1 / len(words)
    return weights


MAPS = {
    "vertical": lambda: rows_to({14: 0.5, 29: 0.3, 0: 0.2}),
    "diagonal": previous_token,
    "vertical+diagonal": lambda: 0.5 * rows_to({29: 1.0}) + 0.5 * previous_token(),
    "block": block,
    "heterogeneous": lambda: np.random.default_rng(0).dirichlet(np.ones(LENGTH), size=LENGTH),
}


@pytest.mark.parametrize("noise", [0.0, 0.15, 0.3])
@pytest.mark.parametrize("expected", PATTERNS)
def test_synthetic_maps_land_in_their_class(expected, noise):
    weights = (1 - noise) * MAPS[expected]() + noise / LENGTH
    assert np.allclose(weights.sum(-1), 1)
    assert classify_map(weights, SPECIAL, SEGMENTS) == expected


def test_uniform_attention_is_heterogeneous():
    assert classify_map(np.full((LENGTH, LENGTH), 1 / LENGTH), SPECIAL, SEGMENTS) == "heterogeneous"


def test_block_needs_two_segments():
    weights = block()
    assert classify_map(weights, SPECIAL, SEGMENTS) == "block"
    assert classify_map(weights, SPECIAL, None) != "block"  # one segment: no block to stay inside


def test_next_token_head_is_diagonal():
    weights = np.eye(LENGTH, k=1)
    weights[-1, -1] = 1
    assert classify_map(weights, SPECIAL, SEGMENTS) == "diagonal"


def test_statistics_match_the_per_sentence_figures(tiny_session):
    """The batched, padded torch statistics equal headstats' numpy figures sentence by sentence."""
    texts = ["The keys to the cabinet are on the table.", "A dog barked, loudly!", "Is it (really) over?"]
    encoded = encode_sorted(tiny_session, [Text(t) for t in texts])
    inputs, masks = batch_tensors(tiny_session, encoded, PunctuationIds(tiny_session.tokenizer))
    with torch.inference_mode():
        outputs = tiny_session.run(inputs, attentions=True, hidden_states=False)
        features = [head_features(attention, masks) for attention in outputs.attentions]
    for row, item in enumerate(encoded):
        text = tiny_session.tokenizer.decode(item.input_ids, skip_special_tokens=True)
        single = tiny_session.forward(tiny_session.encode(text), attentions=True)
        assert single.encoding.input_ids.tolist() == item.input_ids.tolist()
        expected = head_figures(single.attentions, single.tokens, single.encoding.special)
        for name in ("cls", "sep", "punct", "self", "prev", "next", "entropy", "distance"):
            got = np.stack([layer[name][row].numpy() for layer in features])
            np.testing.assert_allclose(got, expected[name], atol=1e-5, err_msg=name)


def test_corpus_run_streams_and_sums_to_one(tiny_session):
    sentences = [Text(f"Sentence number {i} has {'many ' * (i % 7)}words.") for i in range(50)]
    sentences.append(Text("The first one.", "And its pair."))
    steps = list(pattern_statistics(tiny_session, sentences, job=JobOptions(batch_size=8), chunk_size=20))
    assert [step.finished for step in steps].count(True) == 1 and steps[-1].finished
    assert [step.done for step in steps[:-1]] == sorted(step.done for step in steps[:-1])
    assert all(step.partial.sentences == step.done for step in steps)  # the statistics so far fill in as it streams
    result = steps[-1].result
    assert result.sentences == 51
    assert result.pattern_shares.shape == (3, 4, len(PATTERNS))
    np.testing.assert_allclose(result.pattern_shares.sum(-1), 1.0, atol=1e-6)
    for name in STATISTICS:
        assert result.statistics[name].shape == (3, 4)
    shares = result.statistics
    assert np.all(shares["cls"] >= 0) and np.all(shares["cls"] + shares["sep"] + shares["punct"] <= 1 + 1e-5)


def test_same_result_whatever_the_batching(tiny_session):
    sentences = [Text(" ".join(["word"] * (3 + i % 11)) + ".") for i in range(40)]
    one = list(pattern_statistics(tiny_session, sentences, job=JobOptions(batch_size=1), chunk_size=7))[-1].result
    many = list(pattern_statistics(tiny_session, sentences, job=JobOptions(batch_size=16), chunk_size=40))[-1].result
    for name in STATISTICS:
        np.testing.assert_allclose(one.statistics[name], many.statistics[name], atol=1e-5)
    np.testing.assert_allclose(one.pattern_shares, many.pattern_shares)


def test_truncation_is_counted(tiny_session):
    result = list(pattern_statistics(tiny_session, [Text("word " * 100), Text("short one")]))[-1].result
    assert result.truncated == 102 - 64 and result.sentences == 2


def test_cancel_stops_the_run(tiny_session):
    import threading

    cancel = threading.Event()
    sentences = (Text(f"sentence {i}") for i in range(1000))
    steps = []
    for step in pattern_statistics(tiny_session, sentences, job=JobOptions(batch_size=4, cancel=cancel), chunk_size=8):
        steps.append(step)
        cancel.set()
    assert len(steps) == 1 and not steps[-1].finished


def test_mask_changes_the_statistics(tiny_session):
    sentences = [Text("The keys to the cabinet are on the table.")] * 4
    plain = list(pattern_statistics(tiny_session, sentences))[-1].result
    masked = list(pattern_statistics(tiny_session, sentences, conditions=Conditions(tiny_session.mask("0:1"))))[-1].result
    assert masked.statistics["entropy"][0, 1] == pytest.approx(0.0)  # a zeroed head reports no attention
    assert not np.array_equal(masked.statistics["entropy"][1], plain.statistics["entropy"][1])  # later layers move


def test_a_layers_statistics_take_a_few_tensor_operations_whatever_the_batch(tiny_session):
    """On a GPU every tensor operation is a launch: a layer's statistics are a few products with weights made once a
    batch, for the first layer (26 operations a layer with a pair in the batch, 17 without; 175 when each statistic
    had its own, 54 as the columns of one table)."""
    from torch.overrides import TorchFunctionMode

    from bertscope.analyses.attention.patterns import _feature_table, _norm_share_table

    class Counted(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counted.calls += 1
            return func(*args, **(kwargs or {}))

    def operations(reduce, attention, masks) -> int:
        Counted.calls = 0
        with Counted():
            reduce(attention, masks)
        return Counted.calls

    counts = []
    for size in (2, 9):
        encoded = encode_sorted(tiny_session, [Text(f"Sentence {i} is here, with a comma.", "And a pair.") for i in range(size)])
        _, masks = batch_tensors(tiny_session, encoded, PunctuationIds(tiny_session.tokenizer))
        length = len(encoded[-1].input_ids)
        attention = torch.rand(size, 4, length, length).softmax(-1)
        first, later = operations(_feature_table, attention, masks), operations(_feature_table, attention, masks)
        counts.append((first, later, operations(_norm_share_table, attention, masks)))
    assert counts[0] == counts[1]  # nothing per sentence
    first, later, norms = counts[0]
    assert later < first and later <= 30 and norms <= 10, counts


def _one_sentence_masks(length: int):
    """[CLS] first, [SEP] last, one segment of words between them."""
    from bertscope.analyses.attention.patterns import BatchMasks

    special_keys = torch.zeros(1, length, 3)
    special_keys[0, 0, 0] = special_keys[0, -1, 1] = 1.0
    segment_words = torch.zeros(1, length, 2)
    segment_words[0, 1:-1, 0] = 1.0
    return BatchMasks(
        real=torch.ones(1, length, dtype=torch.bool),
        special_keys=special_keys,
        segment_words=segment_words,
        two_segments=torch.tensor([False]),
    )


def test_a_local_head_is_measured_over_the_keys_it_can_see():
    """ModernBERT's local heads see ±w tokens: a head that puts all it can on [CLS] has a [CLS] share of 1 over the
    queries within reach of [CLS], not (w + 1) / T; what its window hides is not attention it chose not to pay."""
    length, window = 20, 4
    attention = torch.zeros(length, length)
    for query in range(length):
        attention[query, 0 if query <= window else query] = 1.0  # [CLS] where it can, else itself
    masks = _one_sentence_masks(length)
    local = head_features(attention[None, None], masks, window=window)
    unaware = head_features(attention[None, None], masks)
    assert float(local["cls"]) == pytest.approx(1.0)
    assert float(unaware["cls"]) == pytest.approx((window + 1) / length)
    assert float(local["self"]) == pytest.approx(unaware["self"])  # what every query can see is unchanged
    # the [CLS] column is full for every query that can see it: V counts it whole
    assert float(local["V"]) > float(unaware["V"]) and float(local["V"]) >= 1.0
    # a window wider than the input changes nothing
    short, maps = _one_sentence_masks(8), torch.rand(1, 2, 8, 8).softmax(-1)
    wide, plain = head_features(maps, short, window=7), head_features(maps, short)
    assert all(torch.equal(wide[name], plain[name]) for name in plain)


def test_modernbert_local_layers_report_their_window(tmp_path):
    import bertscope
    from tests.family_models import save_tiny_family

    session = bertscope.load(str(save_tiny_family(tmp_path / "modernbert", "modernbert")), device="cpu")
    assert [session.attention_window(layer) for layer in range(session.num_layers)] == [None, 4, 4, None]


@pytest.mark.parametrize("ablation", ["zero", "uniform"])
def test_a_switched_off_head_is_of_class_off_and_left_out_of_its_layers_shares(tiny_session, ablation):
    """Issue 54: under `--mask 1:2` head 1:2 was called heterogeneous and counted in layer 1's shares. A masked head's
    map is the ablation's (zeros, or uniform), no pattern of the model's: its class is off, its shares 0."""
    from bertscope.analyses.attention.patterns_results import CLASSES
    from bertscope.model.masks import HeadMask

    sentences = [Text(f"Sentence number {i} has {'many ' * (i % 5)}words.") for i in range(12)]
    plain = list(pattern_statistics(tiny_session, sentences))[-1].result
    masked = list(pattern_statistics(tiny_session, sentences, conditions=Conditions(HeadMask.parse("1:2", 3, 4), ablation)))[-1].result
    classes = np.array(CLASSES)[masked.dominant]
    assert classes[1, 2] == "off" and (classes == "off").sum() == 1
    assert "off" not in np.array(CLASSES)[plain.dominant]
    np.testing.assert_array_equal(masked.dominant[0], plain.dominant[0])  # layer 0 runs before the mask: as it was
    np.testing.assert_array_equal(masked.pattern_shares[1, 2], 0.0)
    others = [0, 1, 3]
    np.testing.assert_allclose(masked.layer_pattern_shares()[1], masked.pattern_shares[1, others].mean(0), atol=1e-6)
    np.testing.assert_allclose(masked.layer_pattern_shares().sum(-1), 1.0, atol=1e-5)  # every layer's shares, the off head left out
    np.testing.assert_allclose(masked.layer_pattern_shares()[0], plain.layer_pattern_shares()[0], atol=1e-6)
    head = next(entry for entry in masked.as_json("tiny")["heads"] if (entry["layer"], entry["head"]) == (1, 2))
    assert head["pattern"] == "off" and set(head["pattern_shares"].values()) == {0.0}
    assert "off 1" in masked.summary()
    header, rows = masked.head_table()
    assert rows[1 * 4 + 2][header.index("pattern")] == "off"
