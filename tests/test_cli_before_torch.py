"""Input that can be judged without the model is refused before torch is imported.

The cases run the real command line one after another in one fresh interpreter, which
reports each one's exit status and whether torch or transformers had been imported by its
end: a refusal must be one line, status 2, with neither (so it prints in a fraction of a
second, not after 5-9 s of imports).
Numbers are judged against the model's config.json read as JSON.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.cli import assert_a_refusal, refusals

SENTENCE = "The keys to the cabinet are on the table."


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_bert_dir):
    """Paths the cases name: a tiny saved model (3 layers x 4 heads), a plain file, a missing one."""
    root = tmp_path_factory.mktemp("refusals")
    (root / "afile").write_text("x\n")
    small_vocabulary = shutil.copytree(tiny_bert_dir, root / "small-vocabulary")
    config = json.loads((small_vocabulary / "config.json").read_text())
    (small_vocabulary / "config.json").write_text(json.dumps(config | {"vocab_size": 100}))
    paths = {
        "TINY": str(tiny_bert_dir),
        "AFILE": str(root / "afile"),
        "MISSING": str(root / "missing.txt"),
        "OUT": str(root / "out.npz"),
        "SMALL_VOCABULARY": str(small_vocabulary),
    }
    # Only config.json differs (nothing here loads them): families whose heads cannot be sliced, and a sliced copy.
    for name, changes in {
        "ALBERT": {"model_type": "albert", "architectures": ["AlbertForMaskedLM"]},
        "MODERNBERT": {"model_type": "modernbert", "architectures": ["ModernBertForMaskedLM"]},
        "MPNET": {"model_type": "mpnet", "architectures": ["MPNetForMaskedLM"]},
        "SLICED": {"pruned_heads": {"1": [0, 2]}},
    }.items():
        copy = shutil.copytree(tiny_bert_dir, root / name.lower())
        (copy / "config.json").write_text(json.dumps(config | changes))
        paths[name] = str(copy)
    return paths


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
    (
        ("attention", SENTENCE, "-l", "0", "-H", "0", "--mask", "0-3"),
        "mask item '0-3' is not LAYER:HEAD; write e.g. 0:3 for one head or 2:* for a layer",
    ),
    (
        ("patterns", SENTENCE, "--mask", "x:*"),
        "layer 'x' in mask item 'x:*' is not a number; write e.g. 0:3 for one head or 2:* for a layer",
    ),
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
    (
        ("compare", "--limit", "3", "--model-b", "MISSING"),
        "model MISSING: no such directory; give a model directory or a Hugging Face name (--model-b B)",
    ),
]

OUT_OF_RANGE_TINY = [  # 3 layers x 4 heads, hidden states 0-3
    (("attention", SENTENCE, "-l", "3", "-H", "0"), "--layer 3 is out of range: this model has 3 layers (0-2)"),
    (("attention", SENTENCE, "-l", "0", "-H", "4"), "--head 4 is out of range: this model has 4 heads (0-3)"),
    (
        ("attention", SENTENCE, "-l", "0", "-H", "0", "--mask", "0:4"),
        "head 4 in mask item '0:4' is out of range: this model has 4 heads (0-3)",
    ),
    (("export", SENTENCE, "-o", "OUT", "--mask", "3:*"), "layer 3 in mask item '3:*' is out of range: this model has 3 layers (0-2)"),
    (("patterns", SENTENCE, "--mask", "1:1,5:0"), "layer 5 in mask item '5:0' is out of range: this model has 3 layers (0-2)"),
    (("probe", "--task", "subject_number", "--mask", "0:9"), "head 9 in mask item '0:9' is out of range: this model has 4 heads (0-3)"),
    (("fill", "A [MASK] day.", "--mask", "7:0"), "layer 7 in mask item '7:0' is out of range: this model has 3 layers (0-2)"),
    (("geometry", SENTENCE, "--layer", "4"), "--layer 4 is out of range: hidden-state layers are 0 (embeddings) to 3"),
    (
        ("attribute", SENTENCE, "--probe", "subject_number", "--layer", "9"),
        "--layer 9 is out of range: hidden-state layers are 0 (embeddings) to 3",
    ),
    (
        ("importance", SENTENCE, "-O", "probe", "--task", "subject_number", "--probe-layer", "-1"),
        "--probe-layer -1 is out of range: hidden-state layers are 0 (embeddings) to 3",
    ),
    (
        ("attention", SENTENCE, "-l", "0", "-H", "0", "--max-length", "100"),
        "a maximum length of 100 tokens is more than this model takes (64: its position embeddings); give at most 64 (--max-length N)",
    ),
]

JUDGED_FROM_THE_CONFIG = [  # issue 54: what the config and the arguments tell is refused before any work
    (
        ("prune", "-O", "preserve", "--fraction", "0.5", "-o", "OUT", "-m", "ALBERT"),
        "ALBERT heads cannot be sliced out of its weights; write a copy with the heads' weights zeroed instead (--weights)",
    ),
    (("prune", "-O", "preserve", "--fraction", "0.5", "-o", "OUT", "-m", "MODERNBERT"), "ModernBERT heads cannot be sliced"),
    (("prune", "-O", "preserve", "--fraction", "0.5", "-o", "OUT", "--weights", "sliced", "-m", "MPNET"), "MPNet heads cannot be sliced"),
    (
        ("prune", "-O", "preserve", "--fraction", "0.5", "-o", "OUT", "--weights", "zeroed", "-m", "SLICED"),
        "a zeroed copy keeps every head's weights, but this model has heads sliced out already",
    ),
    (
        ("prune", "-O", "preserve", "--curve", "--weights", "zeroed", "-m", "TINY"),
        "--weights says how the copy written with -o DIR keeps the pruned heads: give it with --fraction F -o DIR",
    ),
    (("prune", "-O", "preserve", "--fraction", "0.5", "--weights", "sliced", "-m", "TINY"), "--weights says how the copy"),
    (
        ("importance", SENTENCE, "-O", "mlm", "-m", "TINY"),
        "objective 'mlm' needs a model with an MLM head; BertModel has none; objectives that work for this model: probe, preserve, similarity, embedding",
    ),
    (
        ("erase", "--task", "main_verb_tense", "--measure", "mlm", "-m", "TINY"),
        "measure 'mlm' needs a model with an MLM head; BertModel has none; measures that work for this model: preserve, probe:TASK",
    ),
    (
        ("erase", "--task", "main_verb_tense", "--measure", "class", "-m", "TINY"),
        "measure 'class' needs a sequence-classification model; BertModel is not one; measures that work for this model: preserve, probe:TASK (--measure M)",
    ),
    (
        ("erase", "--task", "main_verb_tense", "--measure", "probe:nosuch", "-m", "TINY"),
        "unknown task 'nosuch' in measure 'probe:nosuch'; a probe measure takes the task erased (probe:main_verb_tense) (--measure M)",
    ),
    (
        ("erase", "--task", "upos", "--measure", "probe:nosuch", "-m", "TINY"),
        "a probe measure takes the task erased (probe:upos) or another word-level task (probe:xpos, probe:deprel)",
    ),
    (
        ("erase", "--task", "upos", "--measure", "probe:subject_number", "-m", "TINY"),
        "measure 'probe:subject_number' probes 'subject_number', whose labels the sentences erased for 'upos' do not carry",
    ),
    (
        ("erase", "--task", "main_verb_tense", "--measure", "probe:upos", "-m", "TINY"),
        "measure 'probe:upos' probes 'upos', whose labels the sentences erased for 'main_verb_tense' do not carry",
    ),
]

OUT_OF_RANGE_BUNDLED = [  # all-MiniLM-L6-v2: 6 layers x 12 heads
    (("attention", SENTENCE, "-l", "6", "-H", "0"), "--layer 6 is out of range: this model has 6 layers (0-5)"),
    (("attention", SENTENCE, "-l", "5", "-H", "12"), "--head 12 is out of range: this model has 12 heads (0-11)"),
    (
        ("attribute", SENTENCE, "--probe", "subject_number", "--mask", "2:12"),
        "head 12 in mask item '2:12' is out of range: this model has 12 heads (0-11)",
    ),
]


def ids(value) -> str:
    return " ".join(value) if isinstance(value, tuple) else ""


def case(args: tuple[str, ...], files: dict, model: str | None = None) -> list[str]:
    return [*(named(word, files) for word in args), *(["-m", files[model]] if model else [])]


VOCABULARY_CASE = ("fill", "A [MASK] day.", "--top", "500")


@pytest.fixture(scope="module")
def refused(files) -> dict:
    """Every case of this file, run in one new interpreter (see `refusals`)."""
    cases = [
        case(args, files) for args, _ in EMPTY_TEXT + BAD_MASK + MISSING_OR_UNWRITABLE_FILE + OUT_OF_RANGE_BUNDLED + JUDGED_FROM_THE_CONFIG
    ]
    cases += [case(args, files, "TINY") for args, _ in OUT_OF_RANGE_TINY]
    cases.append(case(VOCABULARY_CASE, files, "SMALL_VOCABULARY"))
    return refusals(cases)


@pytest.mark.parametrize(("args", "message"), EMPTY_TEXT, ids=ids)
def test_empty_text(refused, files, args, message):
    assert_a_refusal(refused[tuple(case(args, files))], message)


@pytest.mark.parametrize(("args", "message"), JUDGED_FROM_THE_CONFIG, ids=ids)
def test_what_the_config_and_the_arguments_rule_out(refused, files, args, message):
    assert_a_refusal(refused[tuple(case(args, files))], message)
    assert not Path(files["OUT"]).exists()


@pytest.mark.parametrize(("args", "message"), BAD_MASK, ids=ids)
def test_malformed_mask(refused, files, args, message):
    assert_a_refusal(refused[tuple(case(args, files))], message)


@pytest.mark.parametrize(("args", "message"), MISSING_OR_UNWRITABLE_FILE, ids=ids)
def test_missing_or_unwritable_file(refused, files, args, message):
    assert_a_refusal(refused[tuple(case(args, files))], named(message, files))


@pytest.mark.parametrize(("args", "message"), OUT_OF_RANGE_TINY, ids=ids)
def test_out_of_range_for_a_tiny_saved_model(refused, files, args, message):
    assert_a_refusal(refused[tuple(case(args, files, "TINY"))], message)


@pytest.mark.parametrize(("args", "message"), OUT_OF_RANGE_BUNDLED, ids=ids)
def test_out_of_range_for_the_bundled_model(refused, files, args, message):
    assert_a_refusal(refused[tuple(case(args, files))], message)


def test_more_guesses_than_the_vocabulary_has(refused, files):
    """config.json says 100 tokens: --top 500 is refused without reading the weights."""
    assert_a_refusal(
        refused[tuple(case(VOCABULARY_CASE, files, "SMALL_VOCABULARY"))],
        "--top 500 is more guesses than this model has tokens (100); give at most that",
    )


def test_the_check_sees_torch_when_the_model_does_run(files):
    """The same wrapper on a valid command: it exits 0 and torch was imported, so the refusals above mean something."""
    args = ("attention", SENTENCE, "-l", "2", "-H", "3", "--json", "-m", files["TINY"])
    report = refusals([list(args)])[args]
    assert report["code"] == 0 and report["imported"] == ["torch", "transformers"]
    assert json.loads(report["stdout"])["layer"] == 2
