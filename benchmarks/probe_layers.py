"""Probing every layer on a CoNLL-U corpus against a bare batched forward, cold and warm cache.

    python benchmarks/probe_layers.py [--model M] [--device D] [--data TRAIN.conllu [--dev DEV] [--test TEST]]
                                      [--sentences 4000] [--task upos] [--no-cli] [-o FILE.json]

Corpus: CoNLL-U files (`--data`, its first `--sentences`; `--dev`/`--test` likewise, as the
CLI's `--limit` reads them), or bertscope's generated treebank of `--sentences` sentences
(data.treebank: varied sentences of 4-30 words). The splits are the CLI's (`make_splits`).
The bare forward runs over every sentence of every split. In the same run:
- `bare`: a transformers model (SDPA) over the same sentences in batches of 32 sorted by
  token count, `output_hidden_states=True`, inputs tokenised beforehand;
- `probe_cold`: `run_probe` end to end with an empty feature cache: word-level features of
  every layer for train/dev/test, and a linear probe per layer with its L2 strength chosen
  on dev (no control task, no random-init baseline: those are separate probes);
- `probe_warm`: the same again, features from the cache; only the probes are trained;
- `default_warm`: the CLI's default, the control task and the random-init baseline as
  well, features from the cache (the random copy's are taken once, untimed, before);
- `cli_warm_lean`, `cli_warm_default`: `python -m bertscope probe` on the same files with
  the same warm cache, a new process each (start-up, model load and reading included), as
  a user runs it; `--no-cli` leaves them out;
- `session`: bertscope's own forward (`Session.run`) over the same batches. On CPUs it
  runs the linear layers through oneDNN (model.cpu_linear), faster than `bare` where MKL is
  slow (AMD); `cold_ratio_of_session_forward` says what probing adds to bertscope's own
  pass, whatever the speed of that pass.
Budgets: cold ≤ 1.5 × bare (issue: layer-wise probing); warm, process start-up included,
lean ≤ 0.3 × bare and default ≤ 0.5 × bare (issue 19).
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time

from common import emit, synchronise  # benchmarks/common.py, found beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--data", default=None)
    parser.add_argument("--dev", default=None)
    parser.add_argument("--test", default=None)
    parser.add_argument("--no-cli", action="store_true")
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--task", default="upos")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoModel

    from bertscope.analyses.conditions import JobOptions
    from bertscope.analyses.probing.run import run_probe
    from bertscope.data.corpus import read_sentences
    from bertscope.data.splits import make_splits
    from bertscope.data.treebank import generate_treebank
    from bertscope.model.session import Session

    session = Session.open(args.model, device=args.device)
    if args.data:
        train = list(itertools.islice(read_sentences(args.data), args.sentences))
    else:
        train = generate_treebank(args.sentences)
    dev = list(itertools.islice(read_sentences(args.dev), args.sentences)) if args.dev else None  # --limit, as the CLI reads
    test = list(itertools.islice(read_sentences(args.test), args.sentences)) if args.test else None
    splits = make_splits(train, dev, test)
    sentences = splits.train + splits.dev + splits.test

    bare = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="sdpa").to(session.device).eval()
    # Sorted by token count, the batching with the least padding (what bertscope's extraction does).
    lengths = session.tokenizer(
        [list(s.words) for s in sentences], is_split_into_words=True, truncation=True, max_length=session.max_length, return_length=True
    )["length"]
    ordered = [sentences[i] for i in sorted(range(len(sentences)), key=lengths.__getitem__)]
    batches = [
        session.tokenizer(
            [list(s.words) for s in ordered[i : i + 32]],
            is_split_into_words=True,
            padding=True,
            truncation=True,
            max_length=session.max_length,
            return_tensors="pt",
        ).to(session.device)
        for i in range(0, len(ordered), 32)
    ]

    def time_bare() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                bare(**batch, output_hidden_states=True)
        synchronise(session.device)
        return time.perf_counter() - started

    def time_session() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                session.run(dict(batch), hidden_states=True)
        synchronise(session.device)
        return time.perf_counter() - started

    def time_probe(cache_dir, lean=True) -> tuple[float, object]:
        started = time.perf_counter()
        report = list(
            run_probe(session, args.task, splits, control=not lean, random_baseline=not lean, job=JobOptions(cache_dir=cache_dir))
        )[-1].result
        return time.perf_counter() - started, report

    def time_cli(cache_dir, lean=True) -> float:
        """One `bertscope probe` process on the same files and cache, start-up included."""
        command = [
            sys.executable,
            "-m",
            "bertscope",
            "probe",
            "--task",
            args.task,
            "--cache-dir",
            cache_dir,
            "--json",
            "--device",
            str(session.device),
            "-o",
            os.path.join(cache_dir, "report.json"),
        ]
        command += ["--data", args.data, "--limit", str(args.sentences)] if args.data else ["--limit", str(args.sentences)]
        command += (["--dev", args.dev] if args.dev else []) + (["--test", args.test] if args.test else [])
        command += ["--no-control", "--no-random-baseline"] if lean else []
        command += ["--model", args.model] if args.model else []
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - started

    # Bare runs before, between and after the probes, so that a machine that gets busier or
    # quieter during the run affects both sides; the fastest bare run is the unit (conservative).
    time_bare()  # warm-ups
    time_session()
    load_before = os.getloadavg()[0]
    bare_runs, session_runs = [time_bare()], [time_session()]
    with tempfile.TemporaryDirectory() as cache:
        cold_s, report = time_probe(cache)
        bare_runs.append(time_bare())
        session_runs.append(time_session())
        warm_s, _ = time_probe(cache)
        time_probe(cache, lean=False)  # the random copy's features, into the cache
        bare_runs.append(time_bare())
        default_s, default_report = time_probe(cache, lean=False)
        cli_lean_s = cli_default_s = None
        if not args.no_cli:
            cli_lean_s = time_cli(cache)
            cli_default_s = time_cli(cache, lean=False)
    bare_runs.append(time_bare())
    session_runs.append(time_session())
    bare_s, session_s = min(bare_runs), min(session_runs)
    result = {
        "benchmark": "probe_layers",
        "model": session.info.source,
        "data": args.data or "generated treebank",
        "device": str(session.device),
        "threads": torch.get_num_threads(),
        "task": args.task,
        "sentences": len(sentences),
        "words": int(sum(len(s.words) for s in sentences)),
        "bare_forward_s": round(bare_s, 3),
        "bare_runs_s": [round(run, 3) for run in bare_runs],
        "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "session_forward_s": round(session_s, 3),
        "session_runs_s": [round(run, 3) for run in session_runs],
        "probe_cold_s": round(cold_s, 3),
        "probe_warm_s": round(warm_s, 3),
        "default_warm_s": round(default_s, 3),
        "cli_warm_lean_s": None if cli_lean_s is None else round(cli_lean_s, 3),
        "cli_warm_default_s": None if cli_default_s is None else round(cli_default_s, 3),
        "cold_ratio": round(cold_s / bare_s, 3),
        "warm_ratio": round(warm_s / bare_s, 3),
        "default_warm_ratio": round(default_s / bare_s, 3),
        "cli_warm_lean_ratio": None if cli_lean_s is None else round(cli_lean_s / bare_s, 3),
        "cli_warm_default_ratio": None if cli_default_s is None else round(cli_default_s / bare_s, 3),
        "cold_ratio_of_session_forward": round(cold_s / session_s, 3),
        "warm_ratio_of_session_forward": round(warm_s / session_s, 3),
        "best_layer": report.best_layer,
        "accuracy_by_layer": [entry["accuracy"] for entry in report.layers],
        "default_baselines": default_report.baselines,
        "control_accuracy_by_layer": [entry.get("control_accuracy") for entry in default_report.layers],
        "random_init_accuracy_by_layer": [entry.get("random_init_accuracy") for entry in default_report.layers],
        "budgets": {"cold": 1.5, "cli_warm_lean": 0.3, "cli_warm_default": 0.5},
        "within_budget": cold_s / bare_s <= 1.5
        and (cli_lean_s is None or cli_lean_s / bare_s <= 0.3)
        and (cli_default_s is None or cli_default_s / bare_s <= 0.5),
    }
    emit(
        result,
        args.output,
        f"probe_layers: cold {result['cold_ratio']}x, warm {result['warm_ratio']}x, default warm "
        f"{result['default_warm_ratio']}x, CLI warm {result['cli_warm_lean_ratio']}x / {result['cli_warm_default_ratio']}x "
        f"of a bare forward ({bare_s:.2f}s); "
        f"cold {result['cold_ratio_of_session_forward']}x of bertscope's own forward ({session_s:.2f}s)",
    )


if __name__ == "__main__":
    main()
