"""The host's work around the model, counted: torch operations and reads of tensor values per batch of each corpus job.

On a GPU every operation is a launch and every read of a tensor's values waits for the device, so
a job's cost beyond the forward follows these counts (benchmarks/host_overhead.py, benchmarks/README.md).
Counted here on the CPU with the tiny model, not timed: a batch's operations against a bare
transformers forward's, and nothing that grows with the sentences of a batch.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import bertscope
from bertscope import api
from bertscope.analyses.probing.features import FeatureOptions, extract_features
from bertscope.data.corpus import Sentence

WORDS = "the cat sat on a mat by the door today .".split()
READS = {"item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__", "__array__"}

# Operations a batch, at most, as a multiple of a bare forward's (with attentions and hidden states); measured
# 2026-11 on the tiny model (3 layers): patterns 1.97, norms 2.64 (classified and summed on the host), syntax 2.1, geometry 1.07, compare 3.3 (two models),
# features 1.1, importance 3.0 (a forward and a backward), cloze 1.35, mixing 2.12 (attention, norms, rollout: their
# rows normalised, rolled out, ranked and summed on the device since session 22, 1.54 when the host did it), and 5.95
# with value zeroing and ALTI (each runs the rest of every layer again, on the batch's B·T² rows).
BOUNDS = {
    "patterns": 2.2,
    "norms": 2.9,
    "syntax": 2.3,
    "geometry": 1.2,
    "compare": 3.5,
    "features": 1.2,
    "importance": 3.3,
    "cloze": 1.45,
    "mixing": 2.3,
    "mixing_layers": 6.3,
}
MIXING = ("attention", "norms", "rollout")  # from the pass's weights and norms (flow is scipy's, on the host)
LAYERS = ("value-zeroing", "alti")  # the rest of every layer run again on the batch's B·T² rows, and the decomposition


def treebank(size: int) -> list[Sentence]:
    arcs = len(WORDS) - 1
    tags = {"upos": ("NOUN",) * len(WORDS), "heads": (0,) + (1,) * arcs, "deprels": ("root",) + ("dep",) * arcs}
    return [Sentence(text=" ".join(WORDS), words=tuple(WORDS), **tags) for _ in range(size)]


def counted(model: torch.nn.Module, run) -> tuple[int, int, int]:
    """(aten operations, reads of tensor values, model passes) of `run()`."""
    tally = {"operations": 0, "reads": 0, "passes": 0}

    class Operations(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            tally["operations"] += 1
            return func(*args, **(kwargs or {}))

    class Reads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            tally["reads"] += getattr(func, "__name__", "") in READS
            return func(*args, **(kwargs or {}))

    hook = model.get_input_embeddings().register_forward_pre_hook(lambda *_: tally.__setitem__("passes", tally["passes"] + 1))
    try:
        with warnings.catch_warnings(), Reads(), Operations():
            warnings.simplefilter("ignore")
            run()
    finally:
        hook.remove()
    return tally["operations"], tally["reads"], tally["passes"]


@pytest.fixture(scope="module")
def jobs(tiny_session, tiny_mlm_session, tiny_bert_dir):
    from transformers import AutoModel

    from bertscope.model.session import Session

    other = Session.open(str(tiny_bert_dir), device="cpu")
    bare = AutoModel.from_pretrained(str(tiny_bert_dir), attn_implementation="eager").eval()

    def bare_run(size: int, batch_size: int) -> None:
        with torch.inference_mode():
            for start in range(0, size, batch_size):
                inputs = tiny_session.tokenizer([" ".join(WORDS)] * min(batch_size, size - start), padding=True, return_tensors="pt")
                bare(**inputs, output_attentions=True, output_hidden_states=True)

    s, m = tiny_session, tiny_mlm_session
    words = FeatureOptions(level="word")
    return {
        "bare": (bare, bare_run),
        "patterns": (s.model, lambda n, size: bertscope.patterns(s, treebank(n), batch_size=size)),
        "norms": (s.model, lambda n, size: bertscope.patterns(s, treebank(n), batch_size=size, norms=True)),
        "syntax": (s.model, lambda n, size: api.syntax(s, treebank(n), batch_size=size)),
        "geometry": (s.model, lambda n, size: api.geometry(s, treebank(n), batch_size=size)),
        "compare": (s.model, lambda n, size: api.compare(s, other, treebank(n), batch_size=size)),
        "features": (s.model, lambda n, size: list(extract_features(s, treebank(n), words, cache_dir=False, batch_size=size))),
        "importance": (s.model, lambda n, size: bertscope.importance(s, "preserve", treebank(n), batch_size=size)),
        "cloze": (m.model, lambda n, size: bertscope.cloze(m, ["the cat sat on a [MASK] by the door\tmat"] * n, batch_size=size)),
        "mixing": (s.model, lambda n, size: bertscope.mixing_agreement(s, [" ".join(WORDS)] * n, method=MIXING, batch_size=size)),
        "mixing_layers": (s.model, lambda n, size: bertscope.mixing_agreement(s, [" ".join(WORDS)] * n, method=LAYERS, batch_size=size)),
    }


def per_batch_and_sentence(model, run) -> tuple[int, int, float, float]:
    """A batch's operations and reads (8 sentences as two batches against one), and a sentence's (16 in one batch against 8),
    after a run that pays what is done once per model (the norms' factors of W_O)."""
    run(8, 8)
    one = counted(model, lambda: run(8, 8))
    two = counted(model, lambda: run(8, 4))
    more = counted(model, lambda: run(16, 16))
    assert (one[2], two[2], more[2]) == (1, 2, 1)
    return two[0] - one[0], two[1] - one[1], (more[0] - one[0]) / 8, (more[1] - one[1]) / 8


@pytest.mark.parametrize("job", list(BOUNDS))
def test_a_batch_takes_a_few_times_a_forwards_operations_and_nothing_a_sentence(jobs, job):
    bare_operations, bare_reads, _, _ = per_batch_and_sentence(*jobs["bare"])
    operations, reads, sentence_operations, sentence_reads = per_batch_and_sentence(*jobs[job])
    assert operations <= BOUNDS[job] * bare_operations, (operations, bare_operations)
    assert reads <= 10, reads  # a few a batch (the partial result, the progress): never one a sentence
    assert sentence_reads == 0
    # importance draws each sentence's random direction from its own generator, on the host (importance/objectives/base.py): the
    # same numbers in any batch; those are host operations, not launches
    assert sentence_operations == 0 or (job == "importance" and sentence_operations <= 4), sentence_operations
