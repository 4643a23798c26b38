"""`bertscope geometry` and `bertscope compare`, as a script or a person would call them."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bertscope.cli import main
from bertscope.data.corpus import sample_corpus
from tests.helpers.cli import assert_one_line_error
from tests.helpers.models import save_tiny


@pytest.fixture
def run():
    def invoke(*args: str):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    return invoke


def test_geometry_json(run, tiny_bert_dir):
    result = run("geometry", "--data", str(sample_corpus()), "--limit", "20", "--max-rows", "60", "-m", str(tiny_bert_dir), "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [entry["layer"] for entry in payload["layers"]] == [0, 1, 2, 3]  # hidden states: 0 = embeddings
    assert len(payload["cka"]) == 4 and all(len(row) == 4 for row in payload["cka"])
    assert [payload["cka"][i][i] for i in range(4)] == pytest.approx([1.0] * 4)
    assert len(payload["intrinsic_dimension"]) == 4 and len(payload["neighbourhood_overlap"]) == 3
    assert payload["rows_sampled"] == 60 and payload["unit"] == "token"
    assert "seeded sample of 60" in result.stderr


def test_geometry_for_a_person_draws_the_table_heatmap_and_scatter(run, tiny_bert_dir):
    result = run("geometry", "--data", str(sample_corpus("conllu")), "--limit", "20", "--layer", "1", "-m", str(tiny_bert_dir))
    assert result.exit_code == 0, result.output
    for fragment in ("TwoNN ID", "overlap→next", "linear CKA, layer × layer", "layer 1: PCA of 178 words", "by upos", "NOUN"):
        assert fragment in result.stdout


def test_geometry_bad_input(run, tiny_bert_dir, tmp_path):
    assert_one_line_error(run("geometry", "--data", str(tmp_path / "missing.txt"), "-m", str(tiny_bert_dir)), "missing.txt")
    assert_one_line_error(
        run("geometry", "--data", str(sample_corpus()), "--limit", "3", "--layer", "9", "-m", str(tiny_bert_dir)),
        "--layer 9 is out of range",
    )
    assert_one_line_error(
        run("geometry", "--data", str(sample_corpus()), "--limit", "3", "--unit", "word", "-m", str(tiny_bert_dir)), "CoNLL-U"
    )
    assert_one_line_error(
        run("geometry", "--data", str(sample_corpus()), "--limit", "3", "--colour-by", "upos", "-m", str(tiny_bert_dir)),
        "labels here: token",
    )


def test_compare_json_with_itself(run, tiny_bert_dir):
    result = run(
        "compare", "--data", str(sample_corpus()), "--limit", "10", "-m", str(tiny_bert_dir), "--model-b", str(tiny_bert_dir), "--json"
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert len(payload["heads"]) == 12 and [h["attention_cosine"] for h in payload["heads"]] == pytest.approx([1.0] * 12, abs=1e-5)
    assert [payload["cka"][i][i] for i in range(4)] == pytest.approx([1.0] * 4)


def test_compare_for_a_person(run, tiny_bert_dir, tmp_path):
    other = save_tiny(tmp_path / "b", "BertModel", seed=3, initializer_range=0.5)
    result = run("compare", "--data", str(sample_corpus()), "--limit", "10", "-m", str(tiny_bert_dir), "--model-b", str(other))
    assert result.exit_code == 0, result.output
    for fragment in ("attention cosine A·B per head", "most changed heads", "CKA(A_l, B_l)", "A layers ↓ × B layers →"):
        assert fragment in result.stdout


def test_compare_with_a_different_tokenizer_is_one_line(run, tiny_bert_dir, tmp_path):
    directory = save_tiny(tmp_path / "other-vocab", "BertModel")
    spec = json.loads((directory / "tokenizer.json").read_text())
    spec["model"]["vocab"]["zzznew"] = spec["model"]["vocab"].pop("hello")
    (directory / "tokenizer.json").write_text(json.dumps(spec))
    result = run("compare", "--limit", "3", "-m", str(tiny_bert_dir), "--model-b", str(directory))
    assert_one_line_error(result, "tokenizer differs")


def test_compare_needs_model_b_and_a_probe_it_can_run(run, tiny_bert_dir, tmp_path):
    result = run("compare", "-m", str(tiny_bert_dir))
    assert result.exit_code == 2 and "--model-b" in result.output
    assert_one_line_error(
        run("compare", "--limit", "3", "--probe", "upos", "-m", str(tiny_bert_dir), "--model-b", str(tiny_bert_dir)), "CoNLL-U"
    )
    assert_one_line_error(run("compare", "--limit", "3", "-m", str(tiny_bert_dir), "--model-b", str(tmp_path / "nothing")), "nothing")
