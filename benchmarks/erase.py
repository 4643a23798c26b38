"""Amnesic probing with LEACE (issue 33): a property erased at each of some layers, what the model loses, and the cost.

    python benchmarks/erase.py [--model M] [--device D] [--data TRAIN.conllu [--dev DEV] [--test TEST]]
                               [--sentences 2000] [--task upos] [--layers 1,3,6] [--measure preserve] [-o FILE.json]

Corpus: CoNLL-U files (`--data`, its first `--sentences`; `--dev`/`--test` likewise) or the
generated treebank of `--sentences` sentences. For each layer, `bertscope.erase` with a warm
feature cache for the model as it is (filled once, untimed): LEACE fitted on the training
split at that layer, the erased forward's features of every split, fresh probes at that
layer and above before and after, and the measure on the test split as it is, erased and
with as many random directions removed. Per layer: the guardedness, the rank and variance
share, the measure's three values and the seconds the run took.
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
import warnings

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
    parser.add_argument("--layers", default="1,3,6")
    parser.add_argument("--measure", default=None)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch

    import bertscope
    from bertscope.api import ProbeData
    from bertscope.data.corpus import read_sentences
    from bertscope.data.treebank import generate_treebank

    warnings.simplefilter("ignore", bertscope.BertscopeNote)
    model = bertscope.load(args.model, device=args.device)
    if args.data:
        train = list(itertools.islice(read_sentences(args.data), args.sentences))
    else:
        train = generate_treebank(args.sentences)
    dev = list(itertools.islice(read_sentences(args.dev), args.sentences)) if args.dev else None
    test = list(itertools.islice(read_sentences(args.test), args.sentences)) if args.test else None
    data = ProbeData(train, dev, test, source=args.data or "generated treebank")
    runs = []
    with tempfile.TemporaryDirectory() as cache:
        bertscope.probe(model, args.task, data, cache_dir=cache, control=False, random_baseline=False)  # the features, untimed
        for layer in (int(value) for value in args.layers.split(",")):
            started = time.perf_counter()
            result = bertscope.erase(model, args.task, data, layer=layer, measure=args.measure, cache_dir=cache)
            runs.append({"seconds": round(time.perf_counter() - started, 2)} | result.as_json())
    emit(
        {
            "benchmark": "erase",
            "model": model.source,
            "data": args.data or f"generated treebank ({args.sentences} sentences)",
            "device": str(model.device),
            "threads": torch.get_num_threads(),
            "load_average": round(os.getloadavg()[0], 2),
            "task": args.task,
            "runs": runs,
        },
        args.output,
        "erase: "
        + "; ".join(
            f"layer {run['layer']}: probe {run['guardedness'][0]['accuracy_before']:.3f} → {run['guardedness'][0]['accuracy_after']:.3f}, "
            f"{run['measure']['name']} {run['measure']['none']:.3f} → {run['measure']['erased']:.3f} "
            f"(control {run['measure']['control']:.3f}), {run['seconds']}s"
            for run in runs
        ),
    )


if __name__ == "__main__":
    main()
