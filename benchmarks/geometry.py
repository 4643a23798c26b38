"""Representation geometry over a corpus against a bare batched forward with hidden states.

    python benchmarks/geometry.py [--model M] [--device D] [--sentences 1000] [--max-rows 4000] [-o FILE.json]

Both contenders see the same sentences (the shipped sample corpus, cycled to --sentences) in
the same run:
- `bare`: the session's model on pre-tokenised batches of 32, `output_hidden_states=True`;
- `geometry`: `bertscope.analyses.geometry.run.representation_geometry` end to end (tokenising, the
  forward, the seeded sample of --max-rows tokens, PCA, TwoNN, neighbours and CKA per layer).
The analysis after the forward costs O(rows² · d) per layer, independent of the corpus
length; the resident memory is sampled as the corpus streams: it should stay flat.
Prints JSON; exit status 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

from common import emit, rss_mb, synchronise  # benchmarks/common.py, found beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--max-rows", type=int, default=4000)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    import torch

    from bertscope.analyses.geometry.run import representation_geometry
    from bertscope.data.corpus import read_sentences, sample_corpus
    from bertscope.model.session import Session

    session = Session.open(args.model, device=args.device)
    sentences = list(itertools.islice(itertools.cycle(list(read_sentences(sample_corpus()))), args.sentences))
    ordered = sorted(sentences, key=lambda s: len(s.text))
    batches = [session.tokenize_batch([s.text for s in ordered[i : i + 32]]) for i in range(0, len(ordered), 32)]
    with torch.inference_mode():
        session.model(**batches[0], output_hidden_states=True)  # warm up
        start = time.perf_counter()
        for batch in batches:
            session.model(**batch, output_hidden_states=True)
        synchronise(session.device)
        bare = time.perf_counter() - start

    memory = [rss_mb()]
    stages: dict[str, float] = {}
    start = last = time.perf_counter()
    stage = "representations"
    for step in representation_geometry(session, sentences, max_rows=args.max_rows):
        now = time.perf_counter()
        stages[stage] = stages.get(stage, 0.0) + now - last
        stage, last = step.stage, now
        memory.append(rss_mb())
    total = time.perf_counter() - start
    result = step.result
    payload = {
        "model": session.info.source,
        "device": str(session.device),
        "sentences": len(sentences),
        "rows_seen": result.seen,
        "rows_sampled": result.size,
        "load_average": os.getloadavg(),
        "bare_forward_s": round(bare, 3),
        "geometry_s": round(total, 3),
        "ratio": round(total / bare, 2),
        "stages_s": {name: round(value, 3) for name, value in stages.items()},
        "rss_mb": {"start": round(memory[0], 1), "peak": round(max(memory), 1), "end": round(memory[-1], 1)},
        "intrinsic_dimension": [round(float(v), 2) for v in result.intrinsic_dimension],
        "cka_next_layer": [round(float(result.cka[layer, layer + 1]), 3) for layer in range(result.num_layers - 1)],
        "neighbourhood_overlap": [round(float(v), 3) for v in result.neighbourhood_overlap],
    }
    emit(
        payload, args.output, f"geometry {total:.1f} s = {total / bare:.2f} × a bare forward ({bare:.1f} s); peak RSS {max(memory):.0f} MB"
    )


if __name__ == "__main__":
    main()
