"""The explorer's real backend runs the public API's streams, and brings their notes to the UI as data.

Warnings are the API's way of telling a script (`BertscopeNote`), but the filter that
catches them is process-wide: in the explorer's worker threads the notes must instead
arrive on the last `Progress` record, where `JobRun` shows them.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bertscope import api
from bertscope.base.progress import outcome
from bertscope.data.corpus import Sentence


@pytest.fixture(scope="module")
def backend(tiny_session):
    from bertscope.session_backend import SessionBackend

    return SessionBackend(tiny_session)


def last(steps):
    steps = list(steps)
    assert steps and steps[-1].finished
    return steps[-1]


def test_patterns_through_the_backend_equal_the_api_and_carry_the_note_on_the_last_step(backend, tiny_session):
    too_long = " ".join(["word"] * 200)  # past the tiny model's 64 positions: cut, and said so
    sentences = [Sentence("The cat sat on the mat."), Sentence(too_long)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning here would be an exception: the backend must not warn
        step = last(backend.steps(api.patterns, None, sentences))
    assert len(step.notes) == 1 and "tokens were cut" in step.notes[0] and "maximum of 64" in step.notes[0]
    with pytest.warns(api.BertscopeNote, match="tokens were cut"):
        direct = api.patterns(tiny_session, [s.text for s in sentences])
    assert step.result.sentences == direct.sentences == 2 and step.result.truncated == direct.truncated > 0
    for name, values in direct.statistics.items():
        assert np.allclose(step.result.statistics[name], values), name


def test_a_corpus_travels_whole_and_what_reading_it_skipped_arrives_on_the_last_step(backend, tmp_path):
    """The one route for a corpus's notes: the explorer hands the API the `Corpus` it chose, and the lines reading
    skipped come back with the result, as the CLI's warnings say them."""
    path = tmp_path / "probe.tsv"
    path.write_text("tr\t0\tThe cat sat.\ntr\t1\ntr\t1\tA dog barked.\n")
    step = last(backend.steps(api.patterns, None, api.corpus(data=path)))
    assert step.result.sentences == 2
    assert (
        step.notes[0] == f"read 2 sentences; skipped 1 (first: {path}:2: expected 3 tab-separated fields (split, label, sentence), found 2)"
    )


def test_a_note_warns_from_the_callers_line(tiny_session):
    """A script sees the note at its own call, not somewhere inside bertscope."""
    with pytest.warns(api.BertscopeNote) as caught:
        api.patterns(tiny_session, ["The cat sat.", " ".join(["word"] * 200)])
    assert caught[0].filename == __file__


def test_a_stream_is_the_function_step_by_step(tiny_session):
    texts = ["The cat sat on the mat.", "A dog barked twice at the moon."]
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stream tells its notes on its last record, never as a warning
        streamed = outcome(api.steps(api.geometry, tiny_session, texts, max_rows=50, progress=seen.append))
    direct = api.geometry(tiny_session, texts, max_rows=50)
    assert np.allclose(streamed.cka, direct.cka) and seen[-1].result is streamed


def test_the_objective_is_prepared_once_and_measured_through_the_api(backend):
    sentences = api.corpus([Sentence("The cat sat on the mat."), Sentence("A dog barked twice.")])
    prepared = backend.objective("preserve", sentences)
    before = backend.measure(prepared)
    ranking = last(backend.steps(api.importance, None, backend.objective("preserve", sentences))).result
    assert ranking.importance.shape == (backend.num_layers, backend.num_heads)
    again = backend.measure(backend.objective("preserve", sentences))
    assert backend.objective("preserve", sentences) is prepared and again.metric == pytest.approx(before.metric)


def test_the_corpus_analyses_that_take_a_mask_take_the_erasure_too_from_its_state_up(backend):
    """The overview's patterns and syntax, geometry and the objective run with the explorer's erasure (`E`) as with its mask:
    what reads hidden states below the erased one is the model's as it is, what reads it and above is not."""
    from bertscope.ui.erasure import training_sentences

    fitted = last(backend.fit_erasure("upos", 1, training_sentences("upos")[:300])).result
    sentences = list(api.treebank(limit=40).sentences)
    plain, erased = (last(backend.steps(api.patterns, erasure, sentences)).result for erasure in (None, fitted))
    for name, values in plain.statistics.items():  # layer 0 reads hidden state 0; layer 1 reads the erased state 1
        np.testing.assert_array_equal(erased.statistics[name][0], values[0], err_msg=name)
    assert not np.allclose(erased.statistics["entropy"][1:], plain.statistics["entropy"][1:])
    after = last(backend.steps(api.patterns, None, sentences)).result  # the eraser's hook went with its stream
    np.testing.assert_array_equal(after.statistics["entropy"], plain.statistics["entropy"])
    plain, erased = (last(backend.steps(api.syntax, erasure, sentences)).result for erasure in (None, fitted))
    np.testing.assert_array_equal(erased.correct[:, :, 0], plain.correct[:, :, 0])
    assert erased.counts.sum() == plain.counts.sum() and not np.array_equal(erased.correct[:, :, 1:], plain.correct[:, :, 1:])
    prepared = backend.objective("preserve", api.corpus(sentences))
    as_it_is, erased_objective = (backend.measure(prepared, erasure=erasure) for erasure in (None, fitted))
    assert as_it_is.loss == pytest.approx(0, abs=1e-6) and erased_objective.loss > 1e-4  # against the model as it is
    plain, erased = (last(backend.steps(api.geometry, erasure, sentences, max_rows=200)).result for erasure in (None, fitted))
    np.testing.assert_array_equal(erased.projection[0], plain.projection[0])  # the embeddings
    assert not np.allclose(erased.projection[1], plain.projection[1])  # the erased state itself, as its hidden state


def test_under_an_erasure_an_analysis_that_caches_features_keeps_none(backend, monkeypatch):
    """The feature cache is keyed by the mask, not the erasure: an erased run must neither read nor write it."""
    from bertscope.analyses.erasure_results import LiveErasure

    asked = []
    monkeypatch.setattr(api, "steps", lambda function, model, *args, **kwargs: asked.append((function, kwargs)) or iter(()))
    erasure = LiveErasure(task="upos", layer=1, rank=2, sentences=10)
    backend.steps(api.probe, erasure, "upos", cache_dir="features")
    backend.steps(api.probe, None, "upos", cache_dir="features")
    backend.steps(api.patterns, erasure, ["The cat sat."])
    assert [(function, kwargs.get("cache_dir", "none")) for function, kwargs in asked] == [
        (api.probe, False),
        (api.probe, "features"),
        (api.patterns, "none"),  # no cache to keep: nothing added
    ]
