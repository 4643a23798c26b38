"""`bertscope syntax`, as a script or a person would call it: JSON, CSV, the table, and bad input."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from bertscope.cli import main
from bertscope.data.corpus import sample_corpus
from bertscope.data.treebank import generate_treebank, write_conllu
from tests.helpers.cli import assert_one_line_error, assert_refused_before_torch


@pytest.fixture
def run():
    def invoke(*args: str):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    return invoke


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    path = tmp_path_factory.mktemp("syntax") / "generated.conllu"
    write_conllu(path, generate_treebank(60, seed=2))
    return str(path)


def test_syntax_json_has_every_relation_in_both_directions(run, tiny_bert_dir, generated):
    result = run(
        "syntax", "--data", generated, "--relations", "det,dobj,nsubj,iobj", "--min-count", "10", "-m", str(tiny_bert_dir), "--json"
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["sentences"] == 60 and payload["data"] == generated and payload["model"]
    relations = payload["relations"]
    assert [(r["relation"], r["direction"]) for r in relations] == [
        (name, direction) for name in ("det", "obj", "nsubj", "iobj") for direction in ("dependent_to_head", "head_to_dependent")
    ]
    det = relations[0]
    assert det["count"] >= 10 and not det["few"]
    assert set(det) >= {"relation", "direction", "count", "best", "baseline", "heads"}
    heads = det["heads"]
    assert len(heads) == 3 and all(len(row) == 4 for row in heads)  # the tiny model: 3 layers x 4 heads
    best = det["best"]
    assert heads[best["layer"]][best["head"]] == best["accuracy"] == max(max(row) for row in heads)
    assert det["baseline"]["offset"] in (-3, -2, -1, 1, 2, 3) and 0 <= det["baseline"]["accuracy"] <= 1
    assert relations[0]["count"] == relations[1]["count"]  # one arc, asked both ways
    iobj = relations[-1]
    assert iobj["count"] < 10 and iobj["few"]  # reported, but flagged as rare


def test_syntax_csv_and_table(run, tiny_bert_dir, generated):
    result = run("syntax", "--data", generated, "--relations", "det,amod", "-m", str(tiny_bert_dir), "--csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["relation"] for row in rows] == ["det", "det", "amod", "amod"]
    assert 0 <= float(rows[0]["best_accuracy"]) <= 1 and rows[0]["baseline_offset"] in {"-3", "-2", "-1", "1", "2", "3"}
    result = run("syntax", "--data", str(sample_corpus("conllu")), "--limit", "30", "-m", str(tiny_bert_dir))
    assert result.exit_code == 0, result.output
    for fragment in ("relation", "best head", "baseline", "dep→head", "head→dep", "det", "30 sentences"):
        assert fragment in result.stdout


def test_syntax_bad_input(run, tiny_bert_dir, tmp_path):
    text = tmp_path / "plain.txt"
    text.write_text("The cat sat on the mat.\nA dog barked.\n")
    assert_one_line_error(run("syntax", "--data", str(text), "-m", str(tiny_bert_dir)), "is not a CoNLL-U treebank")
    assert_one_line_error(run("syntax", "--relations", "det,subject", "-m", str(tiny_bert_dir)), "unknown dependency relation 'subject'")
    assert_one_line_error(run("syntax", "--data", str(tmp_path / "missing.conllu"), "-m", str(tiny_bert_dir)), "missing.conllu")


def test_syntax_refuses_bad_input_before_torch(tmp_path, tiny_bert_dir):
    text = tmp_path / "plain.txt"
    text.write_text("The cat sat on the mat.\n")
    assert_refused_before_torch(["syntax", "--data", str(text), "-m", str(tiny_bert_dir)], "is not a CoNLL-U treebank")
    assert_refused_before_torch(["syntax", "--relations", "nsubjx", "-m", str(tiny_bert_dir)], "unknown dependency relation")
