"""Every example of the documentation runs, so the docs cannot drift from the tool.

Each `bertscope …` line of the `sh` blocks of docs/*.md and the README runs as written, on the
bundled model and the data bertscope ships, and so does each `python` block; the Python
guide (docs/python.md) also runs as a notebook. Only the files and models a reader would bring
are swapped for real stand-ins made here: a tiny MLM for `bert-base-uncased`, a tiny classifier
for an SST-2 model, generated treebanks for UD files, the shipped samples for the corpora.
The explorer's commands open the app headless and wait until the model has loaded. A command
shown on several pages runs once.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertscope.cli import main
from tests.helpers.models import UPOS_TAGS, save_tiny

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bertscope" / "data"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
GUIDE = ROOT / "docs" / "python.md"  # the Python section, also run as a notebook

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        "not config.getoption('--doc-examples')",
        reason="the documentation's examples take minutes on the bundled model: CI runs them with --doc-examples",
    ),
]


def blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.S)


def shell_examples(page: Path) -> list[str]:
    """The `bertscope` command lines of the page's sh blocks, comments cut (install lines start otherwise)."""
    commands = []
    for block in blocks(page, "sh"):
        for line in block.strip().splitlines():
            for command in line.split(" ; "):
                command = re.sub(r"\s+#.*$", "", command).strip()
                if command.startswith("bertscope"):
                    commands.append(command)
    return commands


def doc_examples() -> dict[str, str]:
    """Each command once (a command on several pages runs on the first), with the page it is from."""
    examples: dict[str, str] = {}
    seen: set[tuple[str, ...]] = set()
    for page in PAGES:
        for command in shell_examples(page):
            if tuple(shlex.split(command)) not in seen:  # the same words, however spaced
                seen.add(tuple(shlex.split(command)))
                examples[command] = page.relative_to(ROOT).as_posix()
    return examples


EXAMPLES = doc_examples()
PYTHON_EXAMPLES = [  # the guide's blocks run as a notebook (below), the others here
    (page.relative_to(ROOT).as_posix(), block) for page in PAGES if page != GUIDE for block in blocks(page, "python")
]


def promises(block: str) -> list[str]:
    """`print(x)  # (6, 12): what it is` promises that `(6, 12)` is printed."""
    return [
        re.match(r"\s*(\(.*?\))(:|$)", line.split("#", 1)[1]).group(1)
        for line in block.splitlines()
        if line.startswith("print(") and re.search(r"#\s*\(", line)
    ]


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict[str, str]:
    """Placeholder in the docs → the real file or model this test uses for it."""
    root = tmp_path_factory.mktemp("docs")
    mlm = save_tiny(root / "bert-base-uncased", "BertForMaskedLM", seed=1, num_hidden_layers=12)  # `--mask 10:*,11:*`
    classifier = save_tiny(
        root / "sst2",
        "BertForSequenceClassification",
        seed=2,
        num_hidden_layers=12,  # `--mask 3:*`
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    reviews = root / "sst.tsv"  # SST-2 as a SentEval file: split, label, sentence
    reviews.write_text(
        "".join(
            f"{split}\t{label}\t{text}\n"
            for split, label, text in [
                ("tr", "positive", "A fine, moving film."),
                ("tr", "negative", "Dull and far too long."),
                ("tr", "positive", "The cast is wonderful."),
                ("tr", "negative", "I wanted my two hours back."),
                ("va", "positive", "Warm, funny and wise."),
                ("va", "negative", "The plot makes no sense."),
                ("te", "positive", "A joy from start to finish."),
                ("te", "negative", "Flat jokes and a tired story."),
            ]
        )
    )
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]  # a token classifier as the importance page makes it
    tagger = save_tiny(
        root / "tiny-ner",
        "BertForTokenClassification",
        seed=3,
        num_labels=5,
        id2label=dict(enumerate(labels)),
        label2id={n: i for i, n in enumerate(labels)},
    )
    ner = root / "ner.txt"
    ner.write_text(
        "-DOCSTART- O\n\nDante B-PER\nwas O\nborn O\nin O\nFlorence B-LOC\n\nJohn B-PER\nSmith I-PER\nvisited O\nNew B-LOC\nYork I-LOC\n"
    )
    upos = UPOS_TAGS
    pos_tagger = save_tiny(root / "pos-tagger", "BertForTokenClassification", seed=4, num_labels=len(upos), id2label=dict(enumerate(upos)))
    squad_model = save_tiny(root / "squad-model", "BertForQuestionAnswering", seed=5)  # an extractive QA model
    context = "Dante Alighieri was born in Florence in 1265 and died in Ravenna in 1321, far from his city."
    questions = [("q1", "Where was Dante born?", "Florence"), ("q2", "Where did he die?", "Ravenna"), ("q3", "When did he die?", "1321")]
    qas = [{"id": i, "question": q, "answers": [{"text": a, "answer_start": context.index(a)}]} for i, q, a in questions]
    squad = root / "squad-dev.json"
    squad.write_text(json.dumps({"version": "1.1", "data": [{"title": "Dante", "paragraphs": [{"context": context, "qas": qas}]}]}))
    from bertscope.model.model_files import bundled_model_dir

    finetuned = shutil.copytree(bundled_model_dir(), root / "minilm-finetuned")
    wiki = root / "wiki.txt"  # a corpus of the reader's: 40 of the sample's sentences (`--limit 100` reads them all)
    sentences = [line for line in (DATA / "sample.txt").read_text().splitlines() if line.strip() and not line.startswith("#")]
    wiki.write_text("\n".join(sentences[:40]) + "\n")
    treebanks = {}  # UD files: generated treebanks, large enough for every UPOS class and relation the examples read
    for name, sentences, seed in (("train", 120, 1), ("dev", 60, 2), ("test", 60, 3), ("treebank", 120, 4)):
        result = CliRunner().invoke(main, ["treebank", "-o", str(root / f"{name}.conllu"), "-n", str(sentences), "--seed", str(seed)])
        assert result.exit_code == 0, result.output
        treebanks[name] = str(root / f"{name}.conllu")
    return {
        "~/models/bert-base-uncased": str(mlm),
        "bert-base-uncased": str(mlm),
        "~/models/my-sst2-classifier": str(classifier),
        "./tiny-ner": str(tagger),
        "ner.txt": str(ner),
        "~/models/my-pos-tagger": str(pos_tagger),
        "~/models/my-squad-model": str(squad_model),
        "squad-dev.json": str(squad),
        "sts-dev.tsv": str(DATA / "sample_pairs.tsv"),
        "~/checkpoints/bert-sst2": str(classifier),
        "./minilm-finetuned": str(finetuned),
        "pruned-minilm/": str(root / "pruned-minilm"),
        "zeroed-minilm/": str(root / "zeroed-minilm"),
        "minilm-sae/": str(root / "minilm-sae"),
        "work.json": str(root / "work.json"),
        "train.conllu": treebanks["train"],
        "dev.conllu": treebanks["dev"],
        "test.conllu": treebanks["test"],
        "en_ewt-ud-train.conllu": treebanks["treebank"],
        "en_ewt-ud-dev.conllu": treebanks["dev"],
        "treebank.conllu": treebanks["treebank"],
        "bertscope/data/sample.conllu": str(DATA / "sample.conllu"),
        "probing.tsv": str(DATA / "sample.tsv"),
        "sst.tsv": str(reviews),
        "wiki.txt": str(wiki),
        "sst.txt": str(DATA / "sample.txt"),
        "cache_dir": str(root / "cache"),
    }


@pytest.fixture
def explorer_runs(monkeypatch):
    """The explorer opens headless, waits for its model, and closes; the apps are kept to check."""
    from bertscope.ui.app import ExplorerApp

    apps = []

    def headless(app):
        async def go():
            async with app.run_test(size=(100, 30)) as pilot:
                for _ in range(1200):
                    if app.backend is not None or app.load_error is not None:
                        break
                    await pilot.pause(0.05)

        asyncio.run(go())
        apps.append(app)

    monkeypatch.setattr(ExplorerApp, "run", headless)
    monkeypatch.setattr("bertscope.cli.attention.check_terminal", lambda: None)  # CliRunner's streams are no terminal
    return apps


def test_the_docs_have_examples_of_every_command():
    """Every analysis command is shown somewhere, and every analysis page shows a command."""
    from bertscope.cli import main as group

    shown = {shlex.split(example)[1] for example in EXAMPLES if len(shlex.split(example)) > 1}
    analyses = {
        "attention",
        "patterns",
        "syntax",
        "mixing",
        "probe",
        "erase",
        "fill",
        "attribute",
        "patch",
        "importance",
        "prune",
        "geometry",
        "compare",
        "export",
        "info",
        "sae",
    }
    assert analyses <= shown, analyses - shown
    assert analyses <= set(group.commands)
    pages = sorted((ROOT / "docs" / "analyses").glob("*.md"))
    assert len(pages) >= 13
    for page in pages:
        assert shell_examples(page), f"{page.name} shows no command"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: f"{EXAMPLES[example]}: {example[10:110]}")
def test_doc_example_runs(example, stand_ins, explorer_runs, monkeypatch, tmp_path):
    monkeypatch.setenv("BERTSCOPE_CACHE_DIR", stand_ins["cache_dir"])
    monkeypatch.chdir(tmp_path)  # where the examples write their figures and files
    args = []
    for word in shlex.split(example)[1:]:
        args.append(stand_ins.get(word, word))
    if example.startswith("bertscope prune") and "-o" in args:
        shutil.rmtree(args[args.index("-o") + 1], ignore_errors=True)  # -o takes a new directory
    elif "pruned-minilm/" in example:
        _make_pruned_model(stand_ins)
    elif example.startswith("bertscope sae train") and "-o" in args:
        args[args.index("-o") + 1] = str(tmp_path / "sae")  # a new directory of its own (`sae features` reads the stand-in)
    elif "minilm-sae/" in example:
        _make_sae(stand_ins)
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, f"{EXAMPLES[example]}: {example}\n{result.stderr}"
    assert "Traceback" not in result.output
    if args and args[0] not in main.commands:  # the explorer
        (app,) = explorer_runs
        assert app.load_error is None and app.backend is not None, app.load_error


def _make_pruned_model(stand_ins) -> None:
    """`bertscope info --model pruned-minilm/` follows the prune example that writes it."""
    target = Path(stand_ins["pruned-minilm/"])
    if (target / "config.json").is_file():
        return
    shutil.rmtree(target, ignore_errors=True)
    result = CliRunner().invoke(
        main, ["prune", "--data", stand_ins["wiki.txt"], "--limit", "16", "--objective", "preserve", "--fraction", "0.3", "-o", str(target)]
    )
    assert result.exit_code == 0, result.stderr


def _make_sae(stand_ins) -> None:
    """`bertscope sae features --sae minilm-sae/` reads what the `sae train` example writes, made here once."""
    target = Path(stand_ins["minilm-sae/"])
    if (target / "cfg.json").is_file():
        return
    shutil.rmtree(target, ignore_errors=True)
    sample = str(DATA / "sample.conllu")
    result = CliRunner().invoke(
        main, ["sae", "train", "--data", sample, "--limit", "100", "--layer", "3", "-o", str(target), "--epochs", "2"]
    )
    assert result.exit_code == 0, result.stderr


def _python_id(value: str) -> str:
    return value if value.endswith(".md") else value.splitlines()[-1][:60]  # the page, then the block's last line


@pytest.mark.parametrize(("page", "block"), PYTHON_EXAMPLES, ids=_python_id)
def test_doc_python_example_runs(page, block, stand_ins, monkeypatch, capsys, tmp_path):
    """The Python examples run as written, and print what their comments say they print."""
    monkeypatch.setenv("BERTSCOPE_CACHE_DIR", stand_ins["cache_dir"])
    monkeypatch.chdir(tmp_path)  # where the examples write their figures
    exec(compile(block, page, "exec"), {"__name__": "docs"})
    printed = capsys.readouterr().out.splitlines()
    assert promises(block)
    for value in promises(block):
        assert value in printed, (value, printed)


def test_python_guide_runs_as_a_notebook(stand_ins, monkeypatch, tmp_path):
    """The Python guide's blocks, cut into cells at blank lines, run in Jupyter (nbclient, a kernel on this
    interpreter): nothing is written to stderr, they print what their comments promise, and what the cells
    display is what a reader wants to see."""
    import json
    import sys

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    kernels = tmp_path / "jupyter" / "kernels" / "bertscope-test"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(
        json.dumps(
            {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "test", "language": "python"}
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("BERTSCOPE_CACHE_DIR", stand_ins["cache_dir"])
    cells = [cell.strip() for block in blocks(GUIDE, "python") for cell in block.split("\n\n") if cell.strip()]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    kernel = KernelManager(kernel_name="bertscope-test", transport="ipc", ip=str(tmp_path / "kernel"))  # no race for TCP ports
    NotebookClient(notebook, km=kernel, timeout=900, resources={"metadata": {"path": str(tmp_path)}}).execute()

    def shown(expression: str) -> dict:
        """What the cell whose last line is `expression` (its comment aside) displays."""
        (cell,) = [cell for cell in notebook.cells if re.sub(r"\s+#.*$", "", cell.source.splitlines()[-1]) == expression]
        (result,) = [output for output in cell.outputs if output.output_type == "execute_result"]
        return result.data

    stderr = "".join(output.text for cell in notebook.cells for output in cell.outputs if output.get("name") == "stderr")
    assert "TqdmWarning" not in stderr and "Traceback" not in stderr, stderr  # a note (BertscopeNote) may show, nothing else
    printed = "".join(output.text for cell in notebook.cells for output in cell.outputs if output.get("name") == "stdout").splitlines()
    guide = blocks(GUIDE, "python")
    assert all(promises(block) for block in guide)
    for value in [value for block in guide for value in promises(block)]:
        assert value in printed, (value, printed)
    model = shown("model")["text/plain"]
    assert model.startswith("Session(all-MiniLM-L6-v2") and "6 layers × 12 heads" in model and " at 0x" not in model
    stats = shown("stats")
    assert stats["text/plain"].startswith("PatternResult(100 sentences") and "\n" not in stats["text/plain"]
    assert "<table>" in stats["text/html"] and '<img alt="PatternResult figure" src="data:image/png;base64,' in stats["text/html"]
    frame = shown('table.sort_values("cls", ascending=False).head(3)')
    assert frame["text/html"].count("<tr") == 4  # a DataFrame's own view: the header and three heads
