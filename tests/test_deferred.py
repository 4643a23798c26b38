"""A model loaded only when a pass needs it: `probe` on a warm feature cache reads no weights (issue 19)."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from bertscope.analyses.probing.features import FeatureOptions, extract_features
from bertscope.cli import main
from bertscope.data.corpus import read_sentences, sample_corpus
from bertscope.model.deferred import DeferredSession
from bertscope.model.model_files import find_model
from tests.helpers.models import command_in_a_new_process


def deferred(directory, session, loads: list) -> DeferredSession:
    def load():
        loads.append(1)
        return session

    return DeferredSession.from_files(find_model(None if directory is None else str(directory)), "cpu", load)


def test_the_files_tell_what_the_loaded_model_would(tiny_bert_dir, tiny_session, bundled_session):
    for directory, session in ((tiny_bert_dir, tiny_session), (None, bundled_session)):
        loads = []
        model = deferred(directory, session, loads)
        assert (model.fingerprint, model.max_length, model.num_layers, model.num_heads, model.hidden_size) == (
            session.fingerprint,
            session.max_length,
            session.num_layers,
            session.num_heads,
            session.hidden_size,
        )
        assert model.source == session.source and model.mask("1:*").spec() == session.mask("1:*").spec()
        assert loads == []
    copy = DeferredSession.random_copy_of(deferred(tiny_bert_dir, tiny_session, []), 3)
    assert copy.fingerprint == tiny_session.random_copy(3).fingerprint


def test_a_wrong_maximum_length_costs_a_load_not_a_wrong_entry(tiny_bert_dir, tiny_session, tmp_path):
    sentences = list(read_sentences(sample_corpus("conllu"), limit=8))
    options = FeatureOptions(level="word")
    stored = list(extract_features(tiny_session, sentences, options, cache_dir=tmp_path))[-1].result
    loads = []
    model = deferred(tiny_bert_dir, tiny_session, loads)
    hit = list(extract_features(model, sentences, options, cache_dir=tmp_path))[-1].result
    assert hit.from_cache and loads == []
    misled = deferred(tiny_bert_dir, tiny_session, loads)
    misled.max_length = 12  # as if tokenizer_config.json said something the tokenizer does not do
    found = list(extract_features(misled, sentences, options, cache_dir=tmp_path))[-1].result
    assert found.from_cache and loads == [1]  # loaded, then its own entry found
    np.testing.assert_array_equal(found.X, stored.X)


def test_a_warm_probe_imports_no_transformers_and_reports_the_same(tiny_bert_dir, tmp_path):
    args = [
        "probe",
        "--task",
        "upos",
        "--data",
        str(sample_corpus("conllu")),
        "--limit",
        "40",
        "-m",
        str(tiny_bert_dir),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--json",
    ]
    cold = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "cold.json")], catch_exceptions=False)
    assert cold.exit_code == 0, cold.output
    status, errors = command_in_a_new_process([*args, "-o", str(tmp_path / "warm.json")])
    assert status == ["0", "False"], errors
    report = json.loads((tmp_path / "warm.json").read_text())
    assert "control_accuracy" in report["layers"][1] and "random_init" in report["baselines"]  # the default baselines too
    assert (tmp_path / "warm.json").read_text() == (tmp_path / "cold.json").read_text()
