"""Where one corpus job's time goes on a device: torch.profiler's busiest operators, host and GPU (issue 19).

    python benchmarks/device_profile.py --conllu TREEBANK.conllu --job importance [--sentences 1000]
                                        [--device cuda] [--dtype bfloat16] [--rows 20] [-o FILE.json]

Written for the questions session 12's single-GPU figures left open (benchmarks/README.md, device_jobs.py):
on one H100 every job took several times a bare forward, and gradient importance was 7x slower in bfloat16
than in float32. The job runs once untimed (so that kernels load and caches fill), then once under the
profiler. Prints the job's wall time, the operators with the most self time on the host and on the GPU,
and how much of the wall time the GPU was busy. Exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import time

from common import emit, synchronise  # benchmarks/common.py, found beside this script

JOBS = ("patterns", "norms", "syntax", "importance", "ablation", "geometry", "probe")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conllu", required=True)
    parser.add_argument("--job", required=True, choices=JOBS)
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    import bertscope
    from bertscope import api
    from bertscope.data.corpus import ReadReport, read_sentences

    model = bertscope.load(args.model, device=args.device, dtype=args.dtype)
    treebank = list(itertools.islice(read_sentences(args.conllu, "conllu"), args.sentences))
    corpus = api.Corpus(treebank, args.conllu, ReadReport())
    runs = {
        "patterns": lambda: bertscope.patterns(model, corpus),
        "norms": lambda: bertscope.patterns(model, corpus, norms=True),
        "syntax": lambda: api.syntax(model, corpus),
        "importance": lambda: bertscope.importance(model, "preserve", corpus),
        "ablation": lambda: bertscope.importance(
            model, "preserve", api.Corpus(treebank[:100], args.conllu, ReadReport()), method="ablation"
        ),
        "geometry": lambda: api.geometry(model, corpus),
        "probe": lambda: api.probe(model, "upos", treebank, control=False, random_baseline=False, cache_dir=False),
    }
    job = runs[args.job]
    job()  # untimed: kernels loaded, caches filled
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
    synchronise(model.device)
    started = time.perf_counter()
    with profile(activities=activities) as profiled:
        job()
        synchronise(model.device)
    wall = time.perf_counter() - started
    events = profiled.key_averages()
    on_gpu = model.device.type == "cuda"

    def busiest(key: str) -> list[dict]:
        chosen = sorted(events, key=lambda event: getattr(event, key), reverse=True)[: args.rows]
        return [{"name": event.key, "calls": event.count, "self_ms": round(getattr(event, key) / 1000, 2)} for event in chosen]

    host = busiest("self_cpu_time_total")
    device = busiest("self_device_time_total") if on_gpu else []
    device_busy_s = sum(event.self_device_time_total for event in events) / 1e6 if on_gpu else None
    result = {
        "benchmark": "device_profile",
        "job": args.job,
        "model": model.source,
        "device": str(model.device),
        "device_name": torch.cuda.get_device_name(model.device) if on_gpu else None,
        "dtype": args.dtype,
        "sentences": len(treebank),
        "wall_s": round(wall, 3),
        "device_busy_s": None if device_busy_s is None else round(device_busy_s, 3),
        "host_busiest": host,
        "device_busiest": device,
    }
    lines = [
        f"{args.job} on {result['device']} ({args.dtype}): {wall:.2f} s under the profiler"
        + ("" if device_busy_s is None else f", the GPU busy {device_busy_s:.2f} s of it")
    ]
    lines += [f"  host   {entry['self_ms']:>9.1f} ms  {entry['calls']:>7}x  {entry['name']}" for entry in host[:10]]
    lines += [f"  device {entry['self_ms']:>9.1f} ms  {entry['calls']:>7}x  {entry['name']}" for entry in device[:10]]
    emit(result, args.output, "\n".join(lines))


if __name__ == "__main__":
    main()
