"""Attribution: cost of each method against a bare forward, and integrated gradients' completeness error vs steps.

    python benchmarks/attribution.py [--model M] [--device D] [--sentences 40] [--probe subject_number]
                                     [--steps 8,16,32,64,128] [--repeats 3] [-o FILE.json]

Sentences: the first `--sentences` lines of the shipped sample corpus (real English text of
varied length). The decision explained is the `--probe` task's probe on its best layer (the
bundled model has no MLM head); it is trained (or loaded from the cache) before timing.
With `--mlm`, a model with an MLM head explains its guess at a [MASK] put in place of each
sentence's longest word instead. In the same run:
- `bare`: a transformers model (SDPA), one sentence, inputs tokenised beforehand, inference mode;
- each method through `bertscope.analyses.attribution.attribute`, end to end (tokenising,
  the decision's own forward, the gradients or the attention pass); integrated gradients
  with the default adaptive steps;
- integrated gradients at each fixed `--steps`: the relative completeness error
  |Σ attributions − (f(x) − f(b))| / |f(x) − f(b)| per sentence (median, p90, max, and the
  share under 5%).
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time

from common import emit, synchronise  # benchmarks/common.py, found beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--sentences", type=int, default=40)
    parser.add_argument("--probe", default="subject_number")
    parser.add_argument("--mlm", action="store_true", help="Explain MLM guesses instead of a probe's decision.")
    parser.add_argument("--steps", default="8,16,32,64,128")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import numpy as np
    import torch
    from transformers import AutoModel

    from bertscope.analyses.attribution import Target, attribute
    from bertscope.analyses.attribution_results import METHODS
    from bertscope.data.corpus import read_sentences, sample_corpus
    from bertscope.model.session import Session

    session = Session.open(args.model, device=args.device)
    texts = [s.text for s in itertools.islice(read_sentences(sample_corpus()), args.sentences)]
    if args.mlm:
        texts = [_blank(text) for text in texts]
        target = Target(kind="mlm")
    else:
        target = Target(probe=args.probe)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    first = _run(attribute(session, texts[0], method="gradient", target=target))
    setup_s = time.perf_counter() - started  # training the probe (or reading it from the cache)

    bare = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="sdpa").to(session.device).eval()
    inputs = [
        session.tokenizer(text, return_tensors="pt", truncation=True, max_length=session.max_length).to(session.device) for text in texts
    ]

    def timed(function) -> float:
        best = []
        for _ in range(args.repeats):
            begin = time.perf_counter()
            function()
            synchronise(session.device)
            best.append(time.perf_counter() - begin)
        return statistics.median(best) * 1000

    def bare_forward(item):
        with torch.inference_mode():
            bare(**item)

    rows = []
    for text, item in zip(texts, inputs):
        row = {"tokens": int(item["input_ids"].shape[1]), "bare_ms": timed(lambda item=item: bare_forward(item))}
        for method in METHODS:
            results = []
            row[f"{method}_ms"] = timed(
                lambda results=results, text=text, method=method: results.append(
                    _run(attribute(session, text, method=method, target=target))
                )
            )
            if method == "integrated-gradients":
                row["default_steps"] = results[-1].steps
                row["default_error"] = results[-1].completeness_error
        rows.append(row)

    steps = [int(s) for s in args.steps.split(",")]
    errors = {n: [] for n in steps}
    for text in texts:
        for n in steps:
            errors[n].append(_run(attribute(session, text, method="integrated-gradients", target=target, ig_steps=n)).completeness_error)

    def ratio_summary(key: str) -> dict:
        ratios = [row[key] / row["bare_ms"] for row in rows]
        return {
            "median_ms": round(statistics.median(row[key] for row in rows), 2),
            "median_ratio": round(statistics.median(ratios), 1),
            "max_ratio": round(max(ratios), 1),
        }

    def error_summary(values) -> dict:
        values = np.array([v for v in values if v == v])
        return {
            "median": float(np.median(values)),
            "p90": float(np.percentile(values, 90)),
            "max": float(values.max()),
            "share_under_5pct": float((values < 0.05).mean()),
        }

    result = {
        "model": session.info.source,
        "device": str(session.device),
        "torch_threads": torch.get_num_threads(),
        "sentences": len(texts),
        "tokens_median": statistics.median(row["tokens"] for row in rows),
        "tokens_max": max(row["tokens"] for row in rows),
        "target": first.target,
        "probe_setup_s": round(setup_s, 2),
        "repeats": args.repeats,
        "bare_ms_median": round(statistics.median(row["bare_ms"] for row in rows), 2),
        "methods": {method: ratio_summary(f"{method}_ms") for method in METHODS},
        "default_integrated_gradients": {
            "steps_used": {
                str(n): sum(1 for row in rows if row["default_steps"] == n) for n in sorted({row["default_steps"] for row in rows})
            },
            "completeness_error": error_summary([row["default_error"] for row in rows]),
        },
        "completeness_error_by_steps": {str(n): error_summary(errors[n]) for n in steps},
        "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "per_sentence": rows,
    }
    methods = ", ".join(f"{m} {v['median_ratio']}x" for m, v in result["methods"].items())
    by_steps = ", ".join(f"{n}: {v['median']:.2%} (max {v['max']:.2%})" for n, v in result["completeness_error_by_steps"].items())
    emit(result, args.output, f"attribution vs bare forward (median): {methods}; IG completeness error by steps: {by_steps}")


def _run(steps):
    last = None
    for last in steps:  # noqa: B007 - only the last item is wanted
        pass
    return last.result


def _blank(text: str) -> str:
    words = text.split()
    longest = max(range(len(words)), key=lambda i: len(words[i].strip(".,;:!?\"'")))
    word = words[longest]
    core = word.strip(".,;:!?\"'")
    words[longest] = word.replace(core, "[MASK]", 1)
    return " ".join(words)


if __name__ == "__main__":
    main()
