"""Layer-wise probing end to end on the tiny model: tasks, splits, baselines and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.probing.run import center_of_gravity, encode_labels, run_probe
from bertscope.base.errors import InputError
from bertscope.cli import main
from bertscope.data.corpus import Sentence, read_sentences, sample_corpus
from bertscope.data.probing_tasks import generate
from bertscope.data.splits import make_splits


def report_of(steps):
    return list(steps)[-1].result


def test_sentence_task_from_a_senteval_file(tiny_session, tmp_path):
    splits = make_splits(list(read_sentences(sample_corpus("senteval"))), None, None)
    assert (len(splits.train), len(splits.dev), len(splits.test)) == (42, 9, 9) and not splits.notes
    report = report_of(run_probe(tiny_session, "length", splits, job=JobOptions(cache_dir=tmp_path)))
    assert report.metric == "accuracy" and [e["layer"] for e in report.layers] == list(range(4))
    assert all(0 <= e["accuracy"] <= 1 and 0 <= e["f1"] <= 1 for e in report.layers)
    assert "random_init_accuracy" in report.layers[0] and "random_init" in report.baselines
    assert 0 <= report.baselines["majority"] <= 1
    assert 0 <= report.best_layer <= 3
    assert report.counts == {
        "train": 42,
        "dev": 9,
        "test": 9,
        "classes": 4,
        "unit": "sentences",
        "min_examples": 2,
        "labels_left_out": {},
        "examples_left_out": {"train": 0, "dev": 0, "test": 0},
    }


def test_word_task_with_control_and_selectivity(tiny_session, tmp_path):
    treebank = list(read_sentences(sample_corpus("conllu"), limit=20))
    splits = make_splits(treebank * 3, treebank[:5], treebank[5:])
    report = report_of(run_probe(tiny_session, "upos", splits, job=JobOptions(cache_dir=tmp_path), random_baseline=False))
    entry = report.layers[2]
    assert {"accuracy", "f1", "control_accuracy", "selectivity"} <= set(entry)
    assert entry["selectivity"] == pytest.approx(entry["accuracy"] - entry["control_accuracy"], abs=1e-5)
    assert report.counts["unit"] == "words" and report.counts["test"] == sum(len(s.words) for s in treebank[5:])


def test_baselines_are_the_task_probes_at_the_task_strengths(tiny_session, tmp_path, monkeypatch):
    """The control task and the random-init baseline train linear probes at the L2 strength the task chose per
    layer (Hewitt & Liang's same probe), instead of a search of their own."""
    from bertscope.analyses.probing import probes

    calls = []
    train, together = probes.train_probes, probes.train_with_control

    def recorded(*args, **options):
        trained = train(*args, **options)
        calls.append((options.get("layer_l2"), trained))
        return trained

    def recorded_together(*args, **options):
        task, control = together(*args, **options)
        calls[:0] = [(None, task), (task.chosen_strengths, control)]  # the control: trained at the task's strengths
        return task, control

    monkeypatch.setattr(probes, "train_probes", recorded)
    monkeypatch.setattr(probes, "train_with_control", recorded_together)
    treebank = list(read_sentences(sample_corpus("conllu"), limit=20))
    splits = make_splits(treebank * 3, treebank[:5], treebank[5:])
    report_of(run_probe(tiny_session, "upos", splits, job=JobOptions(cache_dir=tmp_path)))
    (task_strengths, task), *baselines = calls
    assert task_strengths is None and len(baselines) == 2  # the control task, then the random-init baseline
    for strengths, trained in baselines:
        assert strengths.tolist() == task.chosen_strengths.tolist() == trained.chosen_strengths.tolist()


def test_structural_task(tiny_session, tmp_path):
    treebank = list(read_sentences(sample_corpus("conllu"), limit=20))
    splits = make_splits(treebank * 2, treebank[:5], treebank[5:])
    report = report_of(run_probe(tiny_session, "distance", splits, job=JobOptions(cache_dir=tmp_path), random_baseline=False))
    assert report.metric == "spearman" and {"spearman", "uuas"} <= set(report.layers[0])
    depth = report_of(run_probe(tiny_session, "depth", splits, job=JobOptions(cache_dir=tmp_path), random_baseline=False))
    assert {"spearman", "root_accuracy"} <= set(depth.layers[0])


def test_builtin_task_and_the_feature_cache(tiny_session, tmp_path):
    splits = make_splits(generate("subject_number", train=60, dev=20, test=20), None, None)
    first = report_of(run_probe(tiny_session, "subject_number", splits, job=JobOptions(cache_dir=tmp_path), random_baseline=False))
    cached = list(tmp_path.glob("features-*.npz"))
    assert len(cached) == 3  # train, dev, test
    again = report_of(run_probe(tiny_session, "subject_number", splits, job=JobOptions(cache_dir=tmp_path), random_baseline=False))
    assert again.layers == first.layers  # same features from the cache, same seeded probes


def test_held_out_splits_when_missing():
    sentences = [Sentence(text=f"s {i}", label=str(i % 2)) for i in range(50)]
    splits = make_splits(sentences, None, None)
    assert (len(splits.train), len(splits.dev), len(splits.test)) == (36, 4, 10)
    assert len(splits.notes) == 2
    assert not {s.text for s in splits.test} & {s.text for s in splits.train}


def test_rare_labels_and_labels_unseen_in_train_are_left_out_and_counted():
    labels = encode_labels(["a", "a", "b", "b", "c"], ["a", "d"], ["c", "b", "a"])
    assert labels.classes == ["a", "b"]
    assert labels.left_out == {"c": 1, "d": 0}
    assert labels.rows_left_out == {"train": 1, "dev": 1, "test": 1}
    assert labels.train.tolist() == [0, 0, 1, 1] and labels.dev.tolist() == [0] and labels.test.tolist() == [1, 0]
    X = np.arange(3)[:, None, None] * np.ones((3, 2, 4))
    assert np.asarray(labels.rows("test", X))[:, 0, 0].tolist() == [1, 2]  # read lazily, as the probes read them
    assert "c (1), d (0)" in labels.note(2)
    assert labels.as_json(2)["labels_left_out"] == {"c": 1, "d": 0}


def test_every_row_kept_uses_the_features_without_a_copy():
    labels = encode_labels(["b", "a", "a", "b"], ["a"], ["b"])
    X = np.zeros((4, 2, 3))
    assert labels.keep["train"] is None and labels.rows("train", X) is X
    assert labels.classes == ["a", "b"] and labels.train.tolist() == [1, 0, 0, 1]
    assert labels.note(2) is None


def test_min_examples_sets_the_threshold_and_two_labels_must_remain():
    assert encode_labels(["a", "a", "b"], ["a"], ["a"], min_examples=1).classes == ["a", "b"]
    with pytest.raises(InputError, match="two or more labels with at least 2 training examples"):
        encode_labels(["a", "a", "b"], ["a"], ["a"])
    with pytest.raises(InputError, match="two or more labels"):
        encode_labels(["a", "a"], ["a"], ["a"])
    with pytest.raises(InputError, match="every test example"):
        encode_labels(["a", "a", "b", "b", "c"], ["a"], ["c"])


def test_center_of_gravity_stays_within_the_layers():
    assert 1 <= center_of_gravity(np.array([0.5, 0.48, 0.83, 0.86, 0.84, 0.79, 0.67])) <= 6
    assert center_of_gravity(np.array([0.2, 0.2, 0.8])) == pytest.approx(2.0)


def test_probe_cli_json(tiny_bert_dir, tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "probe",
            "--task",
            "length",
            "--data",
            str(sample_corpus("senteval")),
            "-m",
            str(tiny_bert_dir),
            "--cache-dir",
            str(tmp_path),
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"task", "metric", "layers", "best_layer", "center_of_gravity", "baselines"} <= set(data)
    assert data["layers"][0]["layer"] == 0 and len(data["layers"]) == 4


def test_probe_cli_seed_draws_other_splits_and_says_which(tiny_bert_dir, tmp_path):
    """`--seed` is how a user sees a probe's spread: another seed holds out other sentences and starts elsewhere."""
    runs = {}
    for seed in ("0", "1"):
        result = CliRunner().invoke(
            main,
            [
                "probe",
                "--task",
                "distance",
                "--data",
                str(sample_corpus("conllu")),
                "-m",
                str(tiny_bert_dir),
                "--cache-dir",
                str(tmp_path),
                "--no-random-baseline",
                "--seed",
                seed,
                "--json",
            ],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        runs[seed] = json.loads(result.stdout)
    assert (runs["0"]["seed"], runs["1"]["seed"]) == (0, 1)
    assert [layer["uuas"] for layer in runs["0"]["layers"]] != [layer["uuas"] for layer in runs["1"]["layers"]]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--task", "nonsense"], "unknown task 'nonsense'"),
        (["--task", "upos", "--data", "SENTEVAL"], "needs a CoNLL-U file"),
        (["--task", "length", "--data", "CONLLU"], "a CoNLL-U file probes"),
        (["--task", "length", "--dev", "x"], "a dev or test file needs a training file too (--data TRAIN)"),
    ],
)
def test_probe_cli_bad_input(tiny_bert_dir, args, fragment):
    args = [{"SENTEVAL": str(sample_corpus("senteval")), "CONLLU": str(sample_corpus("conllu"))}.get(a, a) for a in args]
    result = CliRunner().invoke(main, ["probe", *args, "-m", str(tiny_bert_dir), "--no-cache"], catch_exceptions=False)
    assert result.exit_code == 2 and fragment in result.stderr and "Traceback" not in result.output


def test_senteval_rows_of_other_splits_never_train():
    rows = [Sentence(text=f"s {i}", label=str(i % 2), split=("tr", "va", "te")[i % 3]) for i in range(30)]
    given_dev = [Sentence(text="d", label="0"), Sentence(text="e", label="1")]
    splits = make_splits(rows, given_dev, None)
    assert {s.split for s in splits.train} == {"tr"} and splits.dev == given_dev
    assert {s.split for s in splits.test} == {"te"}
