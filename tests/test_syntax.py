"""Heads that track syntax (Clark et al. 2019 §4): hand-made maps with known answers, and the streamed
batched counts against a sentence-by-sentence reference on the generated treebank."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from bertscope.analyses.attention.syntax import most_attended_other, syntax_heads, word_attention
from bertscope.analyses.attention.syntax_results import DIRECTIONS, OFFSETS, SyntaxResult, relation_name
from bertscope.analyses.conditions import JobOptions
from bertscope.base.errors import InputError
from bertscope.base.progress import outcome
from bertscope.data.corpus import Sentence
from bertscope.data.treebank import generate_treebank
from bertscope.model.model_files import bundled_model_dir
from tests.family_models import family_tokenizer


def test_word_attention_sums_a_words_columns_and_averages_its_rows():
    # tokens: [CLS] play ##ing cats [SEP] -> words 0 (play ##ing) and 1 (cats); [CLS] and [SEP] are no word
    attention = torch.tensor(
        [
            [0.2, 0.2, 0.2, 0.2, 0.2],
            [0.1, 0.1, 0.3, 0.4, 0.1],
            [0.5, 0.3, 0.0, 0.2, 0.0],
            [0.0, 0.6, 0.1, 0.1, 0.2],
            [0.2, 0.2, 0.2, 0.2, 0.2],
        ]
    )[None, None]
    word_of = torch.tensor([[-1, 0, 0, 1, -1]])
    words = word_attention(attention, word_of, 2)[0, 0]
    # row 0: mean of token rows 1 and 2; column 0: tokens 1 + 2, column 1: token 3
    expected = [[((0.1 + 0.3) + (0.3 + 0.0)) / 2, (0.4 + 0.2) / 2], [0.6 + 0.1, 0.1]]
    assert words.numpy() == pytest.approx(np.array(expected))


def test_the_most_attended_other_word_leaves_out_the_word_itself_and_absent_words():
    word_level = torch.tensor([[[0.9, 0.05, 0.05], [0.1, 0.8, 0.6], [0.2, 0.3, 0.5]]])[None]  # [1, 1, 3, 3]
    present = torch.tensor([[True, True, True]])
    assert most_attended_other(word_level, present)[0, 0].tolist() == [1, 2, 1]
    present = torch.tensor([[True, False, True]])  # word 1 cut off: word 2 falls back to word 0
    assert most_attended_other(word_level, present)[0, 0].tolist()[::2] == [2, 0]


def test_a_batch_reads_the_most_attended_words_as_the_functions_give_them():
    """The corpus loop's fused form (query words first, filled in place, `max`'s indices) gives, bit for bit, what
    `word_attention` and `most_attended_other` (`argmax`) give: ties, NaN, multi-piece words, absent words and padding
    included."""
    from bertscope.analyses.attention.syntax import left_out, predicted_words, word_pooling

    generator = torch.Generator().manual_seed(0)
    attention = torch.softmax(torch.randn(3, 4, 9, 9, generator=generator), -1)
    attention[0, 1] = 1 / 9  # a uniform head: ties everywhere
    attention[1, 3, 4] = float("nan")  # a query token's row of NaN: the first NaN wins, as `argmax` takes it
    word_of = torch.tensor([[-1, 0, 0, 1, 2, 2, 2, 3, -1], [-1, 0, 1, 1, 2, -1, -1, -1, -1], [-1, 0, 1, 2, 3, 4, 5, -1, -1]])
    pooling = word_pooling(word_of, 6)
    present = pooling[1].sum(1) > 0
    expected = most_attended_other(word_attention(attention, word_of, 6, pooling), present).transpose(1, 2)
    found = predicted_words(attention, pooling, left_out(present)[:, :, None])
    assert torch.equal(found, expected) and found.shape == (3, 6, 4)


def test_without_gaps_only_the_word_itself_is_filled_and_every_present_word_gets_the_same_answer():
    """A batch whose sentences have no word without tokens inside them fills only each word itself (`excluded` None):
    the absent words come last and hold 0, so every present query word's answer is the same, bit for bit, through
    ties (a uniform head), a head switched off (all 0) and a head whose maps are NaN."""
    from bertscope.analyses.attention.syntax import left_out, predicted_words, word_pooling

    generator = torch.Generator().manual_seed(1)
    attention = torch.softmax(torch.randn(3, 4, 9, 9, generator=generator), -1)
    attention[0, 1] = 1 / 9  # ties everywhere
    attention[1, 2] = 0.0  # a head the zero ablation switched off
    attention[2, 3] = float("nan")
    word_of = torch.tensor([[-1, 0, 0, 1, 2, 2, 2, 3, -1], [-1, 0, 1, 1, 2, -1, -1, -1, -1], [-1, 0, 1, 2, 3, 4, 5, -1, -1]])
    pooling = word_pooling(word_of, 6)
    present = pooling[1].sum(1) > 0
    expected = predicted_words(attention, pooling, left_out(present)[:, :, None])
    found = predicted_words(attention, pooling, None)
    assert torch.equal(found[present], expected[present])
    assert set(expected[1, :3, 2].tolist()) == {0, 1}  # the switched-off head: the first other word


def test_a_chunk_keeps_the_arcs_whose_words_both_reach_the_model():
    """A chunk is encoded at once; each sentence keeps, as a sentence alone would, the arcs whose two words both have
    tokens within the length limit: not a word the tokenizer drops (a zero-width space), not the words cut off, not a
    head outside the sentence; and says which sentences were cut and which have a word without tokens inside them."""
    from types import SimpleNamespace

    from bertscope.analyses.attention.syntax import _encode

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    session = SimpleNamespace(tokenizer=tokenizer, max_length=8)
    chunk = [
        Sentence(text="", words=("a", "\u200b", "cat", "sat"), heads=(3, 3, 4, 0), deprels=("det", "dep", "nsubj", "root")),
        Sentence(
            text="",
            words=tuple("the old man saw the big dog run".split()),
            heads=(3, 3, 4, 0, 7, 7, 4, 4),
            deprels=("det", "amod", "nsubj", "root", "det", "amod", "obj", "xcomp"),
        ),
        Sentence(text="", words=("dogs", "bark"), heads=(2, 9), deprels=("nsubj", "root")),  # a head past the last word
    ]
    encoded = _encode(session, chunk)
    arcs = [
        [
            (int(d), int(h), encoded.names[r])
            for d, h, r in zip(*(values[start:stop] for values in (encoded.dependents, encoded.heads, encoded.relations)))
        ]
        for start, stop in zip(encoded.arc_starts[:-1], encoded.arc_starts[1:], strict=True)
    ]
    assert arcs[0] == [(0, 2, "det"), (2, 3, "nsubj")]  # the dropped word's arc is not counted
    assert arcs[1] == [(0, 2, "det"), (1, 2, "amod"), (2, 3, "nsubj")]  # 6 words of 8 reach it: "dog" is cut off
    assert arcs[2] == [(0, 1, "nsubj")]
    assert encoded.words.tolist() == [4, 8, 2] and encoded.truncated.tolist() == [False, True, False]
    assert encoded.gaps.tolist() == [True, False, False]  # the words cut off at the end leave no gap
    second = slice(*encoded.token_starts[1:3])
    assert encoded.word_of[second].tolist() == [-1, 0, 1, 2, 3, 4, 5, -1] and encoded.lengths()[1] == 8


def test_words_joined_by_spaces_get_the_tokens_the_words_get_one_by_one(monkeypatch):
    """A WordPiece tokenizer is given a sentence's words joined by spaces, each token placed in its word by where it
    starts: the same ids and words as the words given one by one (punctuation inside a word, accents, Chinese, a
    no-break space and a space inside a word, a word the tokenizer drops, a sentence cut at the length limit)."""
    from types import SimpleNamespace

    from bertscope.analyses.attention import syntax

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    session = SimpleNamespace(tokenizer=tokenizer, max_length=12)
    words = [
        ("don't", "U.S.", "--", "e-mail"),
        ("Café", "naïve", "東京", "ÅNGSTRÖM"),
        ("a\u00a0b", "\u200b", "x", "a b", " c"),
        tuple("the old man saw the big dog run home".split()),
    ]
    joined = syntax._word_tokens(session, words)
    monkeypatch.setattr(syntax, "_splits_at_spaces", lambda tokenizer: False)
    one_by_one = syntax._word_tokens(session, words)
    assert all(np.array_equal(a, b) for a, b in zip(joined, one_by_one, strict=True))
    sizes, _, word_of = joined
    assert sizes.tolist() == [12, 8, 8, 11]  # the first cut at 12: "e-mail" keeps "e" alone
    assert word_of[20:28].tolist() == [-1, 0, 0, 2, 3, 3, 4, -1]  # "a b" one word; the zero-width space no token
    monkeypatch.undo()
    assert syntax._splits_at_spaces(tokenizer)
    assert not syntax._splits_at_spaces(family_tokenizer("modernbert"))  # byte-level BPE: its words one by one


# "the cat sat on the mat ." with its UD tree; every word is one WordPiece of the bundled vocabulary
WORDS = ("the", "cat", "sat", "on", "the", "mat", ".")
HEADS = (2, 3, 0, 6, 6, 3, 3)
RELATIONS = ("det", "nsubj", "root", "case", "det", "obl", "punct")


class MapSession:
    """A stand-in model whose heads attend by fixed rules over tokens, so the answers are known by hand.

    Head 0 looks at the next token; head 1 keeps 0.6 on itself and 0.4 on the previous word,
    the first word's previous being the last (so it is right only if the word itself is left
    out); heads repeat over two layers.
    """

    num_layers, num_heads, max_length, device = 2, 2, 64, torch.device("cpu")

    def __init__(self):
        self.tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())

    def gate_tensor(self, mask):
        return None

    def run(self, inputs, *, on_attention, **options):
        real = inputs["attention_mask"]
        batch, length = real.shape
        attention = torch.zeros(batch, self.num_heads, length, length)
        for row in range(batch):
            size = int(real[row].sum())
            for token in range(size):
                attention[row, 0, token, min(token + 1, size - 1)] = 1.0
                attention[row, 1, token, token] += 0.6
                previous = token - 1 if token > 1 else size - 2  # [CLS] and [SEP] at 0 and size - 1
                attention[row, 1, token, previous] += 0.4
        for layer in range(self.num_layers):
            on_attention(layer, attention)


def sentence(location="s1") -> Sentence:
    return Sentence(text=" ".join(WORDS), location=location, words=WORDS, heads=HEADS, deprels=RELATIONS)


def test_hand_made_heads_get_the_answers_worked_out_by_hand():
    assert all(len(MapSession().tokenizer.tokenize(word)) == 1 for word in WORDS)
    result = outcome(syntax_heads(MapSession(), [sentence("a"), sentence("b")], job=JobOptions(batch_size=1)))
    assert result.sentences == 2 and result.words == 14
    assert set(result.relations) == {"det", "nsubj", "case", "obl", "punct"}  # root arcs are not counted
    assert int(result.counts[result.index("det"), 0]) == 4

    def accuracy(relation, direction):
        return result.accuracy(relation, direction)[0].tolist()  # layer 0: [head 0 (next), head 1 (previous)]

    # dependent -> head. Next word: the->cat and the->mat right, cat->sat right, on->the (not mat), mat->. (not sat)
    assert accuracy("det", "dependent_to_head") == [1.0, 0.0]
    assert accuracy("nsubj", "dependent_to_head") == [1.0, 0.0]
    assert accuracy("case", "dependent_to_head") == [0.0, 0.0]
    assert accuracy("obl", "dependent_to_head") == [0.0, 0.0]  # previous word: the->. (first word), the->on: det 0
    # head -> dependent. Previous word (itself left out): cat->the and mat->the right; sat->cat is nsubj
    assert accuracy("det", "head_to_dependent") == [0.0, 1.0]
    assert accuracy("nsubj", "head_to_dependent") == [0.0, 1.0]
    assert accuracy("case", "head_to_dependent") == [0.0, 0.0]  # mat->the, not on
    assert result.accuracy("det", "head_to_dependent")[1].tolist() == [0.0, 1.0]  # the second layer counts alike
    assert result.best("nsubj", "head_to_dependent") == (0, 1, 1.0)

    # fixed offsets: det +1 (the cat, the mat); case +2 (on _ mat); obl -3 (sat _ _ mat); punct -4: no offset reaches it
    assert result.baseline("det", "dependent_to_head") == (1, 1.0)
    assert result.baseline("det", "head_to_dependent") == (-1, 1.0)
    assert result.baseline("case", "dependent_to_head") == (2, 1.0)
    assert result.baseline("obl", "dependent_to_head") == (-3, 1.0)
    assert result.baseline("obl", "head_to_dependent") == (3, 1.0)
    assert result.baseline("punct", "dependent_to_head")[1] == 0.0
    assert OFFSETS == (-3, -2, -1, 1, 2, 3)


def test_rows_flag_rare_relations_report_absent_ones_and_take_clarks_names():
    result = outcome(syntax_heads(MapSession(), [sentence()]))
    rows = result.rows(["dobj", "det", "nsubj"], min_count=2)
    assert [(row["relation"], row["direction"]) for row in rows[:2]] == [("obj", d) for d in DIRECTIONS]
    assert rows[0]["count"] == 0 and rows[0]["few"] and rows[0]["heads"] == []
    det = rows[2]
    assert det["count"] == 2 and not det["few"] and det["best"]["accuracy"] == 1.0
    assert np.array(det["heads"]).shape == (2, 2)
    assert rows[4]["relation"] == "nsubj" and rows[4]["few"]
    assert relation_name("poss") == "nmod:poss"


def test_a_corpus_without_trees_is_refused():
    with pytest.raises(InputError, match="no dependency heads"):
        outcome(syntax_heads(MapSession(), [Sentence(text="just text", location="x.txt:1")]))


def reference_counts(session, sentences) -> dict[tuple[str, int], np.ndarray]:
    """Sentence by sentence, with loops: the tiny model's own attentions, word level by hand, argmax over other words."""
    hits: dict[tuple[str, int], np.ndarray] = {}
    tokenizer = session.tokenizer
    for item in sentences:
        pieces = [tokenizer.tokenize(word) for word in item.words]
        ids = [tokenizer.cls_token_id] + [i for piece in pieces for i in tokenizer.convert_tokens_to_ids(piece)] + [tokenizer.sep_token_id]
        with torch.inference_mode():
            out = session.run(
                {
                    "input_ids": torch.tensor([ids]),
                    "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
                    "token_type_ids": torch.zeros(1, len(ids), dtype=torch.long),
                },
                attentions=True,
                encoder_only=True,
            )
        attention = torch.stack(out.attentions)[:, 0].numpy()  # [L, H, T, T]
        spans, start = [], 1
        for piece in pieces:
            spans.append(range(start, start + len(piece)))
            start += len(piece)
        n = len(item.words)
        level = np.zeros(attention.shape[:2] + (n, n))
        for i in range(n):
            for j in range(n):
                level[:, :, i, j] = np.mean([attention[:, :, r, list(spans[j])].sum(-1) for r in spans[i]], axis=0)
        for dependent, (head, relation) in enumerate(zip(item.heads, item.deprels)):
            if head == 0:
                continue
            head -= 1
            for direction, (query, answer) in enumerate(((dependent, head), (head, dependent))):
                row = level[:, :, query].copy()
                row[:, :, query] = -np.inf
                tally = hits.setdefault((relation, direction), np.zeros(attention.shape[:2], dtype=np.int64))
                tally += row.argmax(-1) == answer
    return hits


def test_streamed_batches_equal_a_sentence_by_sentence_reference_on_the_generated_treebank(tiny_session):
    treebank = generate_treebank(40, seed=3)
    result = outcome(syntax_heads(tiny_session, treebank, job=JobOptions(batch_size=7), chunk_size=16))
    reference = reference_counts(tiny_session, treebank)
    assert result.sentences == 40 and result.truncated == 0
    assert set(result.relations) == {relation for relation, _ in reference}
    for (relation, direction), hits in reference.items():
        assert np.array_equal(result.correct[result.index(relation), direction], hits), (relation, direction)
    arcs = sum(sum(1 for head in item.heads if head > 0) for item in treebank)
    assert int(result.counts[:, 0].sum()) == arcs


def test_shards_merge_into_the_whole(tiny_session):
    treebank = generate_treebank(30, seed=5)
    whole = outcome(syntax_heads(tiny_session, treebank))
    merged = outcome(syntax_heads(tiny_session, treebank[:11])).merged(outcome(syntax_heads(tiny_session, treebank[11:])))
    assert merged.sentences == whole.sentences and merged.words == whole.words
    for relation in whole.relations:
        for name in ("counts", "correct", "baseline_correct"):
            assert np.array_equal(getattr(merged, name)[merged.index(relation)], getattr(whole, name)[whole.index(relation)])
    assert isinstance(merged, SyntaxResult)


def test_the_public_api_reads_the_sample_treebank_by_default(tiny_session):
    import bertscope

    result = bertscope.syntax(tiny_session, limit=12)
    assert result.sentences == 12 and "det" in result.relations
    assert result.correct.dtype == np.int64 and result.correct.shape[2:] == (3, 4)
    with pytest.raises(InputError, match="unknown dependency relation"):
        bertscope.api.check_relations(["det", "subj"])
