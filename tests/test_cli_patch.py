"""`bertscope patch` as a user runs it: JSON shape, CSV, the table, and bad input in one line."""

from __future__ import annotations

import csv
import io
import json

from bertscope.data.probing_tasks import generate, write_senteval
from tests.helpers.cli import assert_one_line_error

CLEAN, CORRUPT = "the keys to the cabinet are here", "the key to the cabinet is here"


def test_patch_json_has_every_sweep(run, tiny_bert_dir):
    result = run("patch", CLEAN, "--corrupt", CORRUPT, "--model", str(tiny_bert_dir), "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["metric"] == "preserve" and payload["direction"] == "denoise" and payload["clean_metric"] == 0.0
    layers, heads, tokens = 3, 4, len(payload["tokens"])
    assert payload["corrupt_metric"] < 0 and payload["differing_positions"]
    assert len(payload["heads"]) == layers * heads and set(payload["heads"][0]) == {"layer", "head", "effect"}
    assert {(entry["layer"], entry["component"]) for entry in payload["layers"]} == {
        (layer, component) for layer in range(layers) for component in ("attention", "feed_forward")
    }
    assert len(payload["positions"]) == (layers + 1) * tokens
    final = [entry["effect"] for entry in payload["positions"] if entry["layer"] == layers]
    assert abs(sum(final) - 1.0) < 1e-4  # preserve: the output positions share the difference out


def test_patch_one_sweep_as_csv_and_noising(run, tiny_bert_dir):
    result = run("patch", CLEAN, "--corrupt", CORRUPT, "--model", str(tiny_bert_dir), "--sweep", "layers", "--direction", "noise", "--csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 6 and {row["sweep"] for row in rows} == {"layers"}
    assert {row["component"] for row in rows} == {"attention", "feed_forward"}


def test_patch_table_for_a_person(run, tiny_bert_dir):
    result = run("patch", CLEAN, "--corrupt", CORRUPT, "--model", str(tiny_bert_dir), "--sweep", "heads", "--per-position")
    assert result.exit_code == 0, result.output
    assert "each head's output" in result.stdout and "effect:" in result.stdout and "the residual stream" not in result.stdout


def test_patch_with_a_probe_metric(run, tiny_bert_dir, tmp_path):
    data = tmp_path / "number.tsv"
    write_senteval(data, generate("subject_number", train=60, dev=20, test=20))
    result = run(
        "patch",
        "The keys to the cabinet are here.",
        "--corrupt",
        "The key to the cabinet is here.",
        "--metric",
        "probe",
        "--task",
        "subject_number",
        "--data",
        str(data),
        "--probe-layer",
        "2",
        "--sweep",
        "positions",
        "--model",
        str(tiny_bert_dir),
        "--json",
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert "subject_number probe at hidden state 2" in payload["metric_description"]
    above = [entry["effect"] for entry in payload["positions"] if entry["layer"] == 3]
    assert all(effect == 0.0 for effect in above)  # the probe reads layer 2: nothing above it can change its decision


def test_patch_refuses_bad_input_in_one_line(run, tiny_bert_dir, tiny_mlm_dir):
    model = ("--model", str(tiny_bert_dir))
    assert_one_line_error(
        run("patch", CLEAN, "--corrupt", "the key to the big cabinet is here", *model),
        "have 9 and 10 tokens; patching needs the same number",
    )
    assert_one_line_error(run("patch", CLEAN, "--corrupt", " ", *model), "the text is empty")
    assert_one_line_error(run("patch", CLEAN, "--corrupt", CORRUPT, "--metric", "probe", *model), "needs a task: --task")
    assert_one_line_error(run("patch", CLEAN, "--corrupt", CORRUPT, "--metric", "class", *model), "not a sequence classifier")
    assert_one_line_error(
        run("patch", "a [MASK] b", "--corrupt", "a [MASK] c", "--metric", "mlm", "--answers", "is", "--model", str(tiny_mlm_dir)),
        "give two names",
    )
    assert_one_line_error(run("patch", CLEAN, "--corrupt", CORRUPT, "--metric", "mlm", *model), "write [MASK]")
