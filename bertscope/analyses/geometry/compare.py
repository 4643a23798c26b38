"""Two models with the same tokenizer, side by side: a model and its fine-tuned checkpoint, say.

Over one corpus, in one pass that runs both models on the same batches:
- per head, the cosine similarity between the two models' attention maps of the same
  sentence (the map flattened over its real tokens), averaged over sentences — Kovaleva et
  al. 2019, Fig. 4 ("cosine similarity of attention before and after fine-tuning");
- linear and debiased CKA between every hidden-state layer of A and every one of B
  (Kornblith et al. 2019), on the same seeded sample of rows;
- optionally, a probe per layer for each given task on both models, and the differences.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence, Sized
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bertscope import runtime as distributed
from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.geometry.results import ComparisonResult, ProbeDifference
from bertscope.analyses.geometry.run import cka_matrices, on_device
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress, relay
from bertscope.data.corpus import Sentence

if TYPE_CHECKING:
    from bertscope.analyses.geometry.representations import PreparedBatch, Sample
    from bertscope.analyses.probing.results import ProbeReport
    from bertscope.model.session import Session

_PROBE_TEXT = "Hello, World! Ünïcode, straße and 3.14 — naïve café [MASK] ##ing"


def check_same_tokenizer(a: Session, b: Session) -> None:
    """Fail with one line unless A and B split text into the same token ids."""
    vocab_a, vocab_b = a.tokenizer.get_vocab(), b.tokenizer.get_vocab()
    if vocab_a != vocab_b:
        raise InputError(
            f"model B's tokenizer differs from model A's (vocabularies of {len(vocab_b):,} and {len(vocab_a):,} entries"
            f"{', same size' if len(vocab_a) == len(vocab_b) else ''}); compare needs two models with the same tokenizer, "
            "e.g. a model and a fine-tuned checkpoint of it"
        )
    ids_a, ids_b = a.tokenizer(_PROBE_TEXT)["input_ids"], b.tokenizer(_PROBE_TEXT)["input_ids"]
    if ids_a != ids_b:
        raise InputError(
            "model B's tokenizer has the same vocabulary as model A's but splits text differently (casing or special tokens); "
            "compare needs two models with the same tokenizer"
        )


class _HeadCosines:
    """Per-sentence cosine of each head's attention maps in A and B, summed over sentences on the device."""

    def __init__(self, num_layers: int, num_heads: int, device: torch.device) -> None:
        self.sums = torch.zeros(num_layers, num_heads, dtype=torch.float64, device=device)
        self.squares = torch.zeros_like(self.sums)
        self.sentences = 0

    def add(self, outputs: list[Any], prepared: PreparedBatch) -> None:
        a, b = outputs
        real = prepared.real.float()
        pairs = real[:, None, :, None] * real[:, None, None, :]  # [B, 1, T, T]: real query and real key
        for layer, (x, y) in enumerate(zip(a.attentions, b.attentions, strict=True)):
            x, y = x.float() * pairs, y.to(x.device).float() * pairs
            dot = (x * y).sum((-1, -2))
            norms = x.pow(2).sum((-1, -2)).sqrt() * y.pow(2).sum((-1, -2)).sqrt()
            cosine = (dot / norms.clamp(min=1e-12)).double()  # [B, H]
            self.sums[layer] += cosine.sum(0)
            self.squares[layer] += cosine.pow(2).sum(0)
        self.sentences += real.shape[0]

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and spread over the whole corpus (under torchrun, every rank's sums added)."""
        summed = distributed.sum_across({"sums": self.sums, "squares": self.squares, "sentences": self.sentences})
        count = max(summed["sentences"], 1)
        mean = summed["sums"] / count
        variance = (summed["squares"] / count - mean.pow(2)).clamp(min=0)
        return mean.float().cpu().numpy(), variance.sqrt().float().cpu().numpy()


def compare_models(
    a: Session,
    b: Session,
    sentences: Iterable[Sentence],
    *,
    unit: str = "token",
    max_rows: int | None = None,
    probes: Sequence[tuple[str, Sequence[Sentence]]] = (),
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[ComparisonResult]]:
    """Compare session `a` with session `b` over a corpus; a generator of progress, the last carrying the result.

    `probes` are (task, sentences with labels or CoNLL-U words) to probe on both models. `job`: the batch size, the seed
    of the sample and of the probes' splits, their feature cache, the cancel.
    """
    from bertscope.analyses.geometry.representations import DEFAULT_MAX_ROWS, stream_sample

    check_same_tokenizer(a, b)
    notes: list[str] = []
    same_shape = (a.num_layers, a.num_heads) == (b.num_layers, b.num_heads) and not a.kept_heads and not b.kept_heads
    if (a.num_layers, a.num_heads) != (b.num_layers, b.num_heads):
        notes.append(
            f"the models have different layer × head layouts ({a.num_layers}×{a.num_heads} and {b.num_layers}×{b.num_heads}); "
            "attention maps are compared head by head only when they match"
        )
    elif not same_shape:
        pruned = " and ".join(name for name, model in (("model A", a), ("model B", b)) if model.kept_heads)
        notes.append(f"{pruned} has physically pruned heads; attention maps are compared head by head only between unpruned models")
    heads = _HeadCosines(a.num_layers, a.num_heads, a.device) if same_shape else None
    total = distributed.shard_size(len(sentences)) if isinstance(sentences, Sized) else None  # this rank's share
    counted = {"sentences": 0, "tokens": 0}

    def on_batch(outputs: list[Any], prepared: PreparedBatch) -> None:
        if heads is not None:
            heads.add(outputs, prepared)
        counted["sentences"] += int(prepared.real.shape[0])
        counted["tokens"] += prepared.tokens

    sample = yield from relay(
        stream_sample(
            [a, b],
            sentences,
            unit=unit,
            max_rows=max_rows or DEFAULT_MAX_ROWS,
            attentions=same_shape,
            on_batch=on_batch,
            job=job,
        ),
        lambda step: Progress("attention and representations", step.done, total),
    )
    if sample is None:
        return
    counted = distributed.sum_across(counted)
    cosine, spread = heads.result() if heads is not None else (None, None)
    cka: tuple[np.ndarray, np.ndarray] | None = None
    if distributed.is_main():  # under torchrun rank 0 holds the merged sample
        cka = yield from _layer_cka(sample, job.seed, notes, a.device)
    differences: list[ProbeDifference] = []
    for number, (task, data) in enumerate(probes):  # every rank: probing shards its feature passes itself
        scores = []
        for which, session in (("A", a), ("B", b)):
            report: ProbeReport | None = None
            for step in _probe(session, task, data, job):
                if step.result is not None:
                    report = step.result
                yield Progress(f"probe {task} ({which}): {step.stage}", number, len(probes))
            if report is None:
                return  # cancelled
            metric = report.metric
            scores.append(tuple(float(entry[metric]) for entry in report.layers))
        differences.append(ProbeDifference(task=task, metric=metric, a=scores[0], b=scores[1]))
    result: ComparisonResult | None = None
    if distributed.is_main():
        assert cka is not None  # rank 0's, from the sample
        result = ComparisonResult(
            model_a=a.info.source,
            model_b=b.info.source,
            sentences=counted["sentences"],
            tokens=counted["tokens"],
            unit=sample.unit,
            rows_sampled=sample.size,
            head_cosine=cosine,
            head_cosine_std=spread,
            cka=cka[0],
            cka_debiased=cka[1],
            probes=tuple(differences),
            notes=tuple(notes),
        )
    yield Progress("done", 1, 1, distributed.from_main(result))


def _layer_cka(
    sample: Sample, seed: int, notes: list[str], device: torch.device
) -> Generator[Progress[ComparisonResult], None, tuple[np.ndarray, np.ndarray]]:
    """Linear and debiased CKA between every layer of A and every layer of B, on the sample (a generator returning them),
    computed on model A's device (on a GPU its float64 products are milliseconds, on the host seconds)."""
    if sample.size < 4:
        raise InputError(f"only {sample.size} {sample.unit}s to compare; CKA needs at least 4 (give more sentences)")
    if sample.seen > sample.size:
        notes.append(f"CKA on a seeded sample of {sample.size:,} of the corpus's {sample.seen:,} {sample.unit}s (seed {seed})")
    yield Progress("CKA", 0, 1)
    states_a, states_b = (on_device(states, device) for states in sample.states)
    return cka_matrices(
        [states_a[:, layer] for layer in range(states_a.shape[1])], [states_b[:, layer] for layer in range(states_b.shape[1])]
    )


def _probe(session: Session, task: str, data: Sequence[Sentence], job: JobOptions) -> Iterator[Progress[ProbeReport]]:
    from bertscope.analyses.probing.run import run_probe
    from bertscope.data.splits import make_splits

    splits = make_splits(list(data), None, None, seed=job.seed)
    return run_probe(session, task, splits, control=False, random_baseline=False, job=job)


def probe_data(task: str, corpus: Sequence[Sentence] | None) -> list[Sentence]:
    """The sentences to probe `task` on: a built-in task is generated; else the corpus must carry its labels."""
    from bertscope.data.probing_tasks import STRUCTURAL_TASKS, TASKS, WORD_TASKS, generate

    if task in TASKS:
        return generate(task)
    if task in WORD_TASKS + STRUCTURAL_TASKS:
        if not corpus or corpus[0].words is None:
            raise InputError(f"probe task {task!r} needs a CoNLL-U corpus", setting="data")
        return list(corpus)
    if not corpus or corpus[0].label is None:
        raise InputError(
            f"unknown probe task {task!r}: use a built-in task ({', '.join(TASKS)}), upos/xpos/deprel with a CoNLL-U corpus, "
            "or any name with a SentEval corpus (its labels)"
        )
    return list(corpus)
