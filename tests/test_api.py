"""The public Python API (`import bertscope`): what a notebook user calls, on tiny random models."""

from __future__ import annotations

import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import bertscope
from bertscope.core.analyses.patterns import pattern_statistics
from bertscope.core.data.corpus import Sentence

TEXTS = ["The cat sat on the mat.", "Dogs bark at night, loudly.", "A bird sang."]


def test_importing_bertscope_loads_no_torch():
    code = "import sys, bertscope; bertscope.load; bertscope.patterns; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_load_and_forward_give_plain_arrays(tiny_bert_dir):
    model = bertscope.load(str(tiny_bert_dir), device="cpu")
    out = model.forward("The cat sat.", mask="0:1")
    length = len(out.tokens)
    assert out.tokens[0] == "[CLS]" and out.tokens[-1] == "[SEP]"
    assert out.attentions.shape == (model.num_layers, model.num_heads, length, length)
    assert out.hidden_states.shape == (model.num_layers + 1, length, model.hidden_size)
    assert isinstance(out.attentions, np.ndarray)
    assert not out.attentions[0, 1].any()  # the masked head (zero ablation) has no weights
    np.testing.assert_allclose(out.attentions[0, 0].sum(-1), 1.0, atol=1e-5)


def test_patterns_equals_the_core_generator(tiny_session):
    result = bertscope.patterns(tiny_session, TEXTS, mask="1:0")
    sentences = [Sentence(text=text) for text in TEXTS]
    core = list(pattern_statistics(tiny_session, sentences, mask=tiny_session.mask("1:0")))[-1].result
    assert result.sentences == 3
    for name, values in core.statistics.items():
        np.testing.assert_allclose(result.statistics[name], values)


def test_progress_is_reported_and_cancel_raises(tiny_session):
    seen = []
    bertscope.patterns(tiny_session, TEXTS, progress=seen.append)
    assert seen and seen[-1].result is not None
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(bertscope.Cancelled):
        bertscope.patterns(tiny_session, TEXTS, cancel=cancel)


def test_a_corpus_file_and_its_skipped_lines_become_a_note(tiny_session, tmp_path):
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("tr\t0\tThe cat sat.\nnot a senteval line\ntr\t1\tA dog barked twice.\n", encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = bertscope.patterns(tiny_session, data=corpus, data_format="senteval")
    assert result.sentences == 2
    notes = [str(w.message) for w in caught if issubclass(w.category, bertscope.BertscopeNote)]
    assert len(notes) == 1 and "skipped 1" in notes[0]


def test_bad_input_raises_one_bertscope_error(tiny_session):
    with pytest.raises(bertscope.BertscopeError, match="empty"):
        bertscope.patterns(tiny_session, "   ")
    with pytest.raises(bertscope.BertscopeError, match="either"):
        bertscope.patterns(tiny_session, TEXTS, data="x.txt")
    with pytest.raises(bertscope.BertscopeError, match="out of range"):
        bertscope.patterns(tiny_session, TEXTS, mask="9:0")


def senteval_file(directory):
    """A small SentEval file: the label is whether the sentence is about cats or dogs."""
    lines = [f"{split}\t{label}\tThe {animal} {verb} {place}."
             for split, count in (("tr", 6), ("va", 2), ("te", 2))
             for label, animal in (("cat", "cat"), ("dog", "dog"))
             for verb, place in zip(("sat", "slept", "ran", "ate", "hid", "sang")[:count], ("here", "there", "home", "in", "out", "up"))]
    path = directory / "animals.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_probe_importance_and_pruning(tiny_session, tmp_path):
    report = bertscope.probe(tiny_session, "animals", data=senteval_file(tmp_path), control=False, random_baseline=False,
                             cache_dir=False)
    assert [row["layer"] for row in report.layers] == list(range(tiny_session.num_layers + 1))
    ranking = bertscope.importance(tiny_session, "preserve", TEXTS)
    assert ranking.importance.shape == (tiny_session.num_layers, tiny_session.num_heads)
    curve = bertscope.pruning_curve(tiny_session, "preserve", TEXTS, step=0.5)
    assert curve.points[0].fraction == 0.0
    pruning = bertscope.prune(tiny_session, "preserve", TEXTS, fraction=0.25, output=tmp_path / "pruned")
    assert len(pruning.mask) == round(0.25 * tiny_session.num_layers * tiny_session.num_heads)
    assert pruning.written is not None and (tmp_path / "pruned" / "config.json").is_file()
    assert pruning.written.max_abs_difference < 1e-4


def test_fill_and_cloze_with_an_mlm_head(tiny_mlm_session, tiny_session, tmp_path):
    filled = bertscope.fill(tiny_mlm_session, "The capital of France is [MASK].", top=3)
    assert len(filled.blanks) == 1 and len(filled.blanks[0].predictions.tokens) == 3
    cloze_file = tmp_path / "cloze.tsv"
    cloze_file.write_text("The cat sat on the [MASK].\tmat\nA dog [MASK] loudly.\tbarked\n", encoding="utf-8")
    scores = bertscope.cloze(tiny_mlm_session, cloze_file)
    assert scores.queries == 2
    with pytest.raises(bertscope.BertscopeError, match="no masked-LM head"):
        bertscope.fill(tiny_session, "The capital is [MASK].")


def test_attribute_geometry_and_compare(tiny_session, tmp_path):
    explained = bertscope.attribute(tiny_session, "The cat slept here.", probe="animals", data=senteval_file(tmp_path),
                                    cache_dir=False, method="gradient")
    assert explained.scores.shape == (len(explained.encoding.tokens),)
    shape = bertscope.geometry(tiny_session, TEXTS, unit="token", max_rows=20)
    assert shape.size == min(20, shape.seen)
    compared = bertscope.compare(tiny_session, tiny_session, TEXTS, unit="token", max_rows=20)
    np.testing.assert_allclose(np.diag(compared.cka), 1.0, atol=1e-5)  # a model against itself
