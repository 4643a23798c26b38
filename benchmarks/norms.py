"""`patterns --norms` against `patterns` and a bare forward with attentions, in the same run.

    python benchmarks/norms.py [--data FILE] [--sentences 2000] [--batch-size 32] [--rounds 3] [-o FILE.json]

Three contenders on the same sentences (a corpus file, e.g. UD_English-EWT's
en_ewt-ud-dev.conllu from github.com/UniversalDependencies/UD_English-EWT, or else the
shipped sample corpus cycled to --sentences):
- `bare`: an eager transformers model, inputs tokenised beforehand, `output_attentions=True`;
- `patterns`: `pattern_statistics` end to end;
- `norms`: the same with `norms=True` (the value-weighted norms of Kobayashi et al. 2020 and
  their six shares, from the same forward passes).
Rounds alternate the contenders, each timed `--rounds` times; the fastest of each is kept.
Budget (issue 18): norms ≤ 1.5 × patterns. Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

from common import bare_forward_seconds, emit, synchronise  # benchmarks/common.py, found beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--data", default=None, help="A corpus file (text, CoNLL-U, SentEval). Default: the sample corpus.")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoModel

    from bertscope.analyses.attention.patterns import encode_sorted, pattern_statistics
    from bertscope.analyses.conditions import JobOptions
    from bertscope.api import load
    from bertscope.data.corpus import read_sentences, sample_corpus

    session = load(args.model, device=args.device)  # as the command loads it (its CPU linear-kernel choice too)
    source = args.data or sample_corpus()
    sentences = list(itertools.islice(itertools.cycle(list(read_sentences(source))), args.sentences))
    bare = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="eager").to(session.device).eval()

    batches = []
    for start in range(0, len(sentences), 1024):  # the chunks and length order pattern_statistics uses
        encoded = encode_sorted(session, sentences[start : start + 1024])
        for first in range(0, len(encoded), args.batch_size):
            rows = [item.input_ids for item in encoded[first : first + args.batch_size]]
            batches.append(session.tokenizer.pad({"input_ids": rows}, return_tensors="pt").to(session.device))

    def time_bare() -> float:
        return bare_forward_seconds(bare, batches, session.device)

    def time_patterns(norms: bool) -> float:
        started = time.perf_counter()
        for _ in pattern_statistics(session, sentences, job=JobOptions(batch_size=args.batch_size), norms=norms):
            pass
        synchronise(session.device)
        return time.perf_counter() - started

    contenders = {"bare": time_bare, "patterns": lambda: time_patterns(False), "norms": lambda: time_patterns(True)}
    for run in contenders.values():
        run()  # warm-up: allocator, caches, lazy imports
    rounds = [{name: round(run(), 3) for name, run in contenders.items()} for _ in range(args.rounds)]
    best = {name: min(r[name] for r in rounds) for name in contenders}
    ratio = best["norms"] / best["patterns"]
    result = {
        "benchmark": "norms",
        "model": session.info.source,
        "device": str(session.device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "data": str(source),
        "sentences": len(sentences),
        "batch_size": args.batch_size,
        "tokens": int(sum(int(b["attention_mask"].sum()) for b in batches)),
        "bare_forward_with_attentions_s": best["bare"],
        "patterns_s": best["patterns"],
        "patterns_norms_s": best["norms"],
        "norms_over_patterns": round(ratio, 3),
        "patterns_over_bare": round(best["patterns"] / best["bare"], 3),
        "norms_over_bare": round(best["norms"] / best["bare"], 3),
        "rounds": rounds,
        "budget": 1.5,
        "within_budget": ratio <= 1.5,
    }
    emit(
        result,
        args.output,
        f"norms: patterns --norms {best['norms']}s vs patterns {best['patterns']}s = {ratio:.3f}x "
        f"(budget 1.5); bare forward {best['bare']}s; {len(sentences)} sentences from {source}; load {result['load_average']}",
    )


if __name__ == "__main__":
    main()
