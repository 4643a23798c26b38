"""The public Python API (`import bertscope`): what a notebook user calls, on tiny random models."""

from __future__ import annotations

import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import bertscope
from bertscope.analyses.attention.patterns import pattern_statistics
from bertscope.analyses.conditions import Conditions
from bertscope.data.corpus import Sentence

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
    core = list(pattern_statistics(tiny_session, sentences, conditions=Conditions(tiny_session.mask("1:0"))))[-1].result
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
        result = bertscope.patterns(tiny_session, data=corpus, format="senteval")
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
    lines = [
        f"{split}\t{label}\tThe {animal} {verb} {place}."
        for split, count in (("tr", 6), ("va", 2), ("te", 2))
        for label, animal in (("cat", "cat"), ("dog", "dog"))
        for verb, place in zip(("sat", "slept", "ran", "ate", "hid", "sang")[:count], ("here", "there", "home", "in", "out", "up"))
    ]
    path = directory / "animals.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_probe_importance_and_pruning(tiny_session, tmp_path):
    report = bertscope.probe(tiny_session, "animals", data=senteval_file(tmp_path), control=False, random_baseline=False, cache_dir=False)
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
    scores = bertscope.cloze(tiny_mlm_session, data=cloze_file)
    assert scores.queries == 2
    with pytest.raises(bertscope.BertscopeError, match="no masked-LM head"):
        bertscope.fill(tiny_session, "The capital is [MASK].")


def test_attribute_geometry_and_compare(tiny_session, tmp_path):
    explained = bertscope.attribute(
        tiny_session, "The cat slept here.", probe="animals", data=senteval_file(tmp_path), cache_dir=False, method="gradient"
    )
    assert explained.scores.shape == (len(explained.encoding.tokens),)
    shape = bertscope.geometry(tiny_session, TEXTS, unit="token", max_rows=20)
    assert shape.size == min(20, shape.seen)
    compared = bertscope.compare(tiny_session, tiny_session, TEXTS, unit="token", max_rows=20)
    np.testing.assert_allclose(np.diag(compared.cka), 1.0, atol=1e-5)  # a model against itself


def test_patch_is_in_the_api(tiny_session):
    result = bertscope.patch(tiny_session, "the keys are here", "the key are here", sweep=["positions"])
    assert result.positions.shape == (tiny_session.num_layers + 1, len(result.tokens))
    assert result.heads is None and result.layers is None
    with pytest.raises(bertscope.BertscopeError, match="empty"):
        bertscope.patch(tiny_session, "the keys are here", " ")


ANALYSES = [
    "patterns",
    "syntax",
    "probe",
    "importance",
    "pruning_curve",
    "prune",
    "fill",
    "cloze",
    "attribute",
    "patch",
    "geometry",
    "compare",
    "mixing",
    "mixing_agreement",
    "erase",
    "train_sae",
    "sae_features",
    "sae_heads",
    "sae_directions",
]


def test_every_analysis_is_written_once_and_its_stream_takes_exactly_its_arguments():
    import inspect

    from bertscope import api

    for name in ANALYSES:
        function = getattr(bertscope, name)
        stream = api._STREAMS[function]
        assert inspect.signature(function).parameters == inspect.signature(stream).parameters, name
        assert {"progress", "cancel"} <= set(inspect.signature(function).parameters), name
        assert inspect.signature(function).return_annotation != inspect.signature(stream).return_annotation, name
    corpus_analyses = [
        "patterns",
        "syntax",
        "importance",
        "pruning_curve",
        "prune",
        "cloze",
        "geometry",
        "compare",
        "probe",
        "mixing_agreement",
        "erase",
        "train_sae",
        "sae_features",
        "sae_heads",
        "sae_directions",
    ]
    for name in corpus_analyses:  # one form of corpus argument: `texts` given, or a file as `data=`
        parameters = inspect.signature(getattr(bertscope, name)).parameters
        assert "texts" in parameters and parameters["data"].kind is inspect.Parameter.KEYWORD_ONLY, name
    with pytest.raises(TypeError, match="not an analysis"):
        bertscope.steps(bertscope.load)


def test_notes_take_one_route_the_result_the_warning_and_the_streams_last_record(tiny_session):
    """A note is in the result, issued once as a warning by the function, and on the stream's last record without one."""
    too_long = " ".join(["word"] * 200)  # past the tiny model's 64 positions
    with pytest.warns(bertscope.BertscopeNote) as caught:
        result = bertscope.syntax(tiny_session, limit=3)  # no note: the sample treebank fits
        probed = bertscope.probe(tiny_session, "animals", TEXTS_LABELLED, control=False, random_baseline=False, cache_dir=False)
        stats = bertscope.patterns(tiny_session, ["The cat sat.", too_long])
    warned = [str(warning.message) for warning in caught]
    assert not result.notes
    assert probed.notes and all(note in warned for note in probed.notes)  # a probe's notes are warned like any other
    assert stats.notes and all(note in warned for note in stats.notes) and len(warned) == len(probed.notes) + len(stats.notes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        *_, last = bertscope.steps(bertscope.patterns, tiny_session, ["The cat sat.", too_long])
    assert last.notes == last.result.notes == stats.notes


TEXTS_LABELLED = [Sentence(text=f"The {animal} sat on mat {i}.", label=animal) for i in range(6) for animal in ("cat", "dog")]


def test_a_prepared_objective_stands_in_for_its_name(tiny_session):
    prepared = bertscope.objective(tiny_session, "preserve", TEXTS)
    by_name = bertscope.importance(tiny_session, "preserve", TEXTS)
    by_prepared = bertscope.importance(tiny_session, prepared)
    np.testing.assert_allclose(by_name.importance, by_prepared.importance)
    assert prepared.source == "TEXT"
    curve = bertscope.pruning_curve(tiny_session, prepared, ranking=by_prepared, step=0.5)
    assert curve.points[-1].heads_pruned == tiny_session.num_layers * tiny_session.num_heads
    with pytest.raises(bertscope.BertscopeError, match="prepared objective has its data"):
        bertscope.importance(tiny_session, prepared, TEXTS)


def test_the_apis_keywords_are_named_as_the_commands_flags():
    """`bertscope probe --kind mlp` is `bertscope.probe(..., kind="mlp")`: one name for each option, in both (an old
    spelling kept for a release, deprecated, aside)."""
    import inspect

    import click

    from bertscope.cli import main

    shown_only = {
        "output",
        "json",
        "csv",
        "theme",
        "figure",
        "device",
        "dtype",
        "allow_download",
        "max_length",  # how and where to print, which model (bertscope.load's keywords)
        "no_cache",  # cache_dir=False
        "relations",
        "min_count",
        "layer",
        "colour_by",
        "points",
        "curve",
        "cloze",
    }  # rows shown, or which function
    rows_shown = {"sae heads": {"top"}, "sae directions": {"top"}}  # --top: how many rows the table shows (JSON: all)
    commands = {
        "patterns": ["patterns"],
        "syntax": ["syntax"],
        "probe": ["probe"],
        "importance": ["importance"],
        "prune": ["prune", "pruning_curve"],
        "fill": ["fill", "cloze"],
        "attribute": ["attribute"],
        "patch": ["patch"],
        "geometry": ["geometry"],
        "compare": ["compare"],
        "mixing": ["mixing", "mixing_agreement"],
        "erase": ["erase"],
        "sae train": ["train_sae"],
        "sae features": ["sae_features"],
        "sae heads": ["sae_heads"],
        "sae directions": ["sae_directions"],
    }
    for command, functions in commands.items():
        keywords = set().union(*(inspect.signature(getattr(bertscope, name)).parameters for name in functions))
        group, _, sub = command.partition(" ")
        chosen = main.commands[group].commands[sub] if sub else main.commands[group]
        for option in chosen.params:
            flags = [flag for flag in option.opts if flag.startswith("--")]
            if isinstance(option, click.Option) and flags and not option.deprecated:
                name = flags[0][2:].replace("-", "_")
                shown = shown_only | rows_shown.get(command, set())
                assert name in keywords or name in shown, f"bertscope {command} {flags[0]} has no keyword {name}="
