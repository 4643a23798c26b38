"""Gradient head importance over N sentences against one bare forward pass over them, in the same run.

    python benchmarks/importance.py [--model M] [--device D] [--sentences 320] [--objective preserve] [-o FILE.json]

Corpus: the shipped sample corpus (about 320 sentences), repeated to `--sentences`. In the
same process:
- `bare`: a transformers model (SDPA) over the same length-sorted batches of 32, inputs
  tokenised beforehand, under `torch.inference_mode()`;
- `gradient`: `head_importance(objective, "gradient")` on the prepared objective: one
  forward with float gates and one backward pass per batch (for `preserve`, the random
  projection estimate), summing per-sentence gradients.
Each is timed 3 times after a warm-up; the best time counts. Budget (issue: head importance):
gradient ≤ 4 × bare. Also reported: the Spearman rank correlation of the gradient estimate
with exact single-head ablation on `--check-sentences` sentences (preserve only).
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

from common import emit, synchronise  # benchmarks/common.py, found beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--sentences", type=int, default=320)
    parser.add_argument("--objective", default="preserve")
    parser.add_argument("--check-sentences", type=int, default=64)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch
    from scipy.stats import spearmanr
    from transformers import AutoModel

    from bertscope.analyses.importance.objectives import make_objective
    from bertscope.analyses.importance.run import head_importance
    from bertscope.data.corpus import read_sentences, sample_corpus
    from bertscope.model.session import Session

    session = Session.open(args.model, device=args.device)
    sentences = list(itertools.islice(itertools.cycle(list(read_sentences(sample_corpus()))), args.sentences))
    objective = make_objective(session, args.objective, sentences)
    bare = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="sdpa").to(session.device).eval()
    batches = [{k: v for k, v in batch.inputs.items()} for batch in objective.batches]  # the same batches, tokenised

    def sync() -> None:
        synchronise(session.device)

    def time_bare() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                bare(**batch)
        sync()
        return time.perf_counter() - started

    def time_gradient() -> tuple[float, object]:
        started = time.perf_counter()
        result = list(head_importance(objective, "gradient", normalize=False))[-1].result
        sync()
        return time.perf_counter() - started, result

    load_before = os.getloadavg()[0]
    time_bare()
    time_gradient()  # warm-up
    bare_times, gradient_times = [], []
    for _ in range(3):  # interleaved, so machine noise hits both alike
        bare_times.append(time_bare())
        seconds, result = time_gradient()
        gradient_times.append(seconds)
    bare_s, gradient_s = min(bare_times), min(gradient_times)
    load_after = os.getloadavg()[0]
    output = {
        "benchmark": "importance",
        "model": session.info.source,
        "device": str(session.device),
        "threads": torch.get_num_threads(),
        "objective": args.objective,
        "sentences": len(sentences),
        "bare_forward_s": round(bare_s, 3),
        "gradient_importance_s": round(gradient_s, 3),
        "ratio": round(gradient_s / bare_s, 3),
        "budget": 4.0,
        "within_budget": gradient_s / bare_s <= 4.0,
        "load_average": [round(load_before, 2), round(load_after, 2)],
    }
    if args.objective == "preserve" and args.check_sentences:
        check = make_objective(session, "preserve", sentences[: args.check_sentences])
        gradient = list(head_importance(check, "gradient", normalize=False))[-1].result
        exact = list(head_importance(check, "ablation", normalize=False, layers=False))[-1].result
        output["check_sentences"] = len(check.texts)
        output["spearman_gradient_vs_ablation"] = round(float(spearmanr(gradient.raw.ravel(), exact.raw.ravel()).statistic), 4)
    emit(
        output,
        args.output,
        f"importance: gradient {output['ratio']}x of a bare forward ({bare_s:.2f}s)"
        + (f"; Spearman vs ablation {output['spearman_gradient_vs_ablation']}" if "spearman_gradient_vs_ablation" in output else ""),
    )


if __name__ == "__main__":
    main()
