"""Probing every layer on a CoNLL-U corpus against a bare batched forward, cold and warm cache.

    python benchmarks/probe_layers.py [--model M] [--device D] [--sentences 4000] [--task upos] [-o FILE.json]

Corpus: a CoNLL-U file (`--data`, its first `--sentences`), or bertscope's generated
treebank of `--sentences` sentences (core.data.treebank: varied sentences of 4-30 words). In the
same run:
- `bare`: a transformers model (SDPA) over the same sentences in batches of 32 sorted by
  token count, `output_hidden_states=True`, inputs tokenised beforehand;
- `probe_cold`: `run_probe` end to end with an empty feature cache: word-level features of
  every layer for train/dev/test, and a linear probe per layer with its L2 strength chosen
  on dev (no control task, no random-init baseline: those are separate probes);
- `probe_warm`: the same again, features from the cache; only the probes are trained;
- `session`: bertscope's own forward (`Session.run`) over the same batches. On CPUs it
  runs the linear layers through oneDNN (core.model.cpu_linear), faster than `bare` where MKL is
  slow (AMD); `cold_ratio_of_session_forward` says what probing adds to bertscope's own
  pass, whatever the speed of that pass.
Budgets (issue: layer-wise probing): cold ≤ 1.5 × bare; warm ≤ 0.3 × bare.
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time

from common import emit, synchronise  # benchmarks/common.py, found beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--data", default=None)
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--task", default="upos")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch
    from transformers import AutoModel

    from bertscope.core.analyses.probing import make_splits, run_probe
    from bertscope.core.data.corpus import read_sentences
    from bertscope.core.data.treebank import generate_treebank
    from bertscope.core.model.session import Session

    session = Session.open(args.model, device=args.device)
    if args.data:
        sentences = list(itertools.islice(read_sentences(args.data), args.sentences))
    else:
        sentences = generate_treebank(args.sentences)
    splits = make_splits(sentences, None, None)

    bare = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="sdpa").to(session.device).eval()
    # Sorted by token count, the batching with the least padding (what bertscope's extraction does).
    lengths = session.tokenizer([list(s.words) for s in sentences], is_split_into_words=True, truncation=True,
                                max_length=session.max_length, return_length=True)["length"]
    ordered = [sentences[i] for i in sorted(range(len(sentences)), key=lengths.__getitem__)]
    batches = [
        session.tokenizer([list(s.words) for s in ordered[i : i + 32]], is_split_into_words=True, padding=True,
                          truncation=True, max_length=session.max_length, return_tensors="pt").to(session.device)
        for i in range(0, len(ordered), 32)
    ]

    def time_bare() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                bare(**batch, output_hidden_states=True)
        synchronise(session.device)
        return time.perf_counter() - started

    def time_session() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                session.run(dict(batch), hidden_states=True)
        synchronise(session.device)
        return time.perf_counter() - started

    def time_probe(cache_dir) -> tuple[float, object]:
        started = time.perf_counter()
        report = list(run_probe(session, args.task, splits, control=False, random_baseline=False, cache_dir=cache_dir))[-1].result
        return time.perf_counter() - started, report

    # Bare runs before, between and after the probes, so that a machine that gets busier or
    # quieter during the run affects both sides; the fastest bare run is the unit (conservative).
    time_bare()  # warm-ups
    time_session()
    load_before = os.getloadavg()[0]
    bare_runs, session_runs = [time_bare()], [time_session()]
    with tempfile.TemporaryDirectory() as cache:
        cold_s, report = time_probe(cache)
        bare_runs.append(time_bare())
        session_runs.append(time_session())
        warm_s, _ = time_probe(cache)
    bare_runs.append(time_bare())
    session_runs.append(time_session())
    bare_s, session_s = min(bare_runs), min(session_runs)
    result = {
        "benchmark": "probe_layers",
        "model": session.info.source,
        "data": args.data or "generated treebank",
        "device": str(session.device),
        "threads": torch.get_num_threads(),
        "task": args.task,
        "sentences": len(sentences),
        "words": int(sum(len(s.words) for s in sentences)),
        "bare_forward_s": round(bare_s, 3),
        "bare_runs_s": [round(run, 3) for run in bare_runs],
        "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "session_forward_s": round(session_s, 3),
        "session_runs_s": [round(run, 3) for run in session_runs],
        "probe_cold_s": round(cold_s, 3),
        "probe_warm_s": round(warm_s, 3),
        "cold_ratio": round(cold_s / bare_s, 3),
        "warm_ratio": round(warm_s / bare_s, 3),
        "cold_ratio_of_session_forward": round(cold_s / session_s, 3),
        "warm_ratio_of_session_forward": round(warm_s / session_s, 3),
        "best_layer": report.best_layer,
        "accuracy_by_layer": [entry["accuracy"] for entry in report.layers],
        "budgets": {"cold": 1.5, "warm": 0.3},
        "within_budget": cold_s / bare_s <= 1.5 and warm_s / bare_s <= 0.3,
    }
    emit(result, args.output, f"probe_layers: cold {result['cold_ratio']}x, warm {result['warm_ratio']}x of a bare forward ({bare_s:.2f}s); "
                 f"cold {result['cold_ratio_of_session_forward']}x of bertscope's own forward ({session_s:.2f}s)")


if __name__ == "__main__":
    main()
