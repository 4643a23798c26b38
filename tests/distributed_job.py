"""Run by tests/test_distributed.py under torchrun (two gloo ranks on the CPU): not a test module itself.

    torchrun --standalone --nproc-per-node 2 tests/distributed_job.py equal OUT.pkl TINY_A TINY_B CACHE DATA PROBE.json
    torchrun --standalone --nproc-per-node 2 tests/distributed_job.py fail OUT.json

`equal`: patterns (with norms), syntax, probe, erase (UPOS at layer 2 of the sample treebank), importance (both methods, for a probe's loss on TINY_A,
and by ablation for the similarity of sample pairs on TINY_A, a rank metric whose pairs are gathered, the metric of each mask too),
geometry, the context-mixing agreement, and compare (of two tiny random models saved by the test, TINY_A and TINY_B) through the public API, rank 0 saving the results for the test
to hold against one process; then `bertscope probe` on DATA with the feature cache CACHE through the command line (`cached_probe`),
rank 0 writing PROBE.json (one launch for all: each costs a start of torch in three processes). `fail`: `bertscope patterns -o OUT.json`
through the command line, with rank 1 running out of memory at its third batch. `cached_probe OUT.json CACHE TINY DATA`:
`bertscope probe` on DATA with the feature cache CACHE. `on_gpu OUT.pkl TINY`: patterns (with norms) on the
device torchrun's environment chooses, saved with that device and the backend of the process group (None for one rank).
"""

import pickle
import sys
from pathlib import Path

from bertscope import runtime as distributed

PATTERN_SENTENCES = 24
IMPORTANCE_SENTENCES = 10
SYNTAX_SENTENCES = 30
GEOMETRY = dict(limit=16, max_rows=60)  # fewer rows than the sentences' tokens: the ranks' samples are merged
COMPARE = dict(limit=30, max_rows=80)
PROBE_TASK = "subject_number"  # the probe objective's built-in task
SIMILARITY = dict(limit=10, method="ablation")  # the shipped sample pairs
MIXING = dict(limit=12, method=("attention", "norms", "value-zeroing", "alti", "flow", "rollout"))  # every method, flow included
ERASE = dict(limit=60, layer=2, measure="preserve", cache_dir=False)  # UPOS of the sample treebank (its data in the job)
SAE = dict(layer=2, limit=80, width=96, k=8, epochs=2, held_out=0.2)  # an SAE of TINY_A on the sample treebank's sentences
SAE_FIT = dict(width=24, k=3, epochs=3, lr=1e-2, batch_tokens=64, dead_after=128)  # planted rows; features die and are revived


def equal(out: str, tiny_a: str, tiny_b: str, cache_dir: str, data: str, probe_out: str) -> None:
    import bertscope
    from bertscope.api import probe_sentences
    from bertscope.data.corpus import sample_corpus

    model = bertscope.load(device="cpu")
    results = {"world": distributed.world().size}
    results["patterns"] = bertscope.patterns(model, limit=PATTERN_SENTENCES, norms=True)
    results["syntax"] = bertscope.api.syntax(model, limit=SYNTAX_SENTENCES)
    train = probe_sentences("upos", data=str(sample_corpus("conllu")), limit=70).train
    results["probe"] = bertscope.api.probe(model, "upos", train, control=False, random_baseline=False, cache_dir=False)
    results["erase"] = bertscope.erase(model, "upos", data=str(sample_corpus("conllu")), **ERASE)
    for method in ("ablation", "gradient"):
        results[method] = bertscope.importance(model, "preserve", limit=IMPORTANCE_SENTENCES, method=method)
    results["geometry"] = bertscope.api.geometry(model, **GEOMETRY)
    results["mixing"] = bertscope.mixing_agreement(model, **MIXING)
    results["compare"] = bertscope.api.compare(bertscope.load(tiny_a, device="cpu"), tiny_b, **COMPARE)
    results["similarity"] = bertscope.importance(bertscope.load(tiny_a, device="cpu"), "similarity", **SIMILARITY)
    results["probe_objective"], fits = probe_objective(bertscope.load(tiny_a, device="cpu"))
    results["probe_fits"] = distributed.gather(fits)
    results["sae"], results["sae_fit"] = sae_trained(bertscope.load(tiny_a, device="cpu"), Path(out).with_name("sae"))
    if distributed.is_main():
        with open(out, "wb") as handle:
            pickle.dump(results, handle)
    cached_probe(probe_out, cache_dir, tiny_a, data)


def sae_trained(model, directory: Path):
    """An SAE trained through the API (rank 0 writes it) with its weights, and the trainer alone on planted rows,
    each rank holding its share of each block's rows, with its weights."""
    import bertscope
    from bertscope.analyses.sae.autoencoder import TopKSAE
    from bertscope.data.corpus import sample_corpus

    result = bertscope.train_sae(model, data=str(sample_corpus("conllu")), out=str(directory), **SAE)
    weights = TopKSAE.load(directory)[0].weights() if distributed.is_main() else None
    trainer = fitted_on_planted(distributed.world().rank, distributed.world().size)
    return (result, weights), (trainer.sae.weights(), trainer.history, trainer.steps)


def fitted_on_planted(rank: int = 0, size: int = 1):
    """`fit` on 1,500 planted rows in blocks of 600, this rank's rows being every `size`-th of a block from `rank`."""
    import numpy as np
    import torch

    from bertscope.analyses.sae.results import SAESettings
    from bertscope.analyses.sae.train import fit, token_keys

    rng = np.random.default_rng(0)
    directions = rng.normal(size=(12, 8))
    weights = rng.uniform(0, 1, size=(1500, 12)) * (rng.random((1500, 12)) < 0.25)
    x = torch.as_tensor(weights @ directions + 0.01 * rng.normal(size=(1500, 8)), dtype=torch.float32)

    def blocks(epoch):
        for start in range(0, len(x), 600):
            numbers = np.arange(start, min(start + 600, len(x)))[rank::size]
            yield [(x[numbers], token_keys(0, epoch, numbers, np.zeros_like(numbers)))]

    *_, last = fit(blocks, 8, SAESettings(**SAE_FIT), seed=3)
    return last.result


def probe_objective(model):
    """Head importance for a probe's loss, counting the probes this rank trains."""
    import bertscope
    from bertscope.analyses.probing import probes

    original, fits = probes.train_probes, []

    def counted(*args, **options):
        fits.append(1)
        return original(*args, **options)

    probes.train_probes = counted
    try:
        return bertscope.importance(model, "probe", task=PROBE_TASK, method="gradient"), len(fits)
    finally:
        probes.train_probes = original


def fail(out: str, *_) -> None:
    import torch

    from bertscope.analyses.attention import patterns
    from bertscope.cli import main

    if distributed.world().rank == 1:
        original, calls = patterns._add_batch, []

        def running_out(*args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return original(*args, **kwargs)

        patterns._add_batch = running_out
    main(["patterns", "--device", "cpu", "--batch-size", "4", "--limit", "40", "--json", "-o", out])


def on_gpu(out: str, tiny: str) -> None:
    import bertscope

    model = bertscope.load(tiny)
    result = {
        "device": str(model.device),
        "backend": distributed._state.get("backend"),
        "patterns": bertscope.patterns(model, limit=PATTERN_SENTENCES, norms=True),
    }
    if distributed.is_main():
        with open(out, "wb") as handle:
            pickle.dump(result, handle)


def cached_probe(out: str, cache_dir: str, tiny: str, data: str) -> None:
    """`bertscope probe` through the command line with the feature cache `cache_dir`."""
    from bertscope.cli import main

    status = main([*cached_probe_arguments(cache_dir, tiny, data), "-o", out], standalone_mode=False)
    assert status in (None, 0), status


def cached_probe_arguments(cache_dir: str, tiny: str, data: str) -> list[str]:
    return [
        "probe",
        "--task",
        "upos",
        "--data",
        data,
        "--limit",
        "40",
        "--no-random-baseline",
        "--cache-dir",
        cache_dir,
        "-m",
        tiny,
        "--device",
        "cpu",
        "--json",
    ]


if __name__ == "__main__":
    {"equal": equal, "fail": fail, "cached_probe": cached_probe, "on_gpu": on_gpu}[sys.argv[1]](*sys.argv[2:])
