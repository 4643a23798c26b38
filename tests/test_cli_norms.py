"""The command line's value-weighted norms: `attention --norms`, `export`'s norms, `patterns --norms`."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
from click.testing import CliRunner

from bertscope.cli import main
from tests.helpers.cli import assert_one_line_error

SENTENCE = "The keys to the cabinet are on the table."


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_attention_norms_json_equals_the_forward(tiny_session, tiny_bert_dir):
    result = run("attention", SENTENCE, "-l", "1", "-H", "2", "--norms", "--json", "-m", str(tiny_bert_dir))
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    expected = tiny_session.forward(SENTENCE, norms=True)
    np.testing.assert_allclose(payload["norms"], expected.norms[1, 2], atol=2e-6)
    np.testing.assert_allclose(payload["attention"], expected.attentions[1, 2], atol=2e-6)
    assert "Kobayashi" in payload["norm_definition"] and "bias of W_O left out" in payload["norm_definition"]


def test_attention_norms_for_a_person_and_csv(tiny_bert_dir):
    shown = run("attention", SENTENCE, "-l", "0", "-H", "1", "--norms", "-m", str(tiny_bert_dir))
    assert shown.exit_code == 0, shown.output
    assert "value-weighted norms" in shown.stdout and "‖αf‖ max" in shown.stdout  # the scale says what it measures
    assert "Kobayashi" in shown.stderr
    weights = run("attention", SENTENCE, "-l", "0", "-H", "1", "-m", str(tiny_bert_dir)).stdout
    assert "‖αf‖" not in weights
    rows = list(
        csv.reader(io.StringIO(run("attention", SENTENCE, "-l", "0", "-H", "1", "--norms", "--csv", "-m", str(tiny_bert_dir)).stdout))
    )
    values = np.array([[float(v) for v in row[1:]] for row in rows[1:]])
    assert values.min() >= 0 and not np.allclose(values.sum(1), 1.0)  # norms, not weights that sum to one


def test_attention_norms_refuse_the_fixed_scale(tiny_bert_dir):
    assert_one_line_error(
        run("attention", SENTENCE, "-l", "0", "-H", "1", "--norms", "--scale", "fixed", "-m", str(tiny_bert_dir)), "no fixed range"
    )


def test_export_writes_the_norms(tiny_session, tiny_bert_dir, tmp_path):
    target = tmp_path / "run.npz"
    assert run("export", SENTENCE, "--mask", "2:*", "-o", str(target), "-m", str(tiny_bert_dir)).exit_code == 0
    expected = tiny_session.forward(SENTENCE, mask="2:*", norms=True)
    with np.load(target) as data:
        assert data["norms"].shape == data["attentions"].shape == expected.norms.shape
        np.testing.assert_allclose(data["norms"], expected.norms, atol=2e-6)
        assert not data["norms"][2].any()
        assert "Kobayashi" in str(data["norm_definition"])


def test_patterns_norms_in_json_csv_and_table(tiny_bert_dir):
    payload = json.loads(run("patterns", "A dog barked, loudly.", "--norms", "--json", "-m", str(tiny_bert_dir)).stdout)
    assert "Kobayashi" in payload["norms"]
    for entry in payload["heads"] + payload["layers"]:
        for name in ("cls", "sep", "punct", "self", "prev", "next"):
            assert 0 <= entry[f"norm_{name}"] <= 1 + 1e-6 and name in entry
    plain = json.loads(run("patterns", "A dog barked, loudly.", "--json", "-m", str(tiny_bert_dir)).stdout)
    assert "norms" not in plain and "norm_sep" not in plain["heads"][0]
    result = run("patterns", "A dog barked, loudly.", "--norms", "--csv", "-m", str(tiny_bert_dir))
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 12 and float(rows[0]["norm_sep"]) >= 0 and "Kobayashi" in result.stderr
    table = run("patterns", "A dog barked, loudly.", "--norms", "-m", str(tiny_bert_dir)).stdout
    assert "share of weight │ share of norm" in table and "share to [SEP] per head" in table
