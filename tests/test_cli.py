"""The headless commands, as a script or a person would call them."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from bertscope.cli import main
from bertscope.data.corpus import sample_corpus
from tests.helpers.cli import assert_one_line_error
from tests.helpers.models import write_config

SENTENCE = "The keys to the cabinet are on the table."


def test_info_json(run, tiny_bert_dir):
    result = run("info", "--model", str(tiny_bert_dir), "--json")
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    assert {k: info[k] for k in ("family", "num_layers", "num_heads", "hidden_size", "vocab_size", "max_length", "has_mlm_head")} == {
        "family": "BERT",
        "num_layers": 3,
        "num_heads": 4,
        "hidden_size": 32,
        "vocab_size": 30522,
        "max_length": 64,
        "has_mlm_head": False,
    }
    assert info["device"] == "cpu" and info["parameters"] > 0


def test_info_for_a_person(run, tiny_mlm_dir):
    result = run("info", "--model", str(tiny_mlm_dir))
    assert result.exit_code == 0
    for fragment in ("BERT", "BertForMaskedLM", "heads per layer", "MLM head", "yes", "parameters"):
        assert fragment in result.stdout


def test_attention_json(run, tiny_bert_dir):
    result = run("attention", SENTENCE, "--layer", "1", "--head", "2", "--model", str(tiny_bert_dir), "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    tokens = data["tokens"]
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "cabinet" in tokens
    weights = np.array(data["attention"])
    assert weights.shape == (len(tokens), len(tokens))
    np.testing.assert_allclose(weights.sum(1), 1, atol=1e-4)
    assert (data["layer"], data["head"], data["mask"], data["masked"]) == (1, 2, "", False)


def test_attention_json_with_mask(run, tiny_bert_dir):
    def attention(layer: int, head: int, *extra: str) -> dict:
        result = run("attention", SENTENCE, "-l", str(layer), "-H", str(head), "-m", str(tiny_bert_dir), "--json", *extra)
        return json.loads(result.stdout)

    masked = attention(1, 2, "--mask", "1:2")
    assert masked["masked"] and np.all(np.array(masked["attention"]) == 0)
    uniform = attention(1, 2, "--mask", "1:2", "--ablation", "uniform")
    np.testing.assert_allclose(uniform["attention"], 1 / len(uniform["tokens"]), atol=1e-6)
    # switching off earlier layers changes what a later, unmasked head looks at
    assert not np.allclose(attention(2, 0, "--mask", "0:*,1:*")["attention"], attention(2, 0)["attention"])


def test_attention_csv(run, tiny_bert_dir):
    result = run("attention", SENTENCE, "--layer", "0", "--head", "0", "--model", str(tiny_bert_dir), "--csv")
    rows = list(csv.reader(io.StringIO(result.stdout)))
    header, body = rows[0], rows[1:]
    assert header[1] == "[CLS]" and len(header) == len(body) + 1
    assert body[3][0] == header[4]
    np.testing.assert_allclose([sum(map(float, row[1:])) for row in body], 1, atol=1e-4)


def test_attention_heatmap_for_a_person(run, tiny_bert_dir):
    result = run("attention", SENTENCE, "--layer", "0", "--head", "1", "--model", str(tiny_bert_dir))
    assert result.exit_code == 0
    assert "layer 0" in result.stdout and "head 1" in result.stdout
    for token in ("cabinet", "table", "keys"):
        assert token in result.stdout


def test_pair_input(run, tiny_bert_dir):
    result = run("attention", "The cat sat.", "--pair", "It was tired.", "-l", "0", "-H", "0", "-m", str(tiny_bert_dir), "--json")
    assert json.loads(result.stdout)["tokens"].count("[SEP]") == 2


def test_truncation_warns(run, tiny_bert_dir):
    result = run("attention", "word " * 100, "-l", "0", "-H", "0", "-m", str(tiny_bert_dir), "--json")
    assert result.exit_code == 0
    assert "cut 38" in result.stderr and "maximum of 64" in result.stderr
    assert len(json.loads(result.stdout)["tokens"]) == 64


def test_export_npz(run, tiny_mlm_dir, tmp_path):
    target = tmp_path / "run.npz"
    result = run("export", SENTENCE, "--pair", "They are.", "--mask", "0:1", "-o", str(target), "--model", str(tiny_mlm_dir))
    assert result.exit_code == 0, result.output
    with np.load(target) as data:
        tokens = data["tokens"]
        count = len(tokens)
        assert tokens[0] == "[CLS]"
        assert data["attentions"].shape == (3, 4, count, count)
        assert data["hidden_states"].shape == (4, count, 32)
        assert data["mlm_logits"].shape == (count, 30522)
        assert np.all(data["attentions"][0, 1] == 0)
        assert str(data["mask"]) == "0:1" and str(data["ablation"]) == "zero"
        assert data["word_ids"][0] == -1 and data["special"][0]
        assert set(data["token_type_ids"].tolist()) == {0, 1}
    assert [p.name for p in tmp_path.iterdir()] == ["run.npz"]  # no temp file left behind


def test_export_without_mlm_head_has_no_logits(run, tiny_bert_dir, tmp_path):
    target = tmp_path / "plain.npz"
    assert run("export", SENTENCE, "-o", str(target), "-m", str(tiny_bert_dir)).exit_code == 0
    with np.load(target) as data:
        assert "mlm_logits" not in data.files


def test_export_replaces_an_existing_file_whole(run, tiny_bert_dir, tmp_path):
    target = tmp_path / "out.npz"
    target.write_bytes(b"old")
    assert run("export", SENTENCE, "-o", str(target), "-m", str(tiny_bert_dir)).exit_code == 0
    assert np.load(target)["attentions"].shape[0] == 3


# --- bad input: one line, exit status 2, no traceback, no file -------------------------


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text(run, tiny_bert_dir, text):
    assert_one_line_error(run("attention", text, "-l", "0", "-H", "0", "-m", str(tiny_bert_dir)), "text is empty")


def test_unknown_model_path(run):
    assert_one_line_error(run("info", "--model", "./no/such/model"), "no such directory")


def test_non_encoder_model(run, tmp_path):
    directory = write_config(tmp_path / "gpt2", model_type="gpt2", architectures=["GPT2LMHeadModel"])
    assert_one_line_error(run("info", "--model", str(directory)), "GPT2LMHeadModel")


def test_explorer_refuses_a_model_it_cannot_read_before_importing_torch(tmp_path):
    """`bertscope --model GPT2DIR` prints the same line as any command and never opens the app or loads torch."""
    directory = write_config(tmp_path / "gpt2", model_type="gpt2", architectures=["GPT2LMHeadModel"])
    script = (
        "import sys\n"
        "from bertscope.cli import main\n"
        "try:\n"
        f"    main(['--model', {str(directory)!r}])\n"
        "except SystemExit as stop:\n"
        "    print(stop.code, 'torch' in sys.modules, 'textual' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["2", "False", "False"], done.stderr
    assert done.stderr.strip().splitlines() == [
        "bertscope: error: unsupported architecture GPT2LMHeadModel (model_type 'gpt2'); "
        "bertscope reads bidirectional encoders: albert, bert, camembert, deberta-v2, distilbert, electra, modernbert, mpnet, roberta, xlm-roberta"
    ]


def test_explorer_that_could_not_load_the_model_prints_one_line(run, monkeypatch):
    def fails_to_load(app):
        app.load_error = "could not read the weights in x/model.safetensors: header too large"

    monkeypatch.setattr("bertscope.ui.app.ExplorerApp.run", fails_to_load)
    monkeypatch.setattr("bertscope.cli.attention.check_terminal", lambda: None)  # CliRunner's streams are no terminal
    assert_one_line_error(run(SENTENCE), "could not read the weights in x/model.safetensors")


EXPLORE_WITHOUT_A_TERMINAL = (
    "import sys\n"
    "from bertscope.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit as stop:\n"
    "    print(stop.code, 'torch' in sys.modules, 'textual' in sys.modules)\n"
)


def test_explorer_without_a_terminal_refuses_in_one_line_before_torch():
    """`bertscope < /dev/null`, or under a job scheduler: Textual would read end-of-file at full speed for ever."""
    with open(os.devnull) as nothing:
        done = subprocess.run([sys.executable, "-c", EXPLORE_WITHOUT_A_TERMINAL], stdin=nothing, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["2", "False", "False"], done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertscope: error: the explorer needs a terminal"), lines
    for command in ("attention", "patterns", "probe", "importance", "patch"):  # what runs without one
        assert command in lines[0]
    assert "explore" not in lines[0].split("need none:")[1]


@pytest.mark.parametrize("content", [b"my notes\n", b'{"name": "my-package", "version": "1.0.0"}', b"\x89PNG\r\n\x1a\n", b""])
def test_explorer_refuses_a_session_file_that_is_not_a_session_and_leaves_it_alone(tmp_path, content):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(content)
    done = subprocess.run(
        [sys.executable, "-c", EXPLORE_WITHOUT_A_TERMINAL, "--session", str(notes)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["2", "False", "False"], done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"bertscope: error: {notes} is not a bertscope session ({lines[0].split('session (', 1)[1].split(');')[0]}); "
        "left it as it is: give a new file name, or a session the explorer wrote (--session FILE)"
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and notes.read_bytes() == content


def test_damaged_weights(run, tiny_bert_dir, tmp_path):
    directory = tmp_path / "damaged"
    shutil.copytree(tiny_bert_dir, directory)
    (directory / "model.safetensors").write_bytes(b"\x00" * 100)
    assert_one_line_error(run("info", "--model", str(directory)), "damaged")


@pytest.mark.parametrize(
    "spec, fragment",
    [("0-3", "is not LAYER:HEAD"), ("7:0", "layer 7"), ("0:4", "head 4"), ("x:*", "not a number")],
)
def test_bad_mask_specs(run, tiny_bert_dir, spec, fragment):
    result = run("attention", SENTENCE, "-l", "0", "-H", "0", "--mask", spec, "-m", str(tiny_bert_dir))
    assert_one_line_error(result, fragment)


@pytest.mark.parametrize(
    "option, value, fragment", [("--layer", "3", "--layer 3 is out of range"), ("--head", "-1", "--head -1 is out of range")]
)
def test_layer_or_head_out_of_range(run, tiny_bert_dir, option, value, fragment):
    args = {"--layer": "0", "--head": "0"}
    args[option] = value
    result = run("attention", SENTENCE, "--layer", args["--layer"], "--head", args["--head"], "-m", str(tiny_bert_dir))
    assert_one_line_error(result, fragment)


def test_unwritable_output(run, tiny_bert_dir, tmp_path):
    result = run("export", SENTENCE, "-o", str(tmp_path / "missing-dir" / "x.npz"), "-m", str(tiny_bert_dir))
    assert_one_line_error(result, "does not exist")
    assert not (tmp_path / "missing-dir").exists()


def test_output_is_a_directory(run, tiny_bert_dir, tmp_path):
    assert_one_line_error(run("export", SENTENCE, "-o", str(tmp_path), "-m", str(tiny_bert_dir)), "is a directory")


def test_outputs_and_masks_are_refused_before_the_model_loads(run, tmp_path):
    """A missing model would fail too; the output path and the mask are judged first, in well under a second."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    missing_model = str(tmp_path / "no-such-model")
    assert_one_line_error(run("export", SENTENCE, "-o", str(afile / "x.npz"), "-m", missing_model), f"{afile} is a file, not a directory")
    assert_one_line_error(run("export", SENTENCE, "-o", "/proc/x.npz", "-m", missing_model), "/proc takes no new files")
    assert_one_line_error(run("treebank", "-o", str(afile / "tb.conllu")), "is a file, not a directory")
    assert_one_line_error(
        run("prune", "--objective", "preserve", "--fraction", "0.3", "-o", str(afile / "pruned"), "-m", missing_model),
        "is a file, not a directory",
    )
    assert_one_line_error(
        run("attention", SENTENCE, "--layer", "0", "--head", "0", "--mask", "-1:0", "-m", missing_model),
        "layer -1 in mask item '-1:0' is negative: layers and heads count from 0",
    )


@pytest.mark.parametrize(
    "args, line",
    [
        (["prune", "-O", "preserve", "--limit", "0"], "--limit 0 is out of range: it must be at least 1"),
        (["patterns", "--batch-size", "0"], "--batch-size 0 is out of range: it must be at least 1"),
        (["fill", "A [MASK] day.", "--top", "0"], "--top 0 is out of range: it must be between 1 and 1000"),
        (["prune", "-O", "preserve", "--max-drop", "-1"], "--max-drop -1.0 is out of range: it must be at least 0"),
        (["prune", "-O", "preserve", "--fraction", "0.3", "--weights", "bogus"], "--weights: 'bogus' is not one of 'sliced', 'zeroed'"),
        (["attention", SENTENCE, "--layer", "x"], "--layer: 'x' is not a valid integer"),
        (["attention", "--layer", "0"], "missing argument 'TEXT' (see `bertscope attention --help`)"),
        (["prune", "--bogus"], "no such option '--bogus' (see `bertscope prune --help`)"),
        (["attention", SENTENCE, "-l", "0", "-H", "0", "--json", "--csv"], "give --json or --csv, not both: each prints the whole result"),
        (["patterns", SENTENCE, "--csv", "--json"], "give --json or --csv, not both: each prints the whole result"),
    ],
)
def test_what_click_refuses_is_one_line_too(run, args, line):
    """Issue 54: click's four-line usage block for a bad flag value; the same one line as every other refusal."""
    result = run(*args)
    assert_one_line_error(result, line)
    assert result.stderr.strip() == f"bertscope: error: {line}"


def test_ctrl_c_exits_130_with_one_line(run, monkeypatch, tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("bertscope.cli.common.ModelChoice.open", interrupted)
    result = run("export", SENTENCE, "-o", str(tmp_path / "x.npz"))
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines() == [
        "bertscope: interrupted: export stopped before it finished; no file was left half written"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_read_only_directory(run, tiny_bert_dir, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert_one_line_error(run("export", SENTENCE, "-o", str(locked / "x.npz"), "-m", str(tiny_bert_dir)), "no permission")


def test_failed_write_leaves_no_file(run, tiny_bert_dir, tmp_path, monkeypatch):
    """A write that fails halfway (disk full) leaves neither a partial file nor a temp file (the maps' included)."""
    from bertscope.analyses import export

    def fail(source, member, *args):
        member.write(source.read(100))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export.shutil, "copyfileobj", fail)
    target = tmp_path / "x.npz"
    assert_one_line_error(run("export", SENTENCE, "-o", str(target), "-m", str(tiny_bert_dir)), "No space left")
    assert list(tmp_path.iterdir()) == []


def test_bad_theme(run, tiny_bert_dir):
    assert_one_line_error(
        run("attention", SENTENCE, "-l", "0", "-H", "0", "--theme", "no-such-theme", "-m", str(tiny_bert_dir)), "no-such-theme"
    )


def test_half_precision_on_cpu(run, tiny_bert_dir):
    assert_one_line_error(run("info", "-m", str(tiny_bert_dir), "--device", "cpu", "--dtype", "float16"), "for GPUs")


# --- the real executable ----------------------------------------------------------------


def python_modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"], capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_do_not_import_torch(flag):
    code = f"from bertscope.cli import main\ntry:\n    main(['{flag}'])\nexcept SystemExit:\n    pass"
    modules = python_modules_after(code)
    assert "bertscope.cli" in modules
    assert "torch" not in modules and "transformers" not in modules


def test_module_entry_point_exit_status(tiny_bert_dir):
    done = subprocess.run(
        [sys.executable, "-m", "bertscope", "attention", "x", "-l", "9", "-H", "0", "-m", str(tiny_bert_dir)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "bertscope: error: --layer 9 is out of range: this model has 3 layers (0-2)"


def test_version():
    done = subprocess.run([sys.executable, "-m", "bertscope", "--version"], capture_output=True, text=True)
    from bertscope import __version__

    assert done.returncode == 0 and __version__ in done.stdout


# --- patterns ------------------------------------------------------------------------------


def test_patterns_json_schema(run, tiny_bert_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The keys to the cabinet are on the table.\n# a comment\n\nA dog barked.\nIs it over?\n")
    result = run("patterns", "--data", str(corpus), "-m", str(tiny_bert_dir), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["sentences"] == 3 and data["model"] == str(tiny_bert_dir)
    assert len(data["heads"]) == 3 * 4 and len(data["layers"]) == 3
    head = data["heads"][5]
    assert (head["layer"], head["head"]) == (1, 1)
    assert set(head) >= {
        "layer",
        "head",
        "pattern",
        "pattern_shares",
        "cls",
        "sep",
        "punct",
        "self",
        "prev",
        "next",
        "block",
        "entropy",
        "distance",
    }
    assert head["pattern"] in head["pattern_shares"] and sum(head["pattern_shares"].values()) == pytest.approx(1, abs=1e-5)
    assert set(data["layers"][0]) == {"layer", "pattern_shares", "cls", "sep", "punct"}


def test_patterns_on_one_text_and_the_default_corpus(run, tiny_bert_dir):
    one = json.loads(run("patterns", "A single sentence.", "-m", str(tiny_bert_dir), "--json").stdout)
    assert one["sentences"] == 1
    default = json.loads(run("patterns", "--limit", "40", "-m", str(tiny_bert_dir), "--json").stdout)
    assert default["sentences"] == 40 and default["data"].endswith("sample.txt")


def test_patterns_csv_and_person_output(run, tiny_bert_dir):
    rows = list(csv.DictReader(io.StringIO(run("patterns", "A short one.", "-m", str(tiny_bert_dir), "--csv").stdout)))
    assert len(rows) == 12 and rows[0]["layer"] == "0" and "share_vertical" in rows[0] and "entropy" in rows[0]
    person = run("patterns", "A short one.", "-m", str(tiny_bert_dir)).stdout
    assert "dominant pattern per head" in person and "pattern shares per layer" in person and "[CLS]" in person


def test_patterns_under_a_mask_calls_the_head_off_everywhere(run, tiny_bert_dir, tmp_path):
    """Issue 54: a switched-off head is of its own class, off: in the JSON, the table (×, explained in the legend), and
    the figure; the layer's shares leave it out."""
    arguments = ["patterns", "A short one. And another.", "-m", str(tiny_bert_dir), "--mask", "1:2"]
    data = json.loads(run(*arguments, "--json", "--figure", str(tmp_path / "classes.svg")).stdout)
    head = data["heads"][1 * 4 + 2]
    assert head["pattern"] == "off" and sum(head["pattern_shares"].values()) == 0
    assert [entry["head"] for entry in data["heads"] if entry["pattern"] == "off"] == [2]
    assert sum(data["layers"][1]["pattern_shares"].values()) == pytest.approx(1, abs=1e-5)
    svg = (tmp_path / "classes.svg").read_text()
    assert "×  off (switched off; not in the shares)</text>" in svg and "mask 1:2 (zero)</text>" in svg
    person = run(*arguments).stdout
    grid = person.split("dominant pattern per head")[1].split("V vertical")[0]
    layer_one = next(line.split() for line in grid.splitlines() if line.split()[:1] == ["1"])
    assert layer_one[1 + 2] == "×" and grid.count("×") == 1  # head 1:2, and no other
    words = " ".join(person.split())
    assert "× off (switched off in these passes, of no pattern and left out of the shares)" in words
    assert "pattern shares per layer, heads off left out" in words


def test_patterns_conllu_and_senteval_samples(run, tiny_bert_dir):
    from bertscope.data.corpus import sample_corpus

    for fmt, limit, count in (("conllu", "40", 40), ("senteval", "100", 60)):  # a limit past the end reads all
        data = json.loads(run("patterns", "--data", str(sample_corpus(fmt)), "--limit", limit, "-m", str(tiny_bert_dir), "--json").stdout)
        assert data["sentences"] == count


def test_patterns_skips_and_counts_malformed_lines(run, tiny_bert_dir, tmp_path):
    corpus = tmp_path / "probe.tsv"
    corpus.write_text("tr\t0\tA fine line.\ntr\tbroken line without fields\nte\t1\tAnother one.\n")
    result = run("patterns", "--data", str(corpus), "-m", str(tiny_bert_dir), "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["sentences"] == 2
    assert "skipped 1" in result.stderr and "probe.tsv:2" in result.stderr


def test_patterns_counts_truncation(run, tiny_bert_dir, tmp_path):
    corpus = tmp_path / "long.txt"
    corpus.write_text("word " * 100 + "\nshort\n")
    result = run("patterns", "--data", str(corpus), "-m", str(tiny_bert_dir), "--json")
    assert json.loads(result.stdout)["truncated"] == 38 and "38 tokens were cut" in result.stderr


@pytest.mark.parametrize(
    "content, fragment",
    [(b"", "no sentences found"), (b"# only a comment\n\n", "no sentences found"), (b"ok line\ncaf\xe9\n", "long.txt:2: not UTF-8")],
)
def test_patterns_bad_corpora(run, tiny_bert_dir, tmp_path, content, fragment):
    corpus = tmp_path / "long.txt"
    corpus.write_bytes(content)
    assert_one_line_error(run("patterns", "--data", str(corpus), "-m", str(tiny_bert_dir)), fragment)


def test_patterns_bad_arguments(run, tiny_bert_dir, tmp_path):
    assert_one_line_error(run("patterns", "--data", str(tmp_path / "missing.txt"), "-m", str(tiny_bert_dir)), "missing.txt")
    assert_one_line_error(
        run("patterns", "x", "--data", "y", "-m", str(tiny_bert_dir)), "give either a text or a corpus file, not both (--data FILE)"
    )
    assert_one_line_error(run("patterns", "--data", str(tmp_path), "-m", str(tiny_bert_dir)), "directory")


@pytest.mark.parametrize(
    "command",
    [
        ("syntax", "--data", "CONLLU", "--limit", "20", "--json"),
        ("geometry", "--data", "CONLLU", "--limit", "20", "--json"),
        ("compare", "--data", "CONLLU", "--limit", "20", "--model-b", "MLM", "--json"),
        ("fill", "--cloze", "sample", "--json", "-m", "MLM"),
    ],
)
def test_corpus_commands_write_what_they_print_to_output_files(run, command, tiny_bert_dir, tiny_mlm_dir, tmp_path):
    """Every corpus job takes -o FILE (written atomically, by rank 0 alone under torchrun), as patterns, probe and importance do."""
    args = [{"CONLLU": str(sample_corpus("conllu")), "MLM": str(tiny_mlm_dir)}.get(a, a) for a in command]
    args += [] if "-m" in args else ["-m", str(tiny_bert_dir)]
    printed = run(*args)
    assert printed.exit_code == 0, printed.output
    written = run(*args, "-o", str(tmp_path / "out.json"))
    assert written.exit_code == 0 and written.stdout == ""
    assert (tmp_path / "out.json").read_text() == printed.stdout and json.loads(printed.stdout)


def test_loading_a_model_pauses_the_cycle_collector_and_restores_it(monkeypatch, tiny_bert_dir):
    """Imports and loading run without cycle collection (base.collector: a second of a start), and collection is back
    once the model is loaded, or the explorer has closed without one."""
    import gc

    from bertscope.cli.common import ModelChoice

    during = []
    monkeypatch.setattr("bertscope.api.load", lambda *args, **kwargs: during.append(gc.isenabled()) or "session")
    assert gc.isenabled()
    assert ModelChoice(str(tiny_bert_dir)).open(spinner=False) == "session"
    assert during == [False] and gc.isenabled()

    def never_loads(app):  # the explorer closed before its worker opened the model
        during.append(gc.isenabled())

    monkeypatch.setattr("bertscope.ui.app.ExplorerApp.run", never_loads)
    monkeypatch.setattr("bertscope.cli.attention.check_terminal", lambda: None)
    CliRunner().invoke(main, ["explore", SENTENCE, "--model", str(tiny_bert_dir)])
    assert during == [False, False] and gc.isenabled()


def test_a_corpus_job_pauses_the_cycle_collector_until_it_ends(tiny_session):
    """A corpus job's batches stream without cycle collection (base.collector), and collection is back after the job,
    and after one stopped early."""
    import gc

    from bertscope.analyses.conditions import JobOptions
    from bertscope.analyses.streaming import CorpusBatches

    during = []
    batches = CorpusBatches(
        ["a b", "c d e", "f"], lambda chunk: chunk, lengths=lambda chunk: [len(text) for text in chunk], job=JobOptions(batch_size=1)
    )
    for _ in batches:
        during.append(gc.isenabled())
    assert during == [False, False, False] and gc.isenabled()
    walk = iter(batches)
    next(walk)
    assert not gc.isenabled()
    walk.close()  # a job dropped after its first batch
    assert gc.isenabled()
