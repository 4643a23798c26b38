"""Layer features for probing: pooling against a direct forward, and the on-disk cache."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from bertscope.analyses.probing.features import FeatureOptions, extract_features, finish_writes
from bertscope.base.errors import InputError
from bertscope.data.cache import default_cache_dir
from bertscope.data.corpus import Sentence

WORDS = [("Unbelievably", ",", "the", "keys", "were", "found", "."), ("A", "dog", "barked", ".")]
SENTENCES = [Sentence(text=" ".join(words), words=words) for words in WORDS]


def features(session, options, **kwargs):
    return list(extract_features(session, SENTENCES, options, **kwargs))[-1].result


def assert_float16_of(actual, expected):
    """Features are stored in float16 (where it rounds away nothing that varies): equal to the float32 states to its
    precision (2^-11); stored in float32, to float32's."""
    if actual.dtype == np.float32:
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
        return
    assert actual.dtype == np.float16
    np.testing.assert_allclose(actual.astype(np.float32), expected, rtol=1e-3, atol=1e-4)


def test_word_features_pool_the_sub_words(tiny_session):
    first = features(tiny_session, FeatureOptions(level="word"), cache_dir=False)
    mean = features(tiny_session, FeatureOptions(level="word", word_pooling="mean"), cache_dir=False)
    assert first.X.shape == (11, tiny_session.num_layers + 1, tiny_session.hidden_size)
    assert first.sentence_index.tolist() == [0] * 7 + [1] * 4 and first.word_index.tolist() == [*range(7), *range(4)]
    result = tiny_session.forward(tiny_session.encode(SENTENCES[0].text))
    pieces = [i for i, w in enumerate(result.encoding.word_ids) if w == 0]  # "unbelievably" is several pieces
    assert len(pieces) > 1
    assert_float16_of(first.X[0], result.hidden_states[:, pieces[0]])
    assert_float16_of(mean.X[0], result.hidden_states[:, pieces].mean(1))
    assert_float16_of(first.X[3], result.hidden_states[:, result.encoding.tokens.index("keys")])


def test_sentence_features(tiny_session):
    cls = features(tiny_session, FeatureOptions(level="sentence"), cache_dir=False)
    mean = features(tiny_session, FeatureOptions(level="sentence", sentence_pooling="mean"), cache_dir=False)
    result = tiny_session.forward(SENTENCES[1].text)
    row = cls.sentence_index.tolist().index(1)
    assert_float16_of(cls.X[row], result.hidden_states[:, 0])
    words = ~result.encoding.special
    assert_float16_of(mean.X[row], result.hidden_states[:, words].mean(1))


def test_cache_hits_and_a_damaged_entry_is_recomputed(tiny_session, tmp_path):
    options = FeatureOptions(level="word")
    fresh = features(tiny_session, options, cache_dir=tmp_path)
    assert not fresh.from_cache
    finish_writes()  # entries are written in the background
    (entry,) = tmp_path.glob("features-*.npy")
    again = features(tiny_session, options, cache_dir=tmp_path)
    assert again.from_cache
    np.testing.assert_array_equal(again.X, fresh.X)
    damaged = tmp_path / "damaged"
    damaged.write_bytes(entry.read_bytes()[:100])  # cut short (a new file: `fresh` still maps the old one)
    damaged.replace(entry)
    recomputed = features(tiny_session, options, cache_dir=tmp_path)
    assert not recomputed.from_cache
    np.testing.assert_allclose(recomputed.X, fresh.X)
    assert features(tiny_session, options, cache_dir=tmp_path).from_cache  # and written again whole


def test_cache_key_follows_options_data_and_mask(tiny_session, tmp_path):
    features(tiny_session, FeatureOptions(level="word"), cache_dir=tmp_path)
    masked = features(tiny_session, FeatureOptions(level="word", mask="0:*"), cache_dir=tmp_path)
    plain = features(tiny_session, FeatureOptions(level="word"), cache_dir=tmp_path)
    assert not masked.from_cache and plain.from_cache
    assert not np.allclose(masked.X[:, 1], plain.X[:, 1])
    np.testing.assert_allclose(masked.X[:, 0], plain.X[:, 0])  # embeddings untouched by a mask
    finish_writes()
    assert len(list(tmp_path.glob("features-*.npy"))) == len(list(tmp_path.glob("features-*.npz"))) == 2


def test_cache_dir_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTSCOPE_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("BERTSCOPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "bertscope"


def test_word_level_needs_words(tiny_session):
    with pytest.raises(InputError, match="CoNLL-U"):
        list(extract_features(tiny_session, [Sentence(text="no words")], FeatureOptions(level="word"), cache_dir=False))


def test_truncated_words_are_counted(tiny_session):
    words = tuple(["word"] * 80)
    result = list(
        extract_features(tiny_session, [Sentence(text=" ".join(words), words=words)], FeatureOptions(level="word"), cache_dir=False)
    )[-1].result
    assert len(result.X) == 62 and result.truncated_words == 18


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_a_word_without_tokens_has_no_row_and_the_others_keep_their_word(tiny_session, pooling):
    # The uncased WordPiece tokenizer drops a zero-width space: that word gets no tokens.
    words = ("The", "\u200b", "unbelievable", "cat", ".")
    with_gap = Sentence(text=" ".join(words), words=words)
    without = Sentence(text="The unbelievable cat .", words=("The", "unbelievable", "cat", "."))
    options = FeatureOptions(level="word", word_pooling=pooling)
    gap, plain = (list(extract_features(tiny_session, [s], options, cache_dir=False))[-1].result for s in (with_gap, without))
    assert gap.word_index.tolist() == [0, 2, 3, 4] and gap.truncated_words == 0
    np.testing.assert_allclose(gap.X.astype(np.float32), plain.X, rtol=1e-3, atol=1e-4)


def test_a_cached_entry_keeps_the_rows_of_words_without_tokens(tiny_session, tmp_path):
    words = ("The", "\u200b", "cat", ".")  # the zero-width space gets no row: the entry is compacted
    sentences = [Sentence(text=" ".join(words), words=words), *SENTENCES]
    options = FeatureOptions(level="word")
    fresh = list(extract_features(tiny_session, sentences, options, cache_dir=tmp_path))[-1].result
    finish_writes()
    cached = list(extract_features(tiny_session, sentences, options, cache_dir=tmp_path))[-1].result
    assert cached.from_cache and cached.word_index.tolist() == fresh.word_index.tolist() == [0, 2, 3, *range(7), *range(4)]
    np.testing.assert_array_equal(cached.X, fresh.X)
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".npy", ".npz"]  # no temporary file left


def test_a_cancelled_extraction_leaves_no_file(tiny_session, tmp_path):
    cancel = threading.Event()
    steps = extract_features(tiny_session, SENTENCES, FeatureOptions(level="word"), cache_dir=tmp_path, batch_size=1, cancel=cancel)
    next(steps)
    cancel.set()
    assert [step.result for step in steps] == []
    finish_writes()
    assert list(tmp_path.iterdir()) == []


def test_a_cache_that_cannot_be_written_only_costs_time(tiny_session, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    first = features(tiny_session, FeatureOptions(level="word"), cache_dir=blocked)
    finish_writes()
    again = features(tiny_session, FeatureOptions(level="word"), cache_dir=blocked)
    assert not first.from_cache and not again.from_cache
    np.testing.assert_array_equal(first.X, again.X)


def changed_last_layer(tiny_bert_dir, directory, change):
    """A session on a copy of the tiny model whose last LayerNorm `change` altered."""
    import shutil

    from transformers import AutoModel

    from bertscope.model.session import Session

    model = AutoModel.from_pretrained(tiny_bert_dir)
    change(model.encoder.layer[-1].output.LayerNorm)
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tiny_bert_dir / name).exists():
            shutil.copy(tiny_bert_dir / name, directory / name)
    return Session.open(str(directory), device="cpu")


def test_hidden_states_beyond_float16_are_kept_in_float32(tiny_bert_dir, tmp_path):
    """A model whose states overflow float16 gets float32 features, fresh and from the cache."""

    def scale(norm):
        norm.weight.data *= 1e5  # the last layer's states reach ~1e5

    session = changed_last_layer(tiny_bert_dir, tmp_path / "large", scale)
    fresh = features(session, FeatureOptions(level="word"), cache_dir=tmp_path / "cache")
    assert fresh.X.dtype == np.float32 and np.abs(fresh.X[:, -1]).max() > np.finfo(np.float16).max
    result = session.forward(session.encode(SENTENCES[1].text))
    np.testing.assert_allclose(fresh.X[7, :, :], result.hidden_states[:, 1], rtol=1e-5, atol=1e-3)
    finish_writes()
    cached = features(session, FeatureOptions(level="word"), cache_dir=tmp_path / "cache")
    assert cached.from_cache and cached.X.dtype == np.float32
    np.testing.assert_array_equal(cached.X, fresh.X)


def test_features_that_vary_little_around_a_large_value_are_kept_in_float32(tiny_bert_dir, tmp_path):
    """Float16's steps near 200 are 0.125: a spread of a few tenths there would be rounded to a few steps (the case
    of an anisotropic model's [CLS], whose probe accuracy then moved with the rounding). Such features are float32,
    exactly the model's; ordinary ones stay float16."""

    def shift(norm):
        norm.bias.data += 200.0  # every feature of the last layer lies near 200, spread as before

    session = changed_last_layer(tiny_bert_dir, tmp_path / "shifted", shift)
    shifted = features(session, FeatureOptions(level="word"), cache_dir=False)
    assert shifted.X.dtype == np.float32
    result = session.forward(session.encode(SENTENCES[1].text))
    np.testing.assert_allclose(shifted.X[7], result.hidden_states[:, 1], rtol=1e-6, atol=1e-5)
    assert (
        features(session.__class__.open(str(tiny_bert_dir), device="cpu"), FeatureOptions(level="word"), cache_dir=False).X.dtype
        == np.float16
    )
