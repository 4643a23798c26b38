"""Per-head figures on attention maps whose answers are known."""

import numpy as np
import pytest

from bertscope.analyses.attention.headstats import FIGURES, figure_range, head_figures, is_punctuation, punctuation_ids
from bertscope.model.effects import layer_cosines

TOKENS = ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
SPECIAL = np.array([1, 0, 0, 0, 0, 1], dtype=bool)


def maps(*patterns: np.ndarray) -> np.ndarray:
    return np.stack(patterns)[None]  # [1, H, T, T]


def test_known_patterns():
    n = len(TOKENS)
    to_cls = np.zeros((n, n))
    to_cls[:, 0] = 1
    to_sep = np.zeros((n, n))
    to_sep[:, -1] = 1
    diagonal = np.eye(n)
    previous = np.eye(n, k=-1)
    previous[0, 0] = 1
    uniform = np.full((n, n), 1 / n)
    figures = head_figures(maps(to_cls, to_sep, diagonal, previous, uniform), TOKENS, SPECIAL)
    assert set(figures) == set(FIGURES)
    assert figures["cls"][0].tolist() == pytest.approx([1, 0, 1 / n, 2 / n, 1 / n])
    assert figures["sep"][0].tolist() == pytest.approx([0, 1, 1 / n, 0, 1 / n])
    assert figures["self"][0].tolist() == pytest.approx([1 / n, 1 / n, 1, 1 / n, 1 / n])
    assert figures["prev"][0, 3] == pytest.approx(1.0)
    assert figures["next"][0, 3] == pytest.approx(0.0)
    assert figures["punct"][0, 4] == pytest.approx(1 / n)
    assert figures["entropy"][0, :4] == pytest.approx([0, 0, 0, 0], abs=1e-6)
    assert figures["entropy"][0, 4] == pytest.approx(np.log(n))
    assert figures["distance"][0, 2] == pytest.approx(0.0)
    assert figure_range("entropy", n) == (0.0, pytest.approx(np.log(n)))


def test_punctuation():
    assert is_punctuation(".") and is_punctuation("##,") and is_punctuation("?!")
    assert not is_punctuation("cat") and not is_punctuation("3.5") and not is_punctuation("")


def test_punctuation_by_token_id():
    """Corpus jobs look punctuation up by id, a batch at a time: the same answer as the token's, for every id of the
    vocabulary whatever order the ids come in; one table a tokenizer, which it does not keep alive."""
    import copy
    import gc
    import weakref

    from transformers import AutoTokenizer

    from bertscope.model.model_files import bundled_model_dir

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    table = punctuation_ids(tokenizer)
    ids = tokenizer(["Well, (it is) -- isn't it?", "No."])["input_ids"]
    assert table(np.asarray(ids[0])).tolist() == [is_punctuation(token) for token in tokenizer.convert_ids_to_tokens(ids[0])]
    everything = np.random.default_rng(0).permutation(len(tokenizer))
    expected = [is_punctuation(token) for token in tokenizer.convert_ids_to_tokens(everything.tolist())]
    assert table(everything.reshape(-1, 2)).ravel().tolist() == expected
    assert 100 < sum(expected) < 1000  # MiniLM's vocabulary has a few hundred punctuation tokens
    assert punctuation_ids(tokenizer) is table
    assert punctuation_ids(copy.deepcopy(tokenizer)) is not table  # the tokenizer is left as it was: it still copies
    gone = weakref.ref(tokenizer)
    del tokenizer
    gc.collect()
    assert gone() is None


def test_layer_cosines():
    rng = np.random.default_rng(0)
    plain = rng.normal(size=(3, 5, 8))
    assert layer_cosines(plain, plain) == pytest.approx(np.ones(3))
    assert layer_cosines(-plain, plain) == pytest.approx(-np.ones(3))
    moved = plain.copy()
    moved[2] = rng.normal(size=(5, 8))
    cos = layer_cosines(moved, plain)
    assert cos[:2] == pytest.approx([1, 1]) and cos[2] < 0.9
