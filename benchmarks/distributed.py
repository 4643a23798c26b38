"""Two single-thread ranks (torchrun, gloo) against one two-thread process, on the same corpus.

    python benchmarks/distributed.py [--data /work/data/ewt/en_ewt-ud-train.conllu] [--sentences 1500] [--repeats 2] [-o FILE.json]

`--data` is any corpus bertscope reads; the figures in benchmarks/README.md use the English
Web Treebank (UD_English-EWT, CC BY-SA 4.0, github.com/UniversalDependencies/UD_English-EWT:
web text of every length, from two words to over a hundred), its first --sentences sentences
written out as plain text. Each job runs as a user runs it, a new process each time,
start-up and model loading included:
- `one`: `OMP_NUM_THREADS=2 bertscope JOB ...`;
- `two`: `OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 2 -m bertscope JOB ...`;
- `start`: `bertscope patterns "One sentence."` (start-up and model load, the part that does not shrink).
Jobs: `patterns`, `importance --objective preserve --method gradient` and `geometry` (a seeded
sample of 4,000 tokens). The two outputs are
compared (largest difference of any number). The load average is printed beside the times:
on a shared machine the ratio is what the other processes left. Exit status 0 whatever the numbers.
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
    "patterns": ["patterns", "--json"],
    "importance": ["importance", "--objective", "preserve", "--method", "gradient", "--json"],
    "geometry": ["geometry", "--unit", "token", "--json"],
}


def run(command: list[str], threads: int, output: Path | None = None) -> float:
    """Seconds the command took; its standard output goes to `output` (rank 0's, under torchrun)."""
    environment = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    environment["OMP_NUM_THREADS"] = str(threads)
    started = time.perf_counter()
    with open(output or os.devnull, "w") as out:
        subprocess.run(command, check=True, env=environment, stdout=out)
    return time.perf_counter() - started


def numbers(payload) -> list[float]:
    if isinstance(payload, dict):
        return [x for key in sorted(payload) for x in numbers(payload[key])]
    if isinstance(payload, list):
        return [x for item in payload for x in numbers(item)]
    return [float(payload)] if isinstance(payload, (int, float)) and not isinstance(payload, bool) else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None)
    parser.add_argument("--sentences", type=int, default=1500)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    from bertscope.data.corpus import read_sentences, sample_corpus

    source = args.data or str(sample_corpus())
    folder = Path(tempfile.mkdtemp(prefix="bertscope-distributed-"))
    corpus = folder / "corpus.txt"
    texts = [sentence.text for sentence in read_sentences(source, limit=args.sentences)]
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    bertscope = [sys.executable, "-m", "bertscope"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "bertscope"]

    report = {"data": source, "sentences": len(texts), "load_before": os.getloadavg(), "jobs": {}}
    report["start_s"] = min(run([*bertscope, "patterns", "One sentence."], 2) for _ in range(args.repeats))
    for job, words in JOBS.items():
        arguments = [*words, "--data", str(corpus)]
        one = min(run([*bertscope, *arguments], 2, folder / f"{job}-one.json") for _ in range(args.repeats))
        two = min(run([*torchrun, *arguments], 1, folder / f"{job}-two.json") for _ in range(args.repeats))
        a, b = (numbers(json.loads((folder / f"{job}-{n}.json").read_text())) for n in ("one", "two"))
        report["jobs"][job] = {
            "one_process_2_threads_s": round(one, 2),
            "two_ranks_1_thread_s": round(two, 2),
            "speed_up": round(one / two, 3),
            "speed_up_after_start": round((one - report["start_s"]) / max(two - report["start_s"], 1e-9), 3),
            "largest_difference": max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0),
        }
    report["load_after"] = os.getloadavg()
    summary = "; ".join(
        f"{job}: two ranks {row['speed_up']}x one process ({row['one_process_2_threads_s']} s against {row['two_ranks_1_thread_s']} s)"
        for job, row in report["jobs"].items()
    )
    emit(report, args.output, f"{summary}; load average {report['load_before'][0]:.1f} before, {report['load_after'][0]:.1f} after")


if __name__ == "__main__":
    main()
