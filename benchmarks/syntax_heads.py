"""Heads that track syntax over a treebank against a bare batched forward with attentions (issue 18, part 2).

    python benchmarks/syntax_heads.py [--data FILE.conllu] [--limit N] [--model M] [--device D] [--batch-size 32] [-o FILE.json]

--data: a CoNLL-U treebank, e.g. UD_English-EWT's en_ewt-ud-dev.conllu
(github.com/UniversalDependencies/UD_English-EWT, CC BY-SA 4.0; not shipped); default the
sample treebank shipped with bertscope. Both contenders see the same sentences in the same
batches (chunks of 1,024 sorted by length, capped as data.batching caps them), in the
same run:
- `bare`: an eager transformers model, inputs tokenised beforehand, timed as
  `model(**batch, output_attentions=True)` per batch;
- `syntax`: `bertscope.analyses.attention.syntax.syntax_heads` end to end (reading is done
  beforehand; tokenising by words, the forward, word-level attention, the most-attended other
  word of every arc in both directions, the offset baselines).
Budget: syntax ≤ 1.3 × bare. Resident memory is sampled as the corpus streams.
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import time

from common import bare_forward_seconds, emit, rss_mb, synchronise  # benchmarks/common.py, found beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoModel

    from bertscope.analyses.attention.syntax import _encode, syntax_heads
    from bertscope.analyses.conditions import JobOptions
    from bertscope.data.batching import MAX_SQUARE, MAX_TOKENS, plan_batches
    from bertscope.data.corpus import read_sentences, sample_corpus
    from bertscope.model.session import Session

    session = Session.open(args.model, device=args.device)
    data = args.data or str(sample_corpus("conllu"))
    sentences = list(read_sentences(data, "conllu", limit=args.limit))
    bare = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="eager").to(session.device).eval()

    chunk = 1024  # the chunks, length order and batch caps syntax_heads uses by default
    batches = []
    for start in range(0, len(sentences), chunk):
        encoded = _encode(session, sentences[start : start + chunk])
        lengths = [len(item.input_ids) for item in encoded]
        for indices in plan_batches(lengths, args.batch_size, max_tokens=MAX_TOKENS, max_square=MAX_SQUARE):
            rows = [encoded[index].input_ids for index in indices]
            batches.append(session.tokenizer.pad({"input_ids": rows}, return_tensors="pt").to(session.device))

    def time_bare() -> float:
        return bare_forward_seconds(bare, batches, session.device)

    memory = []

    def time_syntax() -> float:
        started = time.perf_counter()
        for step in syntax_heads(session, sentences, job=JobOptions(batch_size=args.batch_size)):
            if step.done % (args.batch_size * 8) < args.batch_size or step.finished:
                memory.append((step.done, round(rss_mb(), 1)))
        synchronise(session.device)
        return time.perf_counter() - started

    time_bare(), time_syntax()  # warm-up: allocator, caches, lazy imports
    memory.clear()
    rounds = [(time_bare(), time_syntax()) for _ in range(args.rounds)]
    bare_s = min(r[0] for r in rounds)
    syntax_s = min(r[1] for r in rounds)
    result = {
        "benchmark": "syntax_heads",
        "model": session.info.source,
        "device": str(session.device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "data": data,
        "sentences": len(sentences),
        "batches": len(batches),
        "batch_size": args.batch_size,
        "tokens": int(sum(int(b["attention_mask"].sum()) for b in batches)),
        "bare_forward_with_attentions_s": round(bare_s, 3),
        "syntax_s": round(syntax_s, 3),
        "ratio": round(syntax_s / bare_s, 3),
        "rounds": [[round(b, 3), round(s, 3)] for b, s in rounds],
        "rss_mb_by_sentences_read": memory,
        "budget": 1.3,
        "within_budget": syntax_s / bare_s <= 1.3,
    }
    emit(
        result,
        args.output,
        f"syntax_heads: {result['syntax_s']}s vs bare {result['bare_forward_with_attentions_s']}s "
        f"= {result['ratio']}x (budget 1.3) over {len(sentences)} sentences",
    )


if __name__ == "__main__":
    main()
