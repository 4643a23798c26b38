"""Input that can be judged without the model is refused before torch is imported.

Each case runs the real command line in a fresh interpreter and reports its exit status
and whether torch or transformers were imported: a refusal must be one line, status 2,
with neither (so it prints in a fraction of a second, not after 5-9 s of imports).
Numbers are judged against the model's config.json read as JSON.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

RUN_AND_REPORT = """
import json, sys
from bertscope.cli import main
try:
    main(sys.argv[1:])
    code = 0
except SystemExit as stop:
    code = stop.code
print(json.dumps({"code": code, "imported": sorted({"torch", "transformers"} & set(sys.modules))}))
"""

SENTENCE = "The keys to the cabinet are on the table."


def bertscope(*args: str) -> tuple[dict, str, str]:
    """(exit status and heavy imports, stdout before the report, stderr) of `bertscope ARGS` in a new process."""
    done = subprocess.run([sys.executable, "-c", RUN_AND_REPORT, *args], capture_output=True, text=True, timeout=120)
    *printed, report = done.stdout.splitlines() or [""]
    assert report.startswith("{"), done.stderr
    return json.loads(report), "\n".join(printed), done.stderr


def assert_refused_before_torch(args, message: str) -> None:
    """Status 2, one line on stderr holding `message`, nothing on stdout, neither torch nor transformers imported."""
    report, printed, stderr = bertscope(*args)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertscope: error: ") and message in lines[0], stderr
    assert report == {"code": 2, "imported": []} and printed == ""


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_bert_dir):
    """Paths the cases name: a tiny saved model (3 layers x 4 heads), a plain file, a missing one."""
    root = tmp_path_factory.mktemp("refusals")
    (root / "afile").write_text("x\n")
    small_vocabulary = shutil.copytree(tiny_bert_dir, root / "small-vocabulary")
    config = json.loads((small_vocabulary / "config.json").read_text())
    (small_vocabulary / "config.json").write_text(json.dumps(config | {"vocab_size": 100}))
    return {"TINY": str(tiny_bert_dir), "AFILE": str(root / "afile"), "MISSING": str(root / "missing.txt"),
            "OUT": str(root / "out.npz"), "SMALL_VOCABULARY": str(small_vocabulary)}


def named(text: str, files: dict) -> str:
    """`text` with the placeholders of `files` (AFILE, MISSING…) replaced by their paths."""
    for name, path in files.items():
        text = text.replace(name, path)
    return text


EMPTY_TEXT = [
    (("attention", "", "-l", "0", "-H", "0"), "the text is empty; give a sentence to analyse"),
    (("attention", SENTENCE, "--pair", " ", "-l", "0", "-H", "0"), "the pair text is empty; give a second sentence or leave --pair out"),
    (("export", "  ", "-o", "OUT"), "the text is empty; give a sentence to analyse"),
    (("patterns", " "), "the text is empty; give a sentence, or a corpus file (--data FILE)"),
    (("geometry", ""), "the text is empty; give a sentence, or a corpus file (--data FILE)"),
    (("importance", " ", "-O", "preserve"), "the text is empty; give a sentence, or a corpus file (--data FILE)"),
    (("fill", " "), "the text is empty; give a sentence with [MASK] where the missing word goes"),
    (("attribute", ""), "the text is empty; give a sentence to explain"),
]

BAD_MASK = [
    (("attention", SENTENCE, "-l", "0", "-H", "0", "--mask", "0-3"),
     "mask item '0-3' is not LAYER:HEAD; write e.g. 0:3 for one head or 2:* for a layer"),
    (("patterns", SENTENCE, "--mask", "x:*"), "layer 'x' in mask item 'x:*' is not a number; write e.g. 0:3 for one head or 2:* for a layer"),
    (("probe", "--task", "subject_number", "--mask", "1:-2"), "head -2 in mask item '1:-2' is negative: layers and heads count from 0"),
]

MISSING_OR_UNWRITABLE_FILE = [
    (("patterns", "--data", "MISSING"), "MISSING: no such file; check the path"),
    (("geometry", "--data", "AFILE/x.txt"), "AFILE/x.txt: cannot read it (Not a directory); check the file"),
    (("importance", "--data", "MISSING", "-O", "preserve"), "MISSING: no such file; check the path"),
    (("probe", "--task", "upos", "--data", "MISSING"), "MISSING: no such file; check the path"),
    (("fill", "--cloze", "MISSING"), "MISSING: no such file; check the path"),
    (("attribute", SENTENCE, "--probe", "subject_number", "--data", "MISSING"), "MISSING: no such file; check the path"),
    (("export", SENTENCE, "-o", "AFILE/x.npz"), "cannot write AFILE/x.npz: AFILE is a file, not a directory"),
    (("prune", "-O", "preserve", "--fraction", "0.3", "-o", "AFILE/pruned"), "cannot write AFILE/pruned: AFILE is a file, not a directory"),
    (("prune", "-O", "preserve", "--fraction", "1.5"), "--fraction 1.5 must lie strictly between 0 and 1 (e.g. 0.3 for 30% of the heads)"),
    (("info", "-m", "MISSING"), "model MISSING: no such directory; give a model directory or a Hugging Face name (--model M)"),
    (("compare", "--limit", "3", "--model-b", "MISSING"), "model MISSING: no such directory; give a model directory or a Hugging Face name (--model-b B)"),
]

OUT_OF_RANGE_TINY = [  # 3 layers x 4 heads, hidden states 0-3
    (("attention", SENTENCE, "-l", "3", "-H", "0"), "--layer 3 is out of range: this model has 3 layers (0-2)"),
    (("attention", SENTENCE, "-l", "0", "-H", "4"), "--head 4 is out of range: this model has 4 heads (0-3)"),
    (("attention", SENTENCE, "-l", "0", "-H", "0", "--mask", "0:4"), "head 4 in mask item '0:4' is out of range: this model has 4 heads (0-3)"),
    (("export", SENTENCE, "-o", "OUT", "--mask", "3:*"), "layer 3 in mask item '3:*' is out of range: this model has 3 layers (0-2)"),
    (("patterns", SENTENCE, "--mask", "1:1,5:0"), "layer 5 in mask item '5:0' is out of range: this model has 3 layers (0-2)"),
    (("probe", "--task", "subject_number", "--mask", "0:9"), "head 9 in mask item '0:9' is out of range: this model has 4 heads (0-3)"),
    (("fill", "A [MASK] day.", "--mask", "7:0"), "layer 7 in mask item '7:0' is out of range: this model has 3 layers (0-2)"),
    (("geometry", SENTENCE, "--layer", "4"), "--layer 4 is out of range: hidden-state layers are 0 (embeddings) to 3"),
    (("attribute", SENTENCE, "--probe", "subject_number", "--layer", "9"), "--layer 9 is out of range: hidden-state layers are 0 (embeddings) to 3"),
    (("importance", SENTENCE, "-O", "probe", "--task", "subject_number", "--probe-layer", "-1"),
     "--probe-layer -1 is out of range: hidden-state layers are 0 (embeddings) to 3"),
    (("attention", SENTENCE, "-l", "0", "-H", "0", "--max-length", "100"),
     "a maximum length of 100 tokens is more than this model takes (64: its position embeddings); give at most 64 (--max-length N)"),
]

OUT_OF_RANGE_BUNDLED = [  # all-MiniLM-L6-v2: 6 layers x 12 heads
    (("attention", SENTENCE, "-l", "6", "-H", "0"), "--layer 6 is out of range: this model has 6 layers (0-5)"),
    (("attention", SENTENCE, "-l", "5", "-H", "12"), "--head 12 is out of range: this model has 12 heads (0-11)"),
    (("attribute", SENTENCE, "--probe", "subject_number", "--mask", "2:12"), "head 12 in mask item '2:12' is out of range: this model has 12 heads (0-11)"),
]


@pytest.mark.parametrize(("args", "message"), EMPTY_TEXT, ids=lambda value: " ".join(value) if isinstance(value, tuple) else "")
def test_empty_text(files, args, message):
    assert_refused_before_torch([named(word, files) for word in args], message)


@pytest.mark.parametrize(("args", "message"), BAD_MASK, ids=lambda value: " ".join(value) if isinstance(value, tuple) else "")
def test_malformed_mask(args, message):
    assert_refused_before_torch(args, message)


@pytest.mark.parametrize(("args", "message"), MISSING_OR_UNWRITABLE_FILE, ids=lambda value: " ".join(value) if isinstance(value, tuple) else "")
def test_missing_or_unwritable_file(files, args, message):
    assert_refused_before_torch([named(word, files) for word in args], named(message, files))


@pytest.mark.parametrize(("args", "message"), OUT_OF_RANGE_TINY, ids=lambda value: " ".join(value) if isinstance(value, tuple) else "")
def test_out_of_range_for_a_tiny_saved_model(files, args, message):
    assert_refused_before_torch([*(named(word, files) for word in args), "-m", files["TINY"]], message)


@pytest.mark.parametrize(("args", "message"), OUT_OF_RANGE_BUNDLED, ids=lambda value: " ".join(value) if isinstance(value, tuple) else "")
def test_out_of_range_for_the_bundled_model(args, message):
    assert_refused_before_torch(args, message)


def test_more_guesses_than_the_vocabulary_has(files):
    """config.json says 100 tokens: --top 500 is refused without reading the weights."""
    assert_refused_before_torch(
        ["fill", "A [MASK] day.", "--top", "500", "-m", files["SMALL_VOCABULARY"]],
        "--top 500 is more guesses than this model has tokens (100); give at most that",
    )


def test_the_check_sees_torch_when_the_model_does_run(files):
    """The same wrapper on a valid command: it exits 0 and torch was imported, so the refusals above mean something."""
    report, printed, _ = bertscope("attention", SENTENCE, "-l", "2", "-H", "3", "--json", "-m", files["TINY"])
    assert report == {"code": 0, "imported": ["torch", "transformers"]}
    assert json.loads(printed)["layer"] == 2
