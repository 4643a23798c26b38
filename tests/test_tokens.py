import pytest

from bertscope.core.errors import InputError


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
