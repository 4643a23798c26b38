"""Every command opens a model of every family (issue 30): the tiny models of tests/family_models.py through the CLI,
as a user runs them. The numbers themselves are held to independent references in tests/test_families.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import bertscope
from bertscope.cli import main
from bertscope.data.corpus import sample_corpus
from tests.family_models import FAMILIES, save_tiny_family

TEXT = "The keys to the cabinet are on the table."
TREEBANK = str(sample_corpus("conllu"))


@pytest.fixture(scope="module", params=FAMILIES)
def models(request, tmp_path_factory):
    family = request.param
    made = {
        head: save_tiny_family(tmp_path_factory.mktemp(f"{family}-{head}"), family, head, seed=2)
        for head in ("ForMaskedLM", "ForSequenceClassification")
    }
    return family, made


def run(*arguments) -> dict | list:
    result = CliRunner().invoke(main, [str(argument) for argument in arguments], catch_exceptions=False)
    assert result.exit_code == 0, (arguments, result.output)
    return json.loads(result.stdout) if "--json" in arguments else result.stdout


COMMANDS = {
    "attention": ("attention", TEXT, "--layer", 1, "--head", 2, "--norms", "--json"),
    "patterns": ("patterns", "--json"),
    "syntax": ("syntax", "--data", TREEBANK, "--limit", 40, "--json"),
    "probe": ("probe", "--task", "upos", "--data", TREEBANK, "--limit", 60, "--no-random-baseline", "--no-control", "--no-cache", "--json"),
    "structural": ("probe", "--task", "depth", "--data", TREEBANK, "--limit", 60, "--no-random-baseline", "--no-cache", "--json"),
    "fill": ("fill", "The cat sat on the [MASK].", "--json"),
    "attribute": ("attribute", "The cat sat on the [MASK].", "--json"),
    "importance": ("importance", "--objective", "mlm", "--json"),
    "geometry": ("geometry", "--json"),
    "patch": (
        "patch",
        "The cat sat on the mat.",
        "--corrupt",
        "The mat sat on the cat.",
        "--metric",
        "preserve",
        "--sweep",
        "layers",
        "--json",
    ),  # the same words swapped: the same number of tokens in every tokenizer
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_opens_every_family(models, command):
    family, made = models
    output = run(*COMMANDS[command], "-m", made["ForMaskedLM"])
    assert output


def test_info_export_and_a_classifier(models, tmp_path):
    family, made = models
    info = run("info", "-m", made["ForMaskedLM"], "--json")
    assert info["family"].lower().replace("-", "") == family.replace("-", "") and info["has_mlm_head"]
    assert "index 0" in info["hidden_states"]
    run("export", TEXT, "-m", made["ForMaskedLM"], "--mask", "1:2", "-o", tmp_path / "out.npz")
    expected = bertscope.load(str(made["ForMaskedLM"]), device="cpu").forward(TEXT, mask="1:2", norms=True)
    with np.load(tmp_path / "out.npz") as written:  # streamed layer by layer, the same numbers as one forward
        for name in ("attentions", "norms", "hidden_states", "mlm_logits"):
            np.testing.assert_allclose(written[name], getattr(expected, name), atol=1e-5)
    assert [path.name for path in tmp_path.iterdir()] == ["out.npz"]
    attribution = run("attribute", TEXT, "--target", 1, "-m", made["ForSequenceClassification"], "--json")
    assert attribution
    run("compare", "-m", made["ForMaskedLM"], "--model-b", made["ForMaskedLM"], "--json")


def test_a_local_layer_says_how_far_its_heads_see(tmp_path):
    directory = save_tiny_family(tmp_path / "modernbert", "modernbert")
    result = CliRunner().invoke(main, ["attention", TEXT, "-l", 1, "-H", 0, "-m", str(directory), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["window"] == 4
    assert "layer 1 is local: its heads see ±4 tokens" in result.stderr
    result = CliRunner().invoke(main, ["attention", TEXT, "-l", 0, "-H", 0, "-m", str(directory), "--json"])
    assert json.loads(result.stdout)["window"] is None and "local" not in result.stderr


def test_albert_prunes_heads_of_its_shared_layer_from_every_application(tmp_path):
    """A saved ALBERT can only lose a head of its one layer everywhere it runs: `prune -o` ranks those heads by their
    importance summed over the applications, and the zeroed copy is the masked model."""
    directory = save_tiny_family(tmp_path / "albert", "albert", "ForMaskedLM")
    result = CliRunner().invoke(
        main,
        ["prune", "--objective", "preserve", "--fraction", "0.5", "-o", str(tmp_path / "out"), "--weights", "zeroed", "-m", str(directory)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "out" / "bertscope-pruning.json").read_text())
    pruned = written["pruned_heads"]
    assert set(pruned) == {"0", "1", "2"} and pruned["0"] == pruned["1"] == pruned["2"] and len(pruned["0"]) == 2
    assert written["max_abs_difference_vs_masked"] == 0.0


def test_a_local_heads_heatmap_draws_the_cells_out_of_reach_apart(tmp_path):
    directory = save_tiny_family(tmp_path / "modernbert", "modernbert")
    result = CliRunner().invoke(main, ["attention", TEXT, "-l", 1, "-H", 0, "-m", str(directory)], env={"NO_COLOR": "1"})
    assert result.exit_code == 0 and "local: sees ±4" in result.stdout
    first_row = next(line for line in result.stdout.splitlines() if line.strip().startswith("[CLS]"))
    assert first_row.rstrip().endswith("··")  # [CLS] cannot reach the far end of the sentence


def test_cloze_ablation_importance_and_pruning(models, tmp_path):
    """The commands the table above leaves out: `fill --cloze` (answers one token in every family's tokenizer),
    importance by ablation, a pruning curve, and a zeroed copy, which every family can write."""
    family, made = models
    queries = tmp_path / "cloze.tsv"
    queries.write_text("The cat sat on the [MASK].\tmat\nThe keys to the cabinet are on the [MASK].\ttable\n", encoding="utf-8")
    cloze = run("fill", "--cloze", queries, "--json", "-m", made["ForMaskedLM"])
    assert cloze["queries"] >= 1, family
    importance = run("importance", "--objective", "preserve", "--method", "ablation", "--json", "-m", made["ForMaskedLM"])
    session = bertscope.load(str(made["ForMaskedLM"]), device="cpu")
    assert len(importance["heads"]) == session.num_layers * session.num_heads
    curve = run("prune", "-O", "preserve", "--curve", "--step", "0.25", "--json", "-m", made["ForMaskedLM"])
    assert curve["points"], family
    pruned = run(
        "prune",
        "-O",
        "preserve",
        "--fraction",
        "0.25",
        "-o",
        tmp_path / "zeroed",
        "--weights",
        "zeroed",
        "--json",
        "-m",
        made["ForMaskedLM"],
    )
    assert pruned["weights"] == "zeroed" and pruned["max_abs_difference_vs_masked"] < 1e-4, family


def test_torchrun_shards_give_one_process_numbers(tmp_path):
    """Two CPU ranks over ModernBERT (local layers, windowed statistics, no segment ids): `patterns --norms` gives what
    one process gives. Sharding is the same code for every family; this one differs most from BERT."""
    family = "modernbert"
    import os
    import subprocess
    import sys
    from pathlib import Path

    directory = save_tiny_family(tmp_path / "model", family, "ForMaskedLM", seed=2)
    environment = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    environment |= {
        "OMP_NUM_THREADS": "1",
        "BERTSCOPE_CPU_LINEAR": "blas",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[1]), environment.get("PYTHONPATH")])),
    }
    arguments = ["patterns", "-m", str(directory), "--device", "cpu", "--norms", "--limit", "40", "--json"]
    launchers = {
        "two": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "bertscope"],
        "one": [sys.executable, "-m", "bertscope"],
    }
    for name, launcher in launchers.items():
        done = subprocess.run(
            [*launcher, *arguments, "-o", str(tmp_path / f"{name}.json")], capture_output=True, text=True, env=environment, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
    two, one = (json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8")) for name in ("two", "one"))
    assert two["sentences"] == one["sentences"] == 40 and two["tokens"] == one["tokens"]
    assert_same_numbers(two["heads"], one["heads"], family)  # every head's statistics, shares and pattern class
    assert_same_numbers(two["layers"], one["layers"], family)


def assert_same_numbers(got, expected, where: str) -> None:
    """JSON values equal: numbers to 1e-5 (sums over two shards, in another order), everything else exactly."""
    if isinstance(expected, dict):
        assert set(got) == set(expected), where
        for key in expected:
            assert_same_numbers(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert len(got) == len(expected), where
        for index, (a, b) in enumerate(zip(got, expected)):
            assert_same_numbers(a, b, f"{where}[{index}]")
    elif isinstance(expected, float):
        assert abs(got - expected) <= 1e-5, (where, got, expected)
    else:
        assert got == expected, (where, got, expected)
