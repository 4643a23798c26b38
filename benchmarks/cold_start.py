"""A corpus job's first run in a fresh process against its second: what a command-line user waits for (issue 36).

    python benchmarks/cold_start.py --conllu TREEBANK.conllu [--jobs importance,geometry] [--sentences 2000]
                                    [--model DIR] [--device cuda] [--dtype bfloat16] [--with-cudnn] [-o FILE.json]

Each `bertscope` command is one process, so a cost paid on a job's first pass over a corpus is paid by every
command. On a GPU, SDPA's cuDNN kernels build an execution plan for each new batch shape on first sight;
bertscope's passes leave cuDNN out (model.ablation.GPU_SDPA_BACKENDS). `--with-cudnn` lets SDPA choose
it again, to measure what that saves. The jobs run in the order given, each twice; a bare forward (eager,
attention weights, as in host_overhead.py) runs first, so that the first job does not pay the device's
start alone. Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import time

from common import emit, synchronise  # benchmarks/common.py, found beside this script
from host_overhead import Bare  # benchmarks/host_overhead.py, beside this script

JOBS = ("importance", "geometry", "compare")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conllu", required=True)
    parser.add_argument("--jobs", default="importance,geometry")
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--with-cudnn", action="store_true", help="let SDPA choose cuDNN's attention, as torch does")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    jobs = [job for job in args.jobs.split(",") if job]
    if set(jobs) - set(JOBS):
        parser.error(f"choose jobs from {', '.join(JOBS)}")

    import torch
    from torch.nn.attention import SDPBackend

    import bertscope
    from bertscope import api
    from bertscope.data.corpus import ReadReport, read_sentences
    from bertscope.model import ablation

    if args.with_cudnn:
        ablation.GPU_SDPA_BACKENDS.append(SDPBackend.CUDNN_ATTENTION)
    model = bertscope.load(args.model, device=args.device, dtype=args.dtype)
    treebank = list(itertools.islice(read_sentences(args.conllu, "conllu"), args.sentences))
    corpus = api.Corpus(treebank, args.conllu, ReadReport())
    runs = {
        "importance": lambda: bertscope.importance(model, "preserve", corpus),
        "geometry": lambda: api.geometry(model, corpus),
        "compare": lambda: api.compare(model, model, corpus),
    }
    bare = Bare(model, [sentence.text for sentence in treebank])
    bare_s = [bare.time() for _ in range(2)]
    results = {}
    for name in jobs:
        seconds = []
        for _ in range(2):
            synchronise(model.device)
            started = time.perf_counter()
            runs[name]()
            synchronise(model.device)
            seconds.append(time.perf_counter() - started)
        results[name] = {"first_s": round(seconds[0], 3), "second_s": round(seconds[1], 3)}
    result = {
        "benchmark": "cold_start",
        "model": model.source,
        "device": str(model.device),
        "dtype": args.dtype,
        "device_name": torch.cuda.get_device_name(model.device) if model.device.type == "cuda" else None,
        "cudnn_attention": args.with_cudnn,
        "sentences": len(treebank),
        "bare_forward_s": [round(s, 3) for s in bare_s],
        "jobs": results,
    }
    table = " · ".join(f"{name} {entry['first_s']}s then {entry['second_s']}s" for name, entry in results.items())
    emit(result, args.output, f"cold_start on {result['device']} {args.dtype}{' with cuDNN' if args.with_cudnn else ''}: {table}")


if __name__ == "__main__":
    main()
