"""Description length probes (issue 33): the online code of every layer against the accuracy probe's fit, same features.

    python benchmarks/mdl.py [--model M] [--device D] [--data TRAIN.conllu [--dev DEV] [--test TEST]]
                             [--sentences 2000] [--task upos] [--repeats 2] [-o FILE.json]

Corpus: CoNLL-U files (`--data`, its first `--sentences`; `--dev`/`--test` likewise), or
bertscope's generated treebank of `--sentences` sentences (`bertscope treebank -n N`, what
`probe --task upos` reads without --data). The splits are the CLI's (`make_splits`).

The features of every split are extracted once, untimed, into a temporary cache; then
`run_probe(..., mdl=True)` runs `--repeats` times on the warm cache (no random-init
baseline), and in each run the two fits are timed where they happen:
- `accuracy_fit`: `probes.train_with_control`, the task's probe per layer with its L2
  search on dev and the control task's at the same strengths (their passes shared);
- `mdl`: `mdl.report_codes`, the online code of the task and of the control task on every
  layer (ten warm-started fits per layer and label set, the coded blocks' log-probabilities).
The fastest run of each is kept (wall clock; the process's CPU time beside it, which other
processes on a shared machine disturb less). Budget (issue 33): mdl ≤ 3 × accuracy_fit.
Also printed: per layer the test accuracy, the control task's, and both compressions.
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time

from common import emit  # benchmarks/common.py, found beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--data", default=None)
    parser.add_argument("--dev", default=None)
    parser.add_argument("--test", default=None)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--task", default="upos")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch

    from bertscope.analyses.conditions import JobOptions
    from bertscope.analyses.probing import probes
    from bertscope.analyses.probing import run as probing
    from bertscope.data.corpus import read_sentences
    from bertscope.data.splits import make_splits
    from bertscope.data.treebank import generate_treebank
    from bertscope.model.session import Session

    session = Session.open(args.model, device=args.device)
    if args.data:
        train = list(itertools.islice(read_sentences(args.data), args.sentences))
    else:
        train = generate_treebank(args.sentences)
    dev = list(itertools.islice(read_sentences(args.dev), args.sentences)) if args.dev else None
    test = list(itertools.islice(read_sentences(args.test), args.sentences)) if args.test else None
    splits = make_splits(train, dev, test)

    timings: dict[str, list[float]] = {"accuracy_fit": [], "mdl": []}
    cpu: dict[str, list[float]] = {"accuracy_fit": [], "mdl": []}

    def timed(name, function):
        def run(*positional, **options):
            started, started_cpu = time.perf_counter(), time.process_time()
            try:
                return function(*positional, **options)
            finally:
                timings[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - started_cpu)

        return run

    probes.train_with_control = timed("accuracy_fit", probes.train_with_control)
    probing.report_codes = timed("mdl", probing.report_codes)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as cache:
        list(probing.run_probe(session, args.task, splits, random_baseline=False, job=JobOptions(cache_dir=cache)))  # the features, untimed
        for name in timings:
            timings[name].clear()
            cpu[name].clear()
        totals = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            report = list(probing.run_probe(session, args.task, splits, random_baseline=False, job=JobOptions(cache_dir=cache), mdl=True))[
                -1
            ].result
            totals.append(time.perf_counter() - started)
    accuracy_s, mdl_s = min(timings["accuracy_fit"]), min(timings["mdl"])
    result = {
        "benchmark": "mdl",
        "model": session.info.source,
        "data": args.data or f"generated treebank ({args.sentences} sentences)",
        "device": str(session.device),
        "threads": torch.get_num_threads(),
        "task": args.task,
        "counts": report.counts,
        "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "accuracy_fit_s": round(accuracy_s, 3),
        "mdl_s": round(mdl_s, 3),
        "accuracy_fit_runs_s": [round(run, 3) for run in timings["accuracy_fit"]],
        "mdl_runs_s": [round(run, 3) for run in timings["mdl"]],
        "accuracy_fit_cpu_s": [round(run, 3) for run in cpu["accuracy_fit"]],
        "mdl_cpu_s": [round(run, 3) for run in cpu["mdl"]],
        "mdl_ratio_cpu": round(min(cpu["mdl"]) / min(cpu["accuracy_fit"]), 3),
        "warm_probe_with_mdl_s": round(min(totals), 3),
        "mdl_ratio": round(mdl_s / accuracy_s, 3),
        "budget": 3.0,
        "within_budget": mdl_s / accuracy_s <= 3.0,
        "mdl_settings": report.mdl,
        "layers": [
            {
                "layer": row["layer"],
                "accuracy": row["accuracy"],
                "control_accuracy": row.get("control_accuracy"),
                "online_kbits": round(row["online_bits"] / 1000, 2),
                "compression": row["compression"],
                "control_online_kbits": None if "control_online_bits" not in row else round(row["control_online_bits"] / 1000, 2),
                "control_compression": row.get("control_compression"),
            }
            for row in report.table()
        ],
        "uniform_kbits": round(report.table()[0]["uniform_bits"] / 1000, 2),
    }
    emit(
        result,
        args.output,
        f"mdl: {mdl_s:.2f}s for every layer's online codes, {result['mdl_ratio']}x the accuracy probes' fit ({accuracy_s:.2f}s; budget 3x)",
    )


if __name__ == "__main__":
    main()
