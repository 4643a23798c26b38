import pytest

import bertscope
from bertscope.base.errors import InputError
from tests.family_models import FAMILIES, save_tiny_family


def test_word_alignment_groups_subwords(tiny_session):
    encoding = tiny_session.encode("Unbelievably, transformers tokenize words.")
    assert encoding.tokens[0] == "[CLS]" and encoding.tokens[-1] == "[SEP]"
    assert encoding.special.tolist() == [t in ("[CLS]", "[SEP]") for t in encoding.tokens]
    assert encoding.word_ids[0] is None and encoding.word_ids[-1] is None
    words = [w for w in encoding.word_ids if w is not None]
    assert words == sorted(words)  # word ids rise along the sentence
    pieces = [t for t, w in zip(encoding.tokens, encoding.word_ids) if w == 0]
    assert len(pieces) > 1 and pieces[1].startswith("##")  # "unbelievably" is several word pieces
    assert "".join(p.removeprefix("##") for p in pieces) == "unbelievably"


def test_pair_has_segments(tiny_session):
    encoding = tiny_session.encode("The cat sat.", "It was tired.")
    assert encoding.tokens.count("[SEP]") == 2
    first_sep = encoding.tokens.index("[SEP]")
    assert set(encoding.token_type_ids[: first_sep + 1]) == {0}
    assert set(encoding.token_type_ids[first_sep + 1 :]) == {1}
    assert encoding.segment_ids[1] == 0 and encoding.segment_ids[first_sep + 1] == 1
    assert encoding.pair == "It was tired."


def test_truncation_counts_what_was_cut(tiny_session):
    encoding = tiny_session.encode("word " * 100)  # 100 words + 2 specials, maximum 64
    assert len(encoding) == tiny_session.max_length == 64
    assert encoding.truncated == 102 - 64
    assert encoding.tokens[-1] == "[SEP]"


def test_short_input_is_not_truncated(tiny_session):
    assert tiny_session.encode("a short one").truncated == 0


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_text_is_refused(tiny_session, text):
    with pytest.raises(InputError, match="empty"):
        tiny_session.encode(text)


def test_empty_pair_is_refused(tiny_session):
    with pytest.raises(InputError, match="pair text is empty"):
        tiny_session.encode("fine", " ")


@pytest.fixture(scope="module", params=FAMILIES)
def family_session(request, tmp_path_factory):
    directory = save_tiny_family(tmp_path_factory.mktemp(f"tokens-{request.param}"), request.param, seed=5)
    return bertscope.load(str(directory), device="cpu")


def test_a_corpus_tokenised_together_is_each_sentence_tokenised_alone(family_session):
    """What a corpus job tokenises in one call (single sentences, pairs, one too long) is each sentence through the
    tokenizer alone, on every family's tokenizer."""
    session = family_session
    texts = ["The cat sat.", "word " * 600, "Dogs bark at night, loudly.", "It rained."]
    pairs = [None, None, "They were hungry.", None]
    together = session.encode_many(texts, pairs)
    for text, pair, encoding in zip(texts, pairs, together, strict=True):
        alone = session.tokenizer(text, pair, truncation="longest_first", max_length=session.max_length, return_special_tokens_mask=True)
        assert encoding.tokens == tuple(alone.tokens()) and encoding.word_ids == tuple(alone.word_ids())
        assert encoding.segment_ids == tuple(alone.sequence_ids())
        assert encoding.input_ids.tolist() == alone["input_ids"]
        assert encoding.special.tolist() == [bool(flag) for flag in alone["special_tokens_mask"]]
        assert encoding.pair == pair and encoding.text == text
    assert together[1].truncated == len(session.tokenizer(texts[1])["input_ids"]) - session.max_length > 0
    assert [encoding.truncated for encoding in together[:1] + together[2:]] == [0, 0, 0]
