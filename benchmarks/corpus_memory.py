"""Peak memory of every corpus job against the number of sentences, on varied text.

    python benchmarks/corpus_memory.py [--sizes 1000,16000] [--jobs patterns,geometry,...] [--conllu FILE] [-o FILE.json]

Each job is the real command (`bertscope patterns --data FILE --json`, ...) on the bundled
model, run in a fresh process per corpus size; the process reports its own peak resident
memory (`ru_maxrss`) and, on Linux, the peak of its anonymous memory (RssAnon, sampled every
20 ms: what the process allocated, leaving out the model's memory-mapped weights and the
probing feature cache, whose mapped pages count in RSS but are the file, not a leak).

The corpus is varied and never cycled: sentences of the built-in generated treebank
(`bertscope treebank`), every seventh line two to four of them joined into one long
sentence, so lengths run from 3 to 70 words and the longest sentences of a corpus grow
with its size, as in real text. Budget (issue 15): peak memory at most +10% from the
smallest to the largest size, for every job. `fill --cloze` needs an MLM head, which the
bundled model lacks: it runs on a small random BertForMaskedLM with the bundled tokenizer.
With `--conllu FILE` the corpora are the first sentences of a real CoNLL-U treebank instead
(e.g. UD_English-EWT, github.com/UniversalDependencies/UD_English-EWT, whose train, dev and
test files together hold 16,622 sentences): its blocks as they are for probing, the FORM
column joined by spaces as the plain text of the other jobs. `--tiny` runs the bundled-model
jobs on a small random BertModel (hidden 128, 2 layers, 2 heads) with the bundled tokenizer:
the same code paths, for `importance --method ablation` and `prune --curve`, whose
per-head forward passes take MiniLM about 10 minutes per 1,000 sentences on one core.
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import emit  # benchmarks/common.py, found beside this script

JOBS = {
    "patterns": ["patterns", "--data", "{text}", "--json"],
    "patterns-norms": ["patterns", "--data", "{text}", "--norms", "--json"],
    "syntax": ["syntax", "--data", "{conllu}", "--json"],
    "importance-gradient": ["importance", "--data", "{text}", "-O", "preserve", "--json"],
    "importance-ablation": ["importance", "--data", "{text}", "-O", "preserve", "--method", "ablation", "--json"],
    "prune-curve": ["prune", "--data", "{text}", "-O", "preserve", "--curve", "--step", "0.25", "--json"],
    "geometry": ["geometry", "--data", "{text}", "--json"],
    "compare": ["compare", "--data", "{text}", "--model-b", "{model_b}", "--json"],
    "fill-cloze": ["fill", "--cloze", "{cloze}", "--model", "{mlm}", "--json"],
    "probe-features": [
        "probe",
        "--task",
        "upos",
        "--data",
        "{conllu}",
        "--no-control",
        "--no-random-baseline",
        "--cache-dir",
        "{cache}",
        "--json",
    ],
    "attribute-probe": [
        "attribute",
        "Some cats sleep all day long.",
        "--probe",
        "length",
        "--data",
        "{senteval}",
        "--cache-dir",
        "{cache}",
        "--json",
    ],
}

# Runs the CLI in this process and reports its peaks as the last line of stderr.
RUNNER = r"""
import json, os, resource, sys, threading
peak_anon = [0]
def sample():
    import time
    while True:
        try:
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon:"):
                    peak_anon[0] = max(peak_anon[0], int(line.split()[1]) // 1024)
        except OSError:
            return
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
from bertscope.cli import main
sys.argv = ["bertscope", *sys.argv[1:]]
status = 0
try:
    main()
except SystemExit as exit:
    status = exit.code or 0
maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
peak = maxrss // (1 << 20) if sys.platform == "darwin" else maxrss // 1024
sys.stderr.write("\n" + json.dumps({"peak_rss_mb": peak, "peak_anon_mb": peak_anon[0] or None, "status": status}) + "\n")
"""


def varied_sentences(count: int, seed: int = 0):
    """`count` distinct treebank sentences, every seventh one joined from two to four of them (≤ 70 words)."""
    from bertscope.data.treebank import generate_treebank

    pool = iter(generate_treebank(count * 3, seed=seed))
    out = []
    while len(out) < count:
        first = next(pool)
        if len(out) % 7 == 6:
            words, parts = list(first.words), [first.text.rstrip(".")]
            for _ in range(1 + len(out) % 3):
                extra = next(pool)
                if len(words) + len(extra.words) > 70:
                    break
                words += extra.words
                parts.append(extra.text[0].lower() + extra.text[1:].rstrip("."))
            out.append((", and ".join(parts) + ".", first))
        else:
            out.append((first.text, first))
    return out


def write_corpora(directory: Path, count: int, treebank: Path | None = None) -> dict[str, str]:
    """The corpus of `count` sentences as plain text, CoNLL-U, SentEval TSV and a cloze file."""
    from bertscope.data.treebank import write_conllu

    conllu = directory / f"corpus-{count}.conllu"
    if treebank is None:
        sentences = varied_sentences(count)
        write_conllu(conllu, [tree for _, tree in sentences])
    else:
        blocks = conllu_blocks(treebank, count)
        conllu.write_text("".join(blocks), encoding="utf-8")
        sentences = [(" ".join(block_words(block)), None) for block in blocks]
    text = directory / f"corpus-{count}.txt"
    text.write_text("".join(line + "\n" for line, _ in sentences), encoding="utf-8")
    senteval = directory / f"corpus-{count}.tsv"
    rows = []
    for index, (line, _) in enumerate(sentences):
        words = len(line.split())
        label = 0 if words <= 6 else 1 if words <= 11 else 2 if words <= 17 else 3
        split = ("tr", "tr", "tr", "tr", "tr", "tr", "tr", "tr", "va", "te")[index % 10]
        rows.append(f"{split}\t{label}\t{line}\n")
    senteval.write_text("".join(rows), encoding="utf-8")
    cloze = directory / f"corpus-{count}.cloze"
    queries = []
    for line, _ in sentences:
        words = line.rstrip(".").split()
        last = max((i for i, word in enumerate(words) if word.isalpha()), default=None)
        if last is not None:  # a real treebank's lines of punctuation alone have nothing to mask
            queries.append(" ".join(words[:last] + ["[MASK]"] + words[last + 1 :]) + ".\t" + words[last] + "\n")
    cloze.write_text("".join(queries), encoding="utf-8")
    return {"text": str(text), "conllu": str(conllu), "senteval": str(senteval), "cloze": str(cloze)}


def conllu_blocks(path: Path, count: int) -> list[str]:
    """The first `count` sentence blocks of a CoNLL-U file, each as its text with a closing blank line."""
    blocks, lines = [], []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                lines.append(line)
            elif lines:
                blocks.append("".join(lines) + "\n")
                lines = []
                if len(blocks) == count:
                    return blocks
    if lines:
        blocks.append("".join(lines) + "\n")
    if len(blocks) < count:
        raise SystemExit(f"{path} holds {len(blocks)} sentences, fewer than the {count} asked for")
    return blocks


def block_words(block: str) -> list[str]:
    """A CoNLL-U block's FORM column, syntactic words only (no multiword ranges, no empty nodes)."""
    words = []
    for line in block.splitlines():
        columns = line.split("\t")
        if len(columns) == 10 and columns[0].isdigit():
            words.append(columns[1])
    return words


def tiny_mlm(directory: Path) -> str:
    """A seeded random BertForMaskedLM (hidden 256, 4 layers) with the bundled tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from bertscope.model.model_files import bundled_model_dir

    torch.manual_seed(0)
    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
    BertForMaskedLM(config).save_pretrained(directory)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(directory)
    return str(directory)


def tiny_bert(directory: Path) -> str:
    """A seeded random BertModel (hidden 128, 2 layers, 2 heads) with the bundled tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from bertscope.model.model_files import bundled_model_dir

    torch.manual_seed(0)
    config = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)
    BertModel(config).save_pretrained(directory)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(directory)
    return str(directory)


def run_job(arguments: list[str]) -> dict:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *arguments], capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    )
    seconds = time.perf_counter() - started
    try:
        figures = json.loads(done.stderr.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        figures = {"peak_rss_mb": None, "peak_anon_mb": None, "status": done.returncode}
    if figures.get("status"):
        figures["error"] = done.stderr.strip().splitlines()[-2:] if done.stderr.strip() else []
    return figures | {"seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,16000", help="Corpus sizes in sentences, comma-separated.")
    parser.add_argument("--jobs", default=",".join(JOBS), help=f"Which jobs: {', '.join(JOBS)}.")
    parser.add_argument(
        "--conllu",
        default=None,
        type=Path,
        help="Take the corpora from this CoNLL-U treebank (e.g. UD_English-EWT) instead of generated text.",
    )
    parser.add_argument(
        "--tiny", action="store_true", help="Run the bundled-model jobs on a small random BERT (2 layers, hidden 128) instead."
    )
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    jobs = [job.strip() for job in args.jobs.split(",")]
    unknown = [job for job in jobs if job not in JOBS]
    if unknown:
        parser.error(f"unknown jobs: {', '.join(unknown)}")

    from bertscope.model.model_files import bundled_model_dir

    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bertscope-memory-") as temporary:
        directory = Path(temporary)
        places = {"model_b": str(bundled_model_dir()), "cache": str(directory / "cache")}
        model = []
        if args.tiny:
            places["model_b"] = tiny_bert(directory / "tiny")
            model = ["--model", places["model_b"]]
        if "fill-cloze" in jobs:
            places["mlm"] = tiny_mlm(directory / "mlm")
        corpora = {size: write_corpora(directory, size, args.conllu) for size in sizes}
        for job in jobs:
            results[job] = {}
            for size in sizes:
                arguments = [part.format(**places, **corpora[size]) for part in JOBS[job]]
                if job != "fill-cloze":
                    arguments += model
                results[job][str(size)] = figures = run_job(arguments)
                print(f"{job} {size}: {figures}", file=sys.stderr, flush=True)
            first, last = results[job][str(sizes[0])], results[job][str(sizes[-1])]
            for key in ("peak_rss_mb", "peak_anon_mb"):
                if first.get(key) and last.get(key):
                    results[job][f"growth_{key.removeprefix('peak_').removesuffix('_mb')}"] = round(last[key] / first[key] - 1, 4)
    payload = {
        "sizes": sizes,
        "jobs": results,
        "budget_growth": 0.10,
        "cpu_count": os.cpu_count(),
        "corpus": str(args.conllu) if args.conllu else "generated treebank, varied",
        "model": "small random BERT (2 layers, hidden 128)" if args.tiny else "bundled all-MiniLM-L6-v2",
        # auto times BLAS against oneDNN at load and may choose differently from run to run (a small model's
        # peak differs by ~70 MB between them): pin it with BERTSCOPE_CPU_LINEAR to compare runs
        "cpu_linear": os.environ.get("BERTSCOPE_CPU_LINEAR", "auto"),
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }
    lines = [
        f"{job}: "
        + " → ".join(f"{results[job][str(s)].get('peak_rss_mb')} MB" for s in sizes)
        + f" ({results[job].get('growth_rss', float('nan')):+.1%})"
        for job in jobs
    ]
    emit(payload, args.output, "\n".join(lines))


if __name__ == "__main__":
    main()
