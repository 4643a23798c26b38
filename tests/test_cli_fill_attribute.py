"""`bertscope fill` and `bertscope attribute` as a user runs them: output, JSON shape, bad input."""

from __future__ import annotations

import json

import pytest

from bertscope.data.probing_tasks import generate, write_senteval
from tests.helpers.cli import assert_one_line_error

TEXT = "Dante was born in [MASK] and died in [MASK]."


def test_fill_json_shape(run, tiny_mlm_dir):
    result = run("fill", TEXT, "--model", str(tiny_mlm_dir), "--top", "3", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [m["position"] for m in payload["masks"]] == [5, 9]
    first = payload["masks"][0]
    assert len(first["predictions"]) == 3 and set(first["predictions"][0]) == {"token", "probability"}
    assert [entry["layer"] for entry in first["layers"]] == [0, 1, 2, 3]
    assert first["layers"][-1]["predictions"] == first["predictions"]
    assert payload["mask"] == "" and "unmasked_predictions" not in first


def test_fill_with_a_head_mask_shows_before_and_after(run, tiny_mlm_dir):
    result = run("fill", TEXT, "--model", str(tiny_mlm_dir), "--mask", "2:*", "--json")
    first = json.loads(result.stdout)["masks"][0]
    assert first["unmasked_predictions"] != first["predictions"]
    table = run("fill", TEXT, "--model", str(tiny_mlm_dir), "--mask", "2:*", "--no-layers")
    assert table.exit_code == 0 and "unmasked" in table.stdout and "[MASK] at token 9" in table.stdout
    assert "read off each layer" not in table.stdout


def test_fill_for_a_person(run, tiny_mlm_dir):
    result = run("fill", TEXT, "--model", str(tiny_mlm_dir))
    assert result.exit_code == 0 and "[MASK] at token 5" in result.stdout and "0 (embeddings)" in result.stdout


@pytest.mark.slow
def test_fill_on_the_bundled_model_says_what_works_instead(run):
    result = run("fill", TEXT)
    assert_one_line_error(result, "has no masked-LM head")
    assert "bertscope attribute TEXT --probe TASK" in result.stderr


def test_fill_without_a_head_is_one_line(run, tiny_bert_dir):
    assert_one_line_error(run("fill", TEXT, "--model", str(tiny_bert_dir)), "has no masked-LM head")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("Dante was born in Florence.",), "no [MASK]"),
        ((), "give a TEXT with [MASK]"),
        (("  ",), "the text is empty"),
        ((TEXT, "--cloze", "sample"), "either TEXT or --cloze"),
        (("--cloze", "/nonexistent.tsv"), "no such file"),
        ((TEXT, "--mask", "9:0"), "out of range"),
    ],
)
def test_fill_bad_input(run, tiny_mlm_dir, args, fragment):
    assert_one_line_error(run("fill", *args, "--model", str(tiny_mlm_dir)), fragment)


def test_cloze_json_and_skips(run, tiny_mlm_dir, tmp_path):
    path = tmp_path / "facts.tsv"
    path.write_text("Rome is the capital of [MASK].\titaly\nbroken line\nThe [MASK] of it.\tnew york\n")
    result = run("fill", "--cloze", str(path), "--model", str(tiny_mlm_dir), "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["queries"] == 1 and payload["skipped"] == 2
    assert [e["layer"] for e in payload["layers"]] == [0, 1, 2, 3] and {"p_at_1", "p_at_10"} <= set(payload["layers"][0])
    assert payload["answers"][0]["answer"] == "italy" and payload["answers"][0]["rank"] >= 0
    assert "skipped 2" in result.stderr and "broken line" not in result.stderr


def test_cloze_on_the_sample_file_for_a_person(run, tiny_mlm_dir):
    result = run("fill", "--cloze", "sample", "--model", str(tiny_mlm_dir))
    assert result.exit_code == 0 and "P@10" in result.stdout and "50 queries" in result.stdout


def test_attribute_mlm_json(run, tiny_mlm_dir):
    result = run("attribute", TEXT, "--model", str(tiny_mlm_dir), "--json", "--position", "9", "--target", "paris")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["method"] == "integrated-gradients" and payload["target"]["label"] == "paris" and payload["target"]["position"] == 9
    assert len(payload["attributions"]) == len(payload["tokens"]) and payload["completeness_error"] < 0.05
    assert payload["steps"] >= 32 and payload["words"][0]["word"] == "dante"


@pytest.mark.parametrize("method", ["gradient", "gradient-x-input", "attention-rollout", "integrated-gradients"])
def test_attribute_for_a_person(run, tiny_mlm_dir, method):
    result = run("attribute", TEXT, "--model", str(tiny_mlm_dir), "--method", method, "--mask", "0:1")
    assert result.exit_code == 0, result.output
    assert "dante" in result.stdout and "heads off 0:1" in result.stdout


def test_attribute_a_probe_decision_on_a_model_without_an_mlm_head(run, tiny_bert_dir, tmp_path):
    data = tmp_path / "task.tsv"
    write_senteval(data, generate("subject_number", train=60, dev=20, test=20))
    args = ["--model", str(tiny_bert_dir), "--probe", "subject_number", "--data", str(data), "--cache-dir", str(tmp_path)]
    result = run("attribute", "The keys to the cabinet are here.", *args, "--json", "--layer", "2", "--target", "NNS")
    assert result.exit_code == 0, result.output
    target = json.loads(result.stdout)["target"]
    assert target["kind"] == "probe" and target["label"] == "NNS" and target["layer"] == 2 and target["classes"] == ["NN", "NNS"]
    assert_one_line_error(run("attribute", "The keys are here.", *args, "--layer", "9"), "layer 9 is out of range")
    assert_one_line_error(run("attribute", "The keys are here.", *args, "--target", "VB"), "not a class here")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("The keys are here.",), "neither an MLM head nor a classifier"),
        (("The keys are here.", "--layer", "1"), "add --probe TASK"),
        (("The keys are here.", "--probe", "nonsense"), "unknown probing task"),
        (("  ",), "the text is empty"),
    ],
)
def test_attribute_bad_input(run, tiny_bert_dir, args, fragment):
    assert_one_line_error(run("attribute", *args, "--model", str(tiny_bert_dir)), fragment)
