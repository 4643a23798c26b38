"""The host's work around the model: every corpus job on a tiny random BERT against a bare forward (issue 36).

    python benchmarks/host_overhead.py --conllu TREEBANK.conllu [--sentences 2000] [--runs 3] [--jobs patterns,syntax,...]
                                       [--model DIR | --shape tiny|base] [--device cpu] [--dtype float32] [--no-count]
                                       [--no-split] [--instructions | --cpu] [-o FILE.json]

On a GPU the model is cheap and what the host does around it dominates. A model whose forward costs almost
nothing shows that here: by default a seeded random BERT of 2 layers x 64 hidden, 4 heads, MiniLM's vocabulary
(`--model DIR` takes another, say MiniLM on a GPU; `--shape base`, a seeded random BERT of bert-base's shape:
12 layers x 768 hidden, 12 heads). The corpus is the first --sentences sentences of a CoNLL-U
treebank. The unit is a bare transformers forward (eager, attention weights and hidden states out) over the same
sentences in the batches bertscope plans, tokenisation included, as a job's time includes its own. Each job runs
through the public API, best of --runs; the bare forward is the best of --runs taken before and after the jobs.

`compare` runs two models, so its unit is two bare forwards; `cloze` (on a seeded random masked-LM of the model's
shape and tokenizer) is
held to that model's bare forward, and its time is also given against transformers' masked-LM forward, the head on
every position (`ratio_to_masked_lm`), which is what a fill-mask over the same queries costs. `importance` runs a
forward and a backward a batch: its time and operations are also given against a bare forward and backward (the sum
of the last hidden state, a gradient for every weight: `ratio_to_forward_backward`). `erase` (upos at hidden state 1,
LEACE) makes two feature passes over the corpus (as the model is, and erased), so its unit is two bare forwards; on
top it fits the eraser and the probes and measures `preserve` on its test split, and one more run through its
progress stream splits its time by stage (`stages_s`; `feature_passes_ratio`: the feature passes alone against
their two bare forwards). Its runs drain that stream, as the command does.

`patterns`, `--norms`, `syntax` and `mixing` are timed again with their arithmetic on the maps left out
(`without_arithmetic`: the statistics, the value norms, the word-level argmax; the rows' normalisation, the rollout, the
rank correlations and the shares: each replaced by zeros of its shape, or by its input). What is left, the pass, the
batches and the host's bookkeeping, is the host's share (`without_arithmetic_ratio`, `without_arithmetic_paired_ratio`;
`--no-split` skips it).

Each run of a job follows a bare run of its own (two for `compare`, its masked-LM's encoder for `cloze`), and
`paired_ratio` is the median of the runs' own ratios: on a busy machine, where one bare run takes
twice the next, it moves less than `ratio` (the fastest job run over the fastest bare run).

Each job also runs once under two counters (not timed): torch's aten operations (a TorchDispatchMode: on a GPU each
costs the host a dispatch; `kernels`, those that are not views of a tensor, each a launch besides) and reads of a
tensor's values into Python (`item`, `tolist`, `numpy`, `cpu`, `bool`, `float`...: on a GPU each waits for the
device), divided by the job's batches (its model passes, counted by a hook on the
input embeddings). On the CPU every tensor is a host tensor, so a read of a tokenizer's output counts too: the
reads are an upper bound of a GPU run's. Both counts include what a job does once, after its last batch; for
`geometry` and `erase` they are also given by stage (`stages`), and split into their model passes' counts a pass
(`passes`, with their own `operations_ratio`) and what the job does once whatever the corpus's size (`once`: the
measures of the sample, the eraser's and the probes' fits). The bare runs, like the jobs, run with Python's cycle
collection paused (base.collector). Prints JSON; exit status 0 whatever the numbers.

`--cpu` times in CPU seconds of one thread instead of the wall clock: torch is held to one thread
(`torch.set_num_threads(1)`) and every time is `time.process_time` (this process's CPU time, the tokenizer's
threads included). On a machine that other work keeps busy, the wall clock counts the time a run waited for a
core; CPU seconds count only what it ran, so its spread is a few per cent where the clock's is tens. Each job's
`paired_runs` are its runs' own ratios (its time over the bare run just before it), whose median is `paired_ratio`.

`--instructions` counts instead of timing: the script runs itself under valgrind's callgrind, and each job's one run
(after one run to warm its caches, as the timed runs are warm) is counted in machine instructions, against the bare
forward's, with the same units; beside each, what can be held to the same unit alone: the four jobs above without
their arithmetic on the maps, `geometry`'s and `erase`'s model passes (their instructions by stage, a callgrind dump
at each change of stage), `cloze` against the plain logit lens, `importance` against a bare forward and backward. A
count does not depend on what else the machine runs, so two trees can be told apart
by a few per cent where the clock spreads by half; it weighs an instruction of Python as one of a matrix product, so
it is a check beside the times, not a time. Slow: about 9 minutes a job over 2,000 sentences on a 2-core machine (its
warm run and its counted run under valgrind); with --sentences 200, 4.4 minutes for the bare forward and `patterns`,
start-up included; every job with its splits over 300 sentences, 69 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from common import cloze_queries, emit  # benchmarks/common.py, found beside this script

JOBS = ("patterns", "norms", "syntax", "geometry", "compare", "features", "importance", "cloze", "mixing", "erase")
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
ARITHMETIC = ("patterns", "norms", "syntax", "mixing")  # jobs also timed without their arithmetic on the maps
STAGED = ("geometry", "erase")  # jobs run through their progress stream, timed by stage (`stage_seconds`)
PASSES = {"geometry": "representations", "erase": "features"}  # a staged job's stage of model passes over the corpus
STRIPPED = "without its arithmetic"
T = TypeVar("T")
FORWARDS = {"compare": 2, "erase": 2}  # a job's unit in bare forwards: two models, or two feature passes
SHAPES = {"tiny": TINY, "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)}
CALLGRIND_OUT = "HOST_OVERHEAD_CALLGRIND_OUT"  # set in the run under callgrind: the folder of its dumps
clock = time.perf_counter  # what a time is read from: `--cpu` makes it time.process_time
READS = {"item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__", "__array__"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conllu", required=True)
    parser.add_argument("--model", default=None, help="a model directory (default: a random BERT of --shape)")
    parser.add_argument("--shape", default="tiny", choices=sorted(SHAPES), help="the random BERT's shape (without --model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--no-count", action="store_true", help="time only")
    parser.add_argument("--no-split", action="store_true", help="do not time the jobs again without their arithmetic on the maps")
    parser.add_argument("--instructions", action="store_true", help="count machine instructions under valgrind instead of timing")
    parser.add_argument("--cpu", action="store_true", help="time in CPU seconds (time.process_time) of one torch thread")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    jobs = [job for job in args.jobs.split(",") if job]
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown:
        parser.error(f"unknown jobs {', '.join(unknown)}; choose from {', '.join(JOBS)}")
    if args.instructions and args.cpu:
        parser.error("--cpu times the runs; --instructions counts them instead: give one")
    if args.instructions and CALLGRIND_OUT not in os.environ:
        if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
            parser.error("--instructions needs valgrind (with callgrind_control) on the PATH")
        run_under_callgrind()  # does not return

    import torch

    import bertscope
    from bertscope import api
    from bertscope.analyses.probing.features import FeatureOptions, extract_features
    from bertscope.data.corpus import ReadReport, read_sentences

    if args.cpu:
        global clock
        clock = time.process_time
        torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as directory:
        model_dir = args.model or random_bert(directory, SHAPES[args.shape])
        mlm_dir = random_masked_lm(model_dir, os.path.join(directory, "mlm")) if "cloze" in jobs else None
        model = bertscope.load(model_dir, device=args.device, dtype=args.dtype)
        other = bertscope.load(model_dir, device=args.device, dtype=args.dtype) if "compare" in jobs else None
        mlm = bertscope.load(mlm_dir, device=args.device, dtype=args.dtype) if mlm_dir else None
        treebank = list(itertools.islice(read_sentences(args.conllu, "conllu"), args.sentences))
        queries = cloze_queries(mlm.tokenizer, treebank) if mlm else []
        corpus = api.Corpus(treebank, args.conllu, ReadReport())
        runs = {
            "patterns": lambda: bertscope.patterns(model, corpus),
            "norms": lambda: bertscope.patterns(model, corpus, norms=True),
            "syntax": lambda: api.syntax(model, corpus),
            "geometry": lambda on_stage=None: stage_seconds(api.steps(api.geometry, model, corpus), on_stage),
            "compare": lambda: api.compare(model, other, corpus),
            "features": lambda: list(extract_features(model, treebank, FeatureOptions(level="word"), cache_dir=False)),
            "importance": lambda: bertscope.importance(model, "preserve", corpus),
            "cloze": lambda: bertscope.cloze(mlm, queries),
            "mixing": lambda: api.mixing_agreement(model, corpus, method=("attention", "norms", "rollout")),
            "erase": lambda on_stage=None: stage_seconds(
                api.steps(bertscope.erase, model, "upos", treebank, layer=1, cache_dir=False), on_stage
            ),
        }
        bare = Bare(model, [sentence.text for sentence in treebank])
        cloze_bare = Bare(mlm, [query.split("\t")[0] for query in queries]) if mlm else None
        masked_lm_bare = Bare(mlm, [query.split("\t")[0] for query in queries], head=True) if mlm else None
        lens_bare = (
            Bare(mlm, [query.split("\t")[0] for query in queries], answers=[query.split("\t")[1] for query in queries]) if mlm else None
        )
        backward_bare = Bare(model, [sentence.text for sentence in treebank], backward=True) if "importance" in jobs else None
        if args.instructions:
            units = {
                "bare": bare.time,
                "bare (cloze)": cloze_bare.time if cloze_bare else None,
                "lens (cloze)": lens_bare.time if lens_bare else None,
                "bare (forward and backward)": backward_bare.time if backward_bare else None,
            }
            counted_runs = {name: run for name, run in units.items() if run is not None} | {name: runs[name] for name in jobs}
            if not args.no_split:  # again, each job's arithmetic on the maps left out
                counted_runs |= {f"{name} {STRIPPED}": stripped(name, runs[name]) for name in jobs if name in ARITHMETIC}
            counted, by_stage = instruction_counts(counted_runs, staged=set(jobs) & set(STAGED))
            result = {
                "benchmark": "host_overhead --instructions",
                "model": model_name(args),
                "data": args.conllu,
                "sentences": len(treebank),
                "instructions": counted,
                "instructions_by_stage": by_stage,
                "ratios": instruction_ratios(counted, by_stage, jobs),
            }
            table = " · ".join(f"{name} {ratio}x" for name, ratio in result["ratios"].items())
            emit(result, args.output, f"host_overhead in instructions, bare forward {counted['bare']:,}: {table}")
            return
        before = [bare.time() for _ in range(args.runs)]
        results: dict[str, dict] = {}
        for name in jobs:
            seconds, paired, stages = [], [], []
            for _ in range(args.runs):  # each run beside a bare run of its own: a ratio a pair, steadier on a busy machine
                against, times = unit_of(name, bare, cloze_bare)
                own_bare = against.time() * times
                started = clock()
                stages.append(runs[name]())  # a staged job's seconds by stage
                seconds.append(clock() - started)
                paired.append(seconds[-1] / own_bare)
            results[name] = {
                "seconds": round(min(seconds), 3),
                "runs_s": [round(s, 3) for s in seconds],
                "paired_ratio": round(statistics.median(paired), 2),
                "paired_runs": [round(ratio, 3) for ratio in paired],
            }
            if name in STAGED:  # the fastest run's stages
                results[name]["stages_s"] = stages[seconds.index(min(seconds))]
            if name in ARITHMETIC and not args.no_split:  # again, the job's arithmetic on the maps left out
                seconds, paired = [], []
                for _ in range(args.runs):
                    own_bare = bare.time()
                    started = clock()
                    stripped(name, runs[name])()
                    seconds.append(clock() - started)
                    paired.append(seconds[-1] / own_bare)
                results[name]["without_arithmetic_s"] = round(min(seconds), 3)
                results[name]["without_arithmetic_paired_ratio"] = round(statistics.median(paired), 2)
                results[name]["without_arithmetic_paired_runs"] = [round(ratio, 3) for ratio in paired]
        after = [bare.time() for _ in range(args.runs)]
        bare_s = min(before + after)
        cloze_s = min(cloze_bare.time() for _ in range(args.runs)) if cloze_bare is not None and "cloze" in jobs else None
        unit = {}
        for name in jobs:
            against_s, times = unit_of(name, bare_s, cloze_s)
            unit[name] = against_s * times
        if "erase" in unit:  # its feature passes (as the model is, and erased), then the fits and the measure on top
            results["erase"]["feature_passes_ratio"] = round(results["erase"]["stages_s"][PASSES["erase"]] / unit["erase"], 2)
        if "geometry" in unit:  # its sample pass over the corpus, then its measures of the fixed-size sample
            staged = results["geometry"]["stages_s"]
            results["geometry"]["sample_pass_ratio"] = round(staged[PASSES["geometry"]] / unit["geometry"], 2)
            results["geometry"]["measures_s"] = round(sum(staged.values()) - staged[PASSES["geometry"]], 3)
        if cloze_bare is not None and masked_lm_bare is not None and lens_bare is not None:
            masked_lm_s = min(masked_lm_bare.time() for _ in range(args.runs))
            results["cloze"]["masked_lm_forward_s"] = round(masked_lm_s, 3)
            results["cloze"]["ratio_to_masked_lm"] = round(results["cloze"]["seconds"] / masked_lm_s, 2)
            lens_s = min(lens_bare.time() for _ in range(args.runs))
            results["cloze"]["lens_s"] = round(lens_s, 3)
            results["cloze"]["ratio_to_lens"] = round(results["cloze"]["seconds"] / lens_s, 2)
        if backward_bare is not None:
            backward_s = min(backward_bare.time() for _ in range(args.runs))
            results["importance"]["forward_backward_s"] = round(backward_s, 3)
            results["importance"]["ratio_to_forward_backward"] = round(results["importance"]["seconds"] / backward_s, 2)
        for name in jobs:
            results[name]["unit_s"] = round(unit[name], 3)
            results[name]["ratio"] = round(results[name]["seconds"] / unit[name], 2)
            if "without_arithmetic_s" in results[name]:
                results[name]["without_arithmetic_ratio"] = round(results[name]["without_arithmetic_s"] / unit[name], 2)
        counted = {}
        if not args.no_count:
            counted["bare"] = counts(bare.model, bare.time)
            if cloze_bare is not None:
                counted["bare (cloze)"] = counts(cloze_bare.model, cloze_bare.time)
            if backward_bare is not None:
                counted["bare (forward and backward)"] = counts(backward_bare.model, backward_bare.time)
            for name in jobs:
                counted[name] = counts((mlm if name == "cloze" else model).model, runs[name], staged=name in STAGED)
                base = counted["bare (cloze)" if name == "cloze" else "bare"]["operations_per_batch"]
                base *= 2 if name == "compare" else 1  # two models: two forwards a batch (erase's passes are counted one by one)
                counted[name]["operations_ratio"] = round(counted[name]["operations_per_batch"] / base, 2)
                kernels = counted["bare (cloze)" if name == "cloze" else "bare"]["kernels_per_batch"] * (2 if name == "compare" else 1)
                counted[name]["kernels_ratio"] = round(counted[name]["kernels_per_batch"] / kernels, 2)
                if "passes" in counted[name]:  # a staged job: its passes' counts apart from its work done once
                    passes = counted[name]["passes"]
                    passes["operations_ratio"] = round(passes["operations_per_batch"] / base, 2)
                    passes["kernels_ratio"] = round(passes["kernels_per_batch"] / kernels, 2)
                results[name].update(counted[name])
            if backward_bare is not None:
                both = counted["bare (forward and backward)"]
                ratio = counted["importance"]["operations_per_batch"] / both["operations_per_batch"]
                results["importance"]["operations_ratio_to_forward_backward"] = round(ratio, 2)
                ratio = counted["importance"]["kernels_per_batch"] / both["kernels_per_batch"]
                results["importance"]["kernels_ratio_to_forward_backward"] = round(ratio, 2)
    result = {
        "benchmark": "host_overhead",
        "model": model_name(args),
        "device": str(model.device),
        "dtype": args.dtype,
        "clock": "CPU seconds (process_time)" if args.cpu else "wall seconds (perf_counter)",
        "threads": torch.get_num_threads(),
        "data": args.conllu,
        "sentences": len(treebank),
        "bare_forward_s": round(bare_s, 3),
        "bare_runs_s": [round(s, 3) for s in before + after],
        "bare": counted.get("bare"),
        "bare_forward_backward": counted.get("bare (forward and backward)"),
        "load_average": round(os.getloadavg()[0], 2),
        "jobs": results,
    }
    table = " · ".join(f"{name} {entry['ratio']}x (paired {entry['paired_ratio']}x)" for name, entry in results.items())
    emit(result, args.output, f"host_overhead on {result['device']}, bare forward {bare_s:.3f}s: {table}")


def model_name(args: argparse.Namespace) -> str:
    return args.model or f"{args.shape} random BERT " + ", ".join(f"{k}={v}" for k, v in SHAPES[args.shape].items())


def run_under_callgrind() -> None:
    """Run this script again, as it was called, under callgrind with counting off until a job turns it on; its dumps go
    to a folder of their own, which the counted run reads, removed when it ends."""
    folder = tempfile.mkdtemp(prefix="host-overhead-callgrind-")
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={folder}/callgrind.out", "-q"]
    environment = os.environ | {CALLGRIND_OUT: folder, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    try:
        status = subprocess.run([*command, sys.executable, *sys.argv], env=environment).returncode
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    sys.exit(status)


def instruction_counts(runs: dict[str, Callable], staged: set[str]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Each run's machine instructions, counted by callgrind from turning it on to turning it off (`callgrind_control`
    from a second process: its own instructions are not counted), after one uncounted run to warm the caches; and for
    the `staged` runs (`run(on_stage)`, as `stage_seconds` takes it), their instructions by stage, a dump at each change
    of stage: what comes before a record is its stage's when it is the first, else the stage of the record before."""
    folder = os.environ[CALLGRIND_OUT]

    def control(*options: str) -> None:
        subprocess.run(["callgrind_control", *options, str(os.getpid())], check=True, capture_output=True)

    counted: dict[str, int] = {}
    by_stage: dict[str, dict[str, int]] = {}
    for index, (name, run) in enumerate(runs.items()):
        run()
        names: list[str] = []  # a staged run's stage at each record where the stage changed

        def dump_at(stage: str, names: list[str] = names, index: int = index) -> None:
            if names and names[-1] == stage:
                return
            control(f"--dump=run{index}s{len(names)}")
            names.append(stage)

        control("--instr=on")
        if name in staged:
            run(dump_at)
        else:
            run()
        control("--instr=off")
        control(f"--dump=run{index}s{len(names)}")  # a plain word: asked with "bare (cloze)", callgrind wrote no dump at all
        parts = [dumped_instructions(folder, f"run{index}s{k}") for k in range(len(names) + 1)]
        counted[name] = sum(parts)
        if names:  # dump 0 (before the first record) is the first record's stage; dump k, record k-1's
            by_stage[name] = {}
            for owner, part in zip(names[:1] + names, parts, strict=True):
                by_stage[name][owner] = by_stage[name].get(owner, 0) + part
        print(f"{time.strftime('%H:%M:%S')} {name}: {counted[name]:,} instructions", file=sys.stderr)
    return counted, by_stage


def dumped_instructions(folder: str, name: str) -> int:
    """The instruction count of the dump callgrind wrote for `--dump=name` (`name` one word)."""
    for path in sorted(Path(folder).glob("callgrind.out.*")):
        text = path.read_text(errors="replace")
        if f"desc: Trigger: dump {name}\n" in text:
            return int(text.split("\ntotals: ", 1)[1].split()[0])
    raise RuntimeError(f"callgrind wrote no dump for {name}")


def unit_of(name: str, bare: T, cloze_bare: T | None) -> tuple[T, int]:
    """What a job is measured against, of the bare runs (each a Bare, its seconds or its instructions), and how many of
    it make the job's unit: the masked-LM's encoder once for `cloze` (when it ran), the bare forward FORWARDS times
    (two models for `compare`, two feature passes for `erase`), else once. The timed table and the counted one both
    take their units here."""
    if name == "cloze" and cloze_bare is not None:
        return cloze_bare, 1
    return bare, FORWARDS.get(name, 1)


def instruction_ratios(counted: dict[str, int], by_stage: dict[str, dict[str, int]], jobs: list[str]) -> dict[str, float]:
    """Each job's instructions over its unit's: the bare forward's (two for `compare` and `erase`), `cloze`'s over its
    masked-LM's encoder's; and beside it what can be held to the same unit alone: a job without its arithmetic on the
    maps, a staged job's model passes (PASSES), `cloze` over the plain logit lens, `importance` over a bare forward and
    backward."""
    ratios = {}
    for name in jobs:
        against, times = unit_of(name, counted["bare"], counted.get("bare (cloze)"))
        ratios[name] = round(counted[name] / (against * times), 2)
        if f"{name} {STRIPPED}" in counted:
            ratios[f"{name} {STRIPPED}"] = round(counted[f"{name} {STRIPPED}"] / (against * times), 2)
        if name in by_stage:
            ratios[f"{name}'s passes"] = round(by_stage[name][PASSES[name]] / (against * times), 2)
    if "cloze" in jobs and "lens (cloze)" in counted:
        ratios["cloze against the plain logit lens"] = round(counted["cloze"] / counted["lens (cloze)"], 2)
    if "importance" in jobs:
        ratios["importance against a forward and backward"] = round(counted["importance"] / counted["bare (forward and backward)"], 2)
    return ratios


def stripped(job: str, run: Callable[[], object]) -> Callable[[], object]:
    """`run` of `job` with its arithmetic on the maps left out (`without_arithmetic`)."""

    def run_stripped() -> object:
        with without_arithmetic(job):
            return run()

    return run_stripped


def without_arithmetic(job: str) -> contextlib.ExitStack:
    """While open, `job` runs with what it computes from the maps replaced by zeros of the same shapes (ARITHMETIC): the
    pass, the batches and the host's bookkeeping are left, so its time then is the host's share, beside the job's own
    arithmetic, which a near-free forward makes look large."""
    from unittest import mock

    import torch

    from bertscope.analyses.attention import patterns, syntax
    from bertscope.analyses.mixing import run as mixing
    from bertscope.model import ablation

    def zeros(width: int):  # [B, H, width] in float32, as the statistics are, whatever the maps' T and dtype
        return lambda maps, *args, **kwargs: maps.new_zeros((*maps.shape[:2], width), dtype=torch.float32)

    stubs = {
        "patterns": [(patterns, "_feature_table", zeros(len(patterns.FEATURES)))],
        "norms": [
            (patterns, "_feature_table", zeros(len(patterns.FEATURES))),
            (patterns, "_norm_share_table", zeros(len(patterns.NORM_SHARES))),
            (ablation, "weighted_norms", lambda weights, value, projection: weights),
        ],
        "syntax": [
            (
                syntax,
                "predicted_words",
                lambda attention, pooling, excluded: pooling[0].new_zeros(pooling[0].shape[:2] + attention.shape[1:2], dtype=torch.long),
            ),
        ],
        "mixing": [
            (ablation, "weighted_norms", lambda weights, value, projection: weights),
            (mixing, "normalised_rows", lambda matrix: matrix),
            (mixing, "_residual_attention", lambda means: means),
            (mixing, "rolled_out", lambda per_layer: per_layer),
            (mixing, "_spearman_between", lambda matrices, real: matrices.new_zeros((len(matrices), *matrices.shape[:3]))),
            (mixing, "_summed_shares", lambda matrices, classes, real: matrices.new_zeros((*matrices.shape[:-3], 4))),
        ],
    }
    stack = contextlib.ExitStack()
    for module, name, replacement in stubs[job]:
        stack.enter_context(mock.patch.object(module, name, replacement))
    return stack


def stage_seconds(steps, on_stage: Callable[[str], None] | None = None) -> dict[str, float]:
    """Seconds spent in each stage of an analysis's progress stream (`api.steps`), a stage's splits added up: the time
    up to a record and after it is its stage's (a stage's first record may come before its work or after its first
    part of it). `on_stage(name)` is told each record's stage as it comes."""
    seconds: dict[str, float] = {}
    stage, since = None, clock()
    for step in steps:
        now = clock()
        name = step.stage.split(" (")[0]  # "features (erased, test)": "features"
        seconds[stage or name] = seconds.get(stage or name, 0.0) + now - since
        stage, since = name, now
        if on_stage is not None:
            on_stage(name)
    return {name: round(value, 3) for name, value in seconds.items()}


def random_bert(directory: str, shape: dict) -> str:
    """A seeded random BertModel of this shape, with the bundled model's tokenizer, saved in `directory`."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from bertscope.model.model_files import bundled_model_dir

    torch.manual_seed(0)
    BertModel(BertConfig(**shape)).save_pretrained(directory)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(directory)
    return directory


def random_masked_lm(model_dir: str, directory: str) -> str:
    """A seeded random masked-LM of the model's configuration and tokenizer (no MLM weights are at hand offline)."""
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(model_dir)).save_pretrained(directory)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(directory)
    return directory


class Bare:
    """A plain transformers model of the session's files: tokenise the texts, plan bertscope's batches, forward each.
    `head=True`: the masked-LM model, its head on every position (what transformers' fill-mask runs). `answers` (one a
    text, each one token): a logit lens, the masked-LM's encoder and then its head on each hidden state's [MASK] rows,
    the answer's rank and the top guess (the arithmetic of `cloze`, in plain transformers)."""

    def __init__(self, session, texts: list[str], head: bool = False, backward: bool = False, answers: list[str] | None = None):
        import torch
        from transformers import AutoModel, AutoModelForMaskedLM

        self.session, self.texts, self.backward = session, texts, backward
        kind = AutoModelForMaskedLM if head or answers is not None else AutoModel
        self.model = (
            kind.from_pretrained(session.loaded.directory, attn_implementation="eager", dtype=session.loaded.dtype)
            .to(session.device)
            .eval()
        )
        self.answers = None
        if answers is not None:  # BERT's head is `cls`, RoBERTa's `lm_head`
            self.head = getattr(self.model, "cls", None) or self.model.lm_head
            self.answers = torch.as_tensor(session.tokenizer.convert_tokens_to_ids(answers), device=session.device)

    def time(self) -> float:
        """Seconds for one pass over the texts, with cycle collection paused as a corpus job pauses it
        (base.collector): a full collection walks every object torch and transformers made, 0.2-0.3 s here, and
        came in about one bare run in three, which made the unit the noisiest number in the table."""
        from bertscope.base import collector

        with collector.paused():
            return self._time()

    def _time(self) -> float:
        import torch

        from bertscope.data.batching import plan_batches

        started = clock()
        tokenizer, device = self.session.tokenizer, self.session.device
        ids = tokenizer(self.texts, truncation=True, max_length=self.session.max_length)["input_ids"]
        with torch.inference_mode(not self.backward):
            for batch in plan_batches([len(row) for row in ids]):
                inputs = tokenizer.pad({"input_ids": [ids[index] for index in batch]}, return_tensors="pt").to(device)
                if self.answers is not None:
                    self.lens(inputs, self.answers[torch.as_tensor(batch, device=device)])
                    continue
                outputs = self.model(**inputs, output_attentions=True, output_hidden_states=True)
                if self.backward:  # a gradient of every weight, as a gradient job's pass takes one of its gates
                    outputs.last_hidden_state.float().sum().backward()
                    self.model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return clock() - started

    def lens(self, inputs, answers) -> None:
        """The masked-LM's head on every hidden state's [MASK] rows: each answer's rank there, and the last one's guess."""
        import torch

        outputs = self.model.base_model(**inputs, output_attentions=True, output_hidden_states=True)
        rows, columns = torch.nonzero(inputs["input_ids"] == self.session.tokenizer.mask_token_id, as_tuple=True)
        ranks = []
        for states in outputs.hidden_states:
            logits = self.head(states[rows, columns]).float()
            ranks.append((logits > logits.gather(-1, answers[:, None])).sum(-1))
        torch.stack([*ranks, logits.argmax(-1)]).tolist()


def counts(model, run, staged: bool = False) -> dict:
    """`run()` once under the counters: aten operations and reads of tensor values into Python, per model pass.

    `staged`: `run(on_stage)` reports its stages (`stage_seconds`), and the counts are also given by stage, each
    stage's counts being what ran from its record to the next (before the first record: the first record's stage).
    The stages with model passes give `passes` (their counts a pass); those without (a job's measures of its sample,
    its fits) give `once` (their counts in all): work that does not grow with the corpus.
    """
    from collections import Counter

    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    stages: dict[str | None, Counter] = {None: Counter()}
    current: list[str | None] = [None]

    def tally() -> Counter:
        return stages[current[0]]

    def on_stage(name: str) -> None:
        stages.setdefault(name, Counter()).update(stages.pop(None) if current[0] is None else Counter())
        current[0] = name

    class Operations(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            tally()["operations"] += 1
            tally()["kernels"] += not func.is_view  # a view (unsqueeze, slice, transpose...) launches nothing on a GPU
            return func(*args, **(kwargs or {}))

    class Reads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in READS:
                tally()["reads"] += 1
            return func(*args, **(kwargs or {}))

    hook = model.get_input_embeddings().register_forward_pre_hook(lambda *_: tally().update(batches=1))
    try:
        with Reads(), Operations():
            run(on_stage) if staged else run()
    finally:
        hook.remove()
    found = per_batch(sum(stages.values(), Counter()))
    if staged:
        passes = sum((counted for counted in stages.values() if counted["batches"]), Counter())
        once = sum((counted for counted in stages.values() if not counted["batches"]), Counter())
        found["passes"] = per_batch(passes)
        found["once"] = {name: once[name] for name in ("operations", "kernels", "reads")}
        found["stages"] = {name: dict(counted) for name, counted in stages.items()}
    return found


def per_batch(counted) -> dict:
    """Counts divided by their model passes."""
    batches = max(counted["batches"], 1)
    return {
        "batches": counted["batches"],
        "operations_per_batch": round(counted["operations"] / batches, 1),
        "kernels_per_batch": round(counted["kernels"] / batches, 1),
        "reads_per_batch": round(counted["reads"] / batches, 2),
    }


if __name__ == "__main__":
    main()
