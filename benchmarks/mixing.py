"""Context mixing (issue 32) against a bare forward of the same input, in the same run.

    python benchmarks/mixing.py [--model M] [--tokens 64] [--rounds 5] [--flow-lengths 8,16,24,32,48] [-o FILE.json]
    python benchmarks/mixing.py --corpus FILE [--sentences 2000] [--methods all] [--each 100] [-o FILE.json]

- `bare`: the plain transformers model (its default SDPA attention, no weights) on the sentence,
  tokenised beforehand; `bare_with_weights`: the same, eager, with `output_attentions=True`;
- `value-zeroing`, `alti`, `norms`, `rollout`: `analyses.mixing.run.mixings` end to end for that one
  method (the forward pass with weights it reads, and the measure for every layer);
- `flow` against the input's length: the whole method on sentences of each length (the L·T² max-flow
  problems dominate).
The sentence is a long English sentence cut to --tokens tokens. Each contender is timed --rounds
times, alternating; the fastest of each is kept. Budgets (issue 32): value zeroing ≤ 8 bare
forwards, ALTI ≤ 2, a 32-token flow within 10 s. Prints JSON; exit status 0 whatever the numbers.

With --corpus, the corpus agreement instead (issue 32): `bertscope.mixing_agreement` over the first --sentences
of FILE with every method of --methods together, timed end to end, with the process's resident memory (VmRSS) and
its peak (VmHWM) at the end of each chunk of 1,024 sentences the corpus is read in (a chunk's batches run shortest
first, so its peak includes its longest sentence; memory flat in the corpus: a later chunk's peak is no higher unless
its longest sentence is longer), against a bare eager forward with weights of each sentence; each method alone
on the first --each sentences, timed; and the result (the agreement table and the per-layer shares).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from common import emit  # benchmarks/common.py, found beside this script

WORDS = (
    "The old lighthouse keeper, who had watched the harbour for forty years, walked slowly down the narrow stone "
    "stairs every evening to light the great lamp, while the fishermen below mended their nets, argued about the "
    "weather, and told their children stories of ships that had sailed beyond the edge of the known world and "
    "never come back to the quiet town where they were born and raised by patient, tired, loving families."
).split()


def sentence(tokenizer, tokens: int) -> str:
    """The longest prefix of WORDS (cycled) that tokenises to at most `tokens` tokens, specials included."""
    words: list[str] = []
    index = 0
    while True:
        candidate = [*words, WORDS[index % len(WORDS)]]
        if len(tokenizer(" ".join(candidate))["input_ids"]) > tokens:
            return " ".join(words)
        words, index = candidate, index + 1


def memory_mb(field: str) -> float:
    """This process's resident memory now (Linux's VmRSS) or its peak so far (VmHWM) in MB, NaN elsewhere."""
    from pathlib import Path

    status = Path("/proc/self/status")
    lines = status.read_text().splitlines() if status.exists() else []
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith(f"{field}:")), float("nan"))


def corpus_agreement(args: argparse.Namespace) -> None:
    """The --corpus mode: mixing_agreement over a real corpus, its time, peak memory and result."""
    import torch
    from transformers import AutoModel

    import bertscope
    from bertscope.analyses.mixing.run import METHODS, check_methods
    from bertscope.analyses.streaming import CHUNK
    from bertscope.api import corpus, load
    from bertscope.model.allocator import keep_freed_memory

    keep_freed_memory()  # as `bertscope` does at its entry point (model.allocator)

    methods = check_methods(METHODS if args.methods == "all" else args.methods.split(","))
    session = load(args.model, device=args.device)
    sentences = list(corpus(data=args.corpus, limit=args.sentences).sentences)
    lengths = [len(session.encode(sentence.text, sentence.pair)) for sentence in sentences]
    eager = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="eager").to(session.device).eval()
    started = time.perf_counter()
    with torch.inference_mode():
        for sentence in sentences:
            eager(**session.loaded.family.inputs(session.tensors(session.encode(sentence.text, sentence.pair))), output_attentions=True)
    bare = time.perf_counter() - started
    each = {}
    for method in methods if args.each else ():
        started = time.perf_counter()
        bertscope.mixing_agreement(session, sentences[: args.each], method=[method])
        each[method] = round(time.perf_counter() - started, 2)
    # The corpus is read CHUNK sentences at a time and each chunk's batches run shortest first, so memory is read at the
    # end of each chunk: its peak has seen the chunk's longest sentence, and what a chunk left behind shows in the next.
    marks = [*range(CHUNK, len(sentences), CHUNK), len(sentences)]
    memory: list[dict] = []
    started = time.perf_counter()

    def seen(record) -> None:
        done = getattr(record.partial, "sentences", None) or getattr(record.result, "sentences", None)
        if done is not None and len(memory) < len(marks) and done >= marks[len(memory)]:  # a record a batch
            memory.append(
                {
                    "sentences": done,
                    "longest_tokens_so_far": max(lengths[:done]),
                    "rss_mb": round(memory_mb("VmRSS"), 1),
                    "peak_rss_mb": round(memory_mb("VmHWM"), 1),
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
            print(f"{done} sentences: {memory[-1]}", file=sys.stderr, flush=True)

    result = bertscope.mixing_agreement(session, sentences, method=methods, progress=seen)
    seconds = time.perf_counter() - started
    output = {
        "model": session.info.source,
        "device": str(session.device),
        "threads": torch.get_num_threads(),
        "corpus": str(args.corpus),
        "sentences": result.sentences,
        "tokens": result.tokens,
        "tokens_per_sentence": {"mean": round(float(np.mean(lengths)), 1), "max": max(lengths)},
        "methods": list(methods),
        "seconds": round(seconds, 1),
        "bare_with_weights_seconds": round(bare, 2),
        "ratio_to_bare_with_weights": round(seconds / bare, 1),
        f"each_alone_first_{args.each}_seconds": each,
        "memory": memory,
        "result": result.as_json(),
    }
    summary = (
        f"{result.sentences} sentences, {len(methods)} methods: {seconds:.0f} s ({seconds / bare:.0f}x a bare forward); "
        f"peak RSS " + ", ".join(f"{mark['sentences']}: {mark['peak_rss_mb']} MB" for mark in memory)
    )
    emit(output, args.output, summary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--flow-lengths", default="8,16,24,32,48")
    parser.add_argument("--corpus", default=None, help="corpus agreement over this file (see the docstring)")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--methods", default="all")
    parser.add_argument("--each", type=int, default=100, help="each method alone on this many sentences (0: none)")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    if args.corpus is not None:
        corpus_agreement(args)
        return

    import torch
    from transformers import AutoModel

    from bertscope.analyses.mixing.run import mixings
    from bertscope.api import load
    from bertscope.base.progress import outcome

    session = load(args.model, device=args.device)  # as the command loads it (its CPU linear-kernel choice too)
    text = sentence(session.tokenizer, args.tokens)
    encoding = session.encode(text)
    bare = AutoModel.from_pretrained(session.loaded.directory).to(session.device).eval()
    eager = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="eager").to(session.device).eval()
    inputs = session.loaded.family.inputs(session.tensors(encoding))

    def forward(model, weights: bool) -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            model(**inputs, output_attentions=weights)
        return time.perf_counter() - started

    def method(name: str, text_or_encoding=encoding) -> float:
        started = time.perf_counter()
        outcome(mixings(session, text_or_encoding, methods=[name]))
        return time.perf_counter() - started

    contenders = {
        "bare": lambda: forward(bare, False),
        "bare_with_weights": lambda: forward(eager, True),
        "value-zeroing": lambda: method("value-zeroing"),
        "alti": lambda: method("alti"),
        "norms": lambda: method("norms"),
        "rollout": lambda: method("rollout"),
    }
    for timed in contenders.values():  # warm-up: kernels, caches
        timed()
    best = {name: float("inf") for name in contenders}
    for _ in range(args.rounds):
        for name, timed in contenders.items():
            best[name] = min(best[name], timed())
    flows = []
    for length in (int(value) for value in args.flow_lengths.split(",")):
        short = session.encode(sentence(session.tokenizer, length))
        seconds = min(method("flow", short) for _ in range(2))
        flows.append({"tokens": len(short), "seconds": round(seconds, 3)})
    ratios = {name: round(best[name] / best["bare"], 2) for name in contenders}
    result = {
        "model": session.info.source,
        "device": str(session.device),
        "threads": torch.get_num_threads(),
        "tokens": len(encoding),
        "layers": session.num_layers,
        "seconds": {name: round(value, 5) for name, value in best.items()},
        "ratio_to_bare": ratios,
        "ratio_to_bare_with_weights": {name: round(best[name] / best["bare_with_weights"], 2) for name in contenders},
        "flow_against_length": flows,
        "budgets": {"value-zeroing": 8, "alti": 2, "flow_32_tokens_seconds": 10},
    }
    summary = (
        f"{len(encoding)} tokens: bare {best['bare'] * 1e3:.1f} ms; value zeroing {ratios['value-zeroing']}x, "
        f"ALTI {ratios['alti']}x; flow " + ", ".join(f"{flow['tokens']} tokens {flow['seconds']} s" for flow in flows)
    )
    emit(result, args.output, summary)


if __name__ == "__main__":
    main()
