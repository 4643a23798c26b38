"""Attention statistics over a corpus against a bare batched forward with attentions.

    python benchmarks/pattern_stats.py [--model M] [--device D] [--data FILE] [--sentences 2000] [--batch-size N] [-o FILE.json]

Both contenders see the same sentences (the first --sentences lines of --data, one sentence
a line; without it the shipped sample corpus, cycled, which repetition makes kinder than
real text), in the same length-sorted batches (those `patterns` plans: capped by tokens and
B·T², at most --batch-size sentences if given), in the same run:
- `bare`: an eager transformers model, inputs tokenised beforehand, timed as
  `model(**batch, output_attentions=True)` per batch;
- `patterns`: `bertscope.analyses.attention.patterns.pattern_statistics` end to end (tokenising, the
  forward, every statistic and pattern class).
Budget (issue: attention pattern analytics): patterns ≤ 1.3 × bare. The resident memory is
sampled as the corpus streams by: it should stay flat, not grow with the sentences read.
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import time

from common import bare_forward_seconds, emit, rss_mb, synchronise  # benchmarks/common.py, found beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--data", default=None, help="Plain text, one sentence a line (default: the sample corpus, cycled).")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoModel

    from bertscope.analyses.attention.patterns import encode_sorted, pattern_statistics
    from bertscope.analyses.conditions import JobOptions
    from bertscope.data.batching import MAX_SQUARE, plan_batches
    from bertscope.data.corpus import read_sentences, sample_corpus
    from bertscope.model.session import Session

    session = Session.open(args.model, device=args.device)
    if args.data:
        sentences = list(itertools.islice(read_sentences(args.data, "text"), args.sentences))
    else:
        sentences = list(itertools.islice(itertools.cycle(list(read_sentences(sample_corpus()))), args.sentences))
    bare = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="eager").to(session.device).eval()

    chunk = 1024  # the same chunks and length order as pattern_statistics uses by default
    batches = []
    for start in range(0, len(sentences), chunk):
        encoded = encode_sorted(session, sentences[start : start + chunk])
        for indices in plan_batches([len(item.input_ids) for item in encoded], args.batch_size, max_square=MAX_SQUARE):
            rows = [encoded[index].input_ids for index in indices]
            batches.append(session.tokenizer.pad({"input_ids": rows}, return_tensors="pt").to(session.device))

    def time_bare() -> float:
        return bare_forward_seconds(bare, batches, session.device)

    memory = []

    def time_patterns() -> float:
        started = time.perf_counter()
        for number, step in enumerate(pattern_statistics(session, sentences, job=JobOptions(batch_size=args.batch_size))):
            if number % 8 == 0 or step.finished:
                memory.append((step.done, round(rss_mb(), 1)))
        synchronise(session.device)
        return time.perf_counter() - started

    time_bare(), time_patterns()  # warm-up: allocator, caches, lazy imports
    memory.clear()
    rounds = [(time_bare(), time_patterns()) for _ in range(2)]
    bare_s = min(r[0] for r in rounds)
    patterns_s = min(r[1] for r in rounds)
    result = {
        "benchmark": "pattern_stats",
        "model": session.info.source,
        "device": str(session.device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "sentences": len(sentences),
        "batch_size": args.batch_size,
        "batches": len(batches),
        "data": args.data or "sample corpus, cycled",
        "tokens": int(sum(int(b["attention_mask"].sum()) for b in batches)),
        "bare_forward_with_attentions_s": round(bare_s, 3),
        "patterns_s": round(patterns_s, 3),
        "ratio": round(patterns_s / bare_s, 3),
        "rounds": [[round(b, 3), round(p, 3)] for b, p in rounds],
        "rss_mb_by_sentences_read": memory,
        "budget": 1.3,
        "within_budget": patterns_s / bare_s <= 1.3,
    }
    emit(
        result,
        args.output,
        f"pattern_stats: {result['patterns_s']}s vs bare {result['bare_forward_with_attentions_s']}s "
        f"= {result['ratio']}x (budget 1.3) over {len(sentences)} sentences",
    )


if __name__ == "__main__":
    main()
