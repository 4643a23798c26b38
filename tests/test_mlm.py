"""Fill-in-the-blank and cloze scores on a tiny random BertForMaskedLM, checked against the model itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope.analyses.mlm import cloze_scores, fill, read_cloze, sample_cloze
from bertscope.base.errors import InputError, NoMLMHeadError
from bertscope.data.corpus import ReadReport

TEXT = "Dante was born in [MASK] and died in [MASK]."


@pytest.fixture(scope="module")
def reference(tiny_mlm_dir):
    """The same weights loaded directly by transformers, as an outside check."""
    from transformers import AutoTokenizer, BertForMaskedLM

    model = BertForMaskedLM.from_pretrained(tiny_mlm_dir).eval()
    return model, AutoTokenizer.from_pretrained(tiny_mlm_dir)


def direct_probabilities(reference, text: str, heads_off: dict[int, list[int]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    model, tokenizer = reference
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        output = model(**inputs, output_hidden_states=True)
    positions = (inputs["input_ids"][0] == tokenizer.mask_token_id).nonzero()[:, 0]
    return torch.softmax(output.logits[0, positions].double(), -1).numpy(), positions.numpy()


def test_fill_equals_a_direct_softmax_of_the_models_logits(tiny_mlm_session, reference):
    result = fill(tiny_mlm_session, TEXT, top=10)
    probabilities, positions = direct_probabilities(reference, TEXT)
    assert [blank.position for blank in result.blanks] == positions.tolist()
    _, tokenizer = reference
    for blank, expected in zip(result.blanks, probabilities):
        best = np.argsort(-expected)[:10]
        assert list(blank.predictions.tokens) == tokenizer.convert_ids_to_tokens(best.tolist())
        np.testing.assert_allclose(blank.predictions.probabilities, expected[best], rtol=1e-4, atol=1e-7)


def test_each_layer_is_the_head_on_that_hidden_state_and_the_last_is_the_output(tiny_mlm_session, reference):
    model, tokenizer = reference
    result = fill(tiny_mlm_session, TEXT, top=5)
    inputs = tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**inputs, output_hidden_states=True).hidden_states
        for blank in result.blanks:
            assert len(blank.layers) == tiny_mlm_session.num_layers + 1
            for layer, guesses in enumerate(blank.layers):
                expected = torch.softmax(model.cls(hidden[layer][0, blank.position]).double(), -1).numpy()
                best = np.argsort(-expected)[:5]
                assert list(guesses.tokens) == tokenizer.convert_ids_to_tokens(best.tolist())
                np.testing.assert_allclose(guesses.probabilities, expected[best], rtol=1e-4, atol=1e-7)
            assert blank.layers[-1].tokens == blank.predictions.tokens


def test_a_head_mask_changes_the_guesses_and_keeps_the_unmasked_ones(tiny_mlm_session):
    plain = fill(tiny_mlm_session, TEXT, top=5)
    masked = fill(tiny_mlm_session, TEXT, top=5, mask=tiny_mlm_session.mask("1:*,2:*"))
    for before, after in zip(plain.blanks, masked.blanks):
        assert before.unmasked is None
        assert after.unmasked == before.predictions
        assert after.predictions.probabilities != before.predictions.probabilities
        assert after.layers[1] == before.layers[1]  # layer 0's output is upstream of the mask
    payload = masked.as_json()
    assert payload["mask"] == "1:*,2:*" and "unmasked_predictions" in payload["masks"][0]
    assert set(payload["masks"][0]) >= {"position", "predictions", "layers"}
    assert payload["masks"][0]["layers"][0]["layer"] == 0


def test_fill_refuses_text_without_a_mask_and_models_without_a_head(tiny_mlm_session, tiny_session):
    with pytest.raises(InputError, match=r"no \[MASK\]"):
        fill(tiny_mlm_session, "Dante was born in Florence.")
    with pytest.raises(NoMLMHeadError, match="no masked-LM head.*MLM head"):
        fill(tiny_session, TEXT)


def test_cloze_precision_counts_the_gold_rank_at_every_layer(tiny_mlm_session, reference, tmp_path):
    model, tokenizer = reference
    lines = ["Dante was born in [MASK].\tflorence", "The capital of France is [MASK].\tparis"]
    # Make one query certainly right: its gold answer is what the model guesses.
    guess = fill(tiny_mlm_session, "Bees make [MASK].", top=1, layers=False).blanks[0].predictions.tokens[0]
    lines += [f"Bees make [MASK].\t{guess}", "No blank here.\tx", "Two [MASK] [MASK].\tx", "New [MASK].\tnew york"]
    path = tmp_path / "cloze.tsv"
    path.write_text("\n".join(lines) + "\n")
    report = ReadReport()
    queries = read_cloze(path, report)
    assert len(queries) == 4 and len(report.skipped) == 2
    *_, last = cloze_scores(tiny_mlm_session, queries, report=report, batch_size=2)
    result = last.result
    assert result.queries == 3 and any("not one token" in reason for _, reason in report.skipped)
    ranks = []
    with torch.no_grad():
        for query in queries[:3]:
            inputs = tokenizer(query.text, return_tensors="pt")
            position = int((inputs["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0])
            hidden = model(**inputs, output_hidden_states=True).hidden_states
            gold = tokenizer.convert_tokens_to_ids(query.answer)
            logits = torch.stack([model.cls(h[0, position]) for h in hidden])
            ranks.append((logits > logits[:, gold : gold + 1]).sum(-1).numpy())
    ranks = np.array(ranks)  # [queries, L+1]
    np.testing.assert_allclose(result.precision[1], (ranks < 1).mean(0))
    np.testing.assert_allclose(result.precision[10], (ranks < 10).mean(0))
    assert result.answers[2]["rank"] == 0 and result.precision[1][-1] >= 1 / 3


def test_the_shipped_cloze_file_reads_whole():
    report = ReadReport()
    assert len(read_cloze(sample_cloze(), report)) == 50 and not report.skipped


def test_lama_json_lines(tmp_path):
    path = tmp_path / "trex.jsonl"
    path.write_text('{"masked_sentences": ["Rome is the capital of [MASK] ."], "obj_label": "Italy"}\n[1]\n')
    report = ReadReport()
    (query,) = read_cloze(path, report)
    assert query.answer == "Italy" and query.location.endswith(":1") and report.skipped[0][0].endswith(":2")


def test_a_query_whose_mask_is_cut_off_is_skipped_not_fatal(tiny_mlm_session, tmp_path):
    path = tmp_path / "long.tsv"
    path.write_text("word " * 80 + "[MASK].\tparis\nParis is in [MASK].\tfrance\n")
    report = ReadReport()
    *_, last = cloze_scores(tiny_mlm_session, read_cloze(path, report), report=report)
    assert last.result.queries == 1 and "past the model's maximum" in report.skipped[0][1]
