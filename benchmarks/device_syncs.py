"""Where each corpus job makes the host wait for the GPU: torch's sync debug mode, counted by call site (issue 36).

    python benchmarks/device_syncs.py --conllu TREEBANK.conllu [--model DIR] [--sentences 96] [--batch-size 16]
                                      [--jobs patterns,norms,syntax,geometry,mixing,features] [-o FILE.json]

A job whose host waits for the device inside a batch cannot prepare the next batch while the GPU runs this one: its
time is the host's work plus the device's, where a bare forward's is the larger of the two. Each wait is a
synchronising call: a copy to the GPU from pageable memory, a read of a value (`.item()`, `bool()`, `.cpu()`), an
index found by `nonzero`. Under `torch.cuda.set_sync_debug_mode("warn")` torch warns at each; this script runs each
job once to warm up, then once warning, and counts the warnings by their three innermost frames in bertscope or
transformers. Needs a CUDA GPU. Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import traceback
import warnings

from common import emit  # benchmarks/common.py, found beside this script

JOBS = ("patterns", "norms", "syntax", "geometry", "mixing", "features")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conllu", required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--sentences", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--sites", type=int, default=6, help="call sites listed a job")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch

    import bertscope
    from bertscope import api
    from bertscope.analyses.probing.features import FeatureOptions, extract_sharded
    from bertscope.data.corpus import ReadReport, read_sentences

    if not torch.cuda.is_available():
        raise SystemExit("device_syncs.py: no CUDA GPU on this machine")
    model = bertscope.load(args.model, device="cuda")
    treebank = list(itertools.islice(read_sentences(args.conllu, "conllu"), args.sentences))
    corpus = api.Corpus(treebank, args.conllu, ReadReport())
    size = args.batch_size
    runs = {
        "patterns": lambda: bertscope.patterns(model, corpus, batch_size=size),
        "norms": lambda: bertscope.patterns(model, corpus, norms=True, batch_size=size),
        "syntax": lambda: api.syntax(model, corpus, batch_size=size),
        "geometry": lambda: api.geometry(model, corpus, batch_size=size),
        "mixing": lambda: api.mixing_agreement(model, corpus, method=("attention", "norms", "rollout"), batch_size=size),
        "features": lambda: list(extract_sharded(model, treebank, FeatureOptions(level="word"), batch_size=size, cache_dir=False)),
    }
    results = {}
    for name in args.jobs.split(","):
        runs[name]()  # warm: kernels loaded, plans made
        sites = count_syncs(runs[name])
        results[name] = {"syncs": sum(sites.values()), "sites": dict(sites.most_common(args.sites))}
    summary = (
        "synchronising calls, "
        + f"{args.sentences} sentences in batches of {size}: "
        + " · ".join(f"{name} {result['syncs']}" for name, result in results.items())
    )
    for name, result in results.items():
        summary += f"\n  {name}: " + "; ".join(f"{count}× {site}" for site, count in result["sites"].items())
    emit({"benchmark": "device_syncs", "sentences": args.sentences, "batch_size": size, "jobs": results}, args.output, summary)


def count_syncs(job) -> collections.Counter:
    """Synchronising calls while `job` runs, by call site (innermost first, bertscope's and transformers' frames)."""
    import torch

    sites: collections.Counter = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" not in str(message):
            return
        frames = [f for f in traceback.extract_stack()[:-1] if "/bertscope/" in f.filename or "/transformers/" in f.filename]
        sites[" < ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}" for f in frames[-3:][::-1])] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            job()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return sites


if __name__ == "__main__":
    main()
