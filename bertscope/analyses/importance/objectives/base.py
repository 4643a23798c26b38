"""What every objective shares: its batches (tokenised once, length-grouped, padded on each walk), its scores under
head gates, and the running sums a walk keeps (`Tally`)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.importance.results import Measurement
from bertscope.analyses.streaming import CorpusBatches, pad_batch, words_of
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence
from bertscope.model.device import upload
from bertscope.model.masks import Ablation

if TYPE_CHECKING:
    from transformers import BatchEncoding

    from bertscope.model.session import Session

MLM_RATE = 0.15
WORD_COLUMNS = {"upos": "upos", "xpos": "xpos", "deprel": "deprels"}  # a word task's Sentence attribute


@dataclass
class Batch:
    """Model inputs and targets of some sentences; every tensor has the batch as its first dimension."""

    inputs: dict[str, Tensor]
    target: dict[str, Tensor] = field(default_factory=dict)
    number: int = -1  # its place in a walk over the corpus (the same every walk)

    @property
    def size(self) -> int:
        return int(self.inputs["input_ids"].shape[0])

    def repeated(self, times: int) -> Batch:
        """The batch stacked `times` over (row k·B + b is sentence b), for one mask per copy."""
        if times == 1:
            return self

        def tile(tensor: Tensor) -> Tensor:
            return tensor.repeat(times, *([1] * (tensor.dim() - 1)))

        return Batch({k: tile(v) for k, v in self.inputs.items()}, {k: tile(v) for k, v in self.target.items()}, self.number)


# How an objective turns a padded batch into its Batch: (batch number, its sentences, the chunk's encoding, the
# batch's places in it, the padded tensors).
Finish = Callable[[int, list[Sentence], "BatchEncoding", list[int], dict[str, Tensor]], Batch]


class Batches:
    """An objective's batches, built afresh on every walk over its sentences, a chunk at a time.

    Every measurement (importance, each point of a pruning curve) walks the corpus again,
    so batches are not kept between walks: a walk (streaming.CorpusBatches) holds one chunk's
    token ids and one batch's tensors, whatever the corpus's length. Walks are deterministic,
    so batch `number` k is the same sentences (and, for `mlm`, the same masked tokens) every
    time. `finish(number, sentences, encoded, indices, padded)` turns a padded batch into the
    objective's Batch.
    """

    def __init__(
        self, session: Session, sentences: Sequence[Sentence], batch_size: int | None, finish: Finish, *, words: bool = False
    ) -> None:
        # Under torchrun each rank walks its own shard (sentence i when i % size == rank); the objective's
        # `sentences` stays the whole corpus's count, and the sums are added across ranks (runtime).
        sentences = list(distributed.shard(sentences)) if distributed.world().active else sentences
        self.session, self.sentences, self.finish, self.words = session, sentences, finish, words
        self.corpus = CorpusBatches(sentences, self._encode, job=JobOptions(batch_size=batch_size))

    def _encode(self, chunk: Sequence[Sentence]) -> BatchEncoding:
        tokenizer, limit = self.session.tokenizer, self.session.max_length
        if self.words:
            return cast(
                "BatchEncoding", tokenizer([list(words_of(s)) for s in chunk], is_split_into_words=True, truncation=True, max_length=limit)
            )
        pairs = [s.pair for s in chunk]
        if any(p is not None for p in pairs) and not all(p is not None for p in pairs):
            raise InputError("a batch mixes single sentences and pairs; give one kind of input per corpus")
        texts = [s.text for s in chunk]
        return cast(
            "BatchEncoding",
            tokenizer(texts, pairs if pairs[0] is not None else None, truncation=True, max_length=limit, return_special_tokens_mask=True),
        )

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.corpus:
            padded = pad_batch(self.session.tokenizer, batch.encoded, batch.indices)
            yield self.finish(batch.number, batch.items, batch.encoded, batch.indices, padded)

    def __len__(self) -> int:
        """Sentences walked over (known without encoding them: a count of batches would encode the corpus once more)."""
        return len(self.sentences)

    @property
    def done(self) -> int:
        """Sentences in the batches walked so far."""
        return self.corpus.done


@dataclass
class Scores:
    """Per row: the loss, and the metric as a sum and a count (accuracy = correct / counted; F1 = 2·TP / entities
    predicted and gold); for a metric over the whole corpus (a rank correlation), its (prediction, gold) pairs."""

    loss: Tensor  # [R]
    metric_sum: Tensor  # [R]
    metric_count: Tensor  # [R]
    paired: Tensor | None = None  # [P, 2]


class Tally:
    """The scores of a walk over the corpus added up (a rank metric's pairs kept), then across torchrun's ranks."""

    def __init__(self, objective: Objective) -> None:
        self.objective = objective
        self.loss = self.metric_sum = self.metric_count = 0.0
        self.paired: list[np.ndarray] = []

    def add(self, scores: Scores) -> None:
        sums = torch.stack([part.detach().sum().double() for part in (scores.loss, scores.metric_sum, scores.metric_count)])
        loss, metric_sum, metric_count = sums.tolist()  # one read of the device, not three
        self.loss, self.metric_sum, self.metric_count = self.loss + loss, self.metric_sum + metric_sum, self.metric_count + metric_count
        if scores.paired is not None:
            self.paired.append(scores.paired.detach().double().cpu().numpy())

    def measurement(self, **arrays: Any) -> tuple[Measurement, dict[str, Any]]:
        """The objective over the whole corpus, and `arrays` summed across the ranks with it."""
        summed = distributed.sum_across({"loss": self.loss, "metric_sum": self.metric_sum, "metric_count": self.metric_count, **arrays})
        paired = None
        if self.objective.ranked:  # every rank's pairs (a collective: every rank takes part)
            paired = np.concatenate([part for parts in distributed.gather(self.paired) for part in parts] or [np.zeros((0, 2))])
        metric = self.objective.corpus_metric(summed["metric_sum"], summed["metric_count"], paired)
        return Measurement(summed["loss"] / max(self.objective.sentences, 1), metric), summed


class Objective:
    """A loss over prepared batches; subclasses say how to compute it from the model's outputs."""

    name = ""
    metric = ""
    description = ""
    compares_with_unmasked = False  # the loss is a distance from the unmasked model's output (preserve, embedding)
    ranked = False  # the metric is a rank correlation over the whole corpus (Scores.paired), not a sum over rows

    def __init__(self, session: Session, batches: Batches, sentences: int, notes: list[str] | None = None) -> None:
        self.session = session
        self.batches = batches
        self.sentences = sentences
        self.notes = notes or []
        self.source = ""  # where its data came from, as the CLI's JSON names it
        self.texts: list[str] = []  # the sentences measured on, as text (for timing a pruned model)

    def reference(self, batch: Batch) -> Batch:
        """The batch with whatever the loss compares against (the unmasked output, for `preserve`)."""
        return batch

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        raise NotImplementedError

    def losses(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
        """The loss per row alone (an ablation sweep's masked rows, whose metric nobody reads)."""
        return self.scores(batch, gates, ablation).loss

    def corpus_metric(self, metric_sum: float, metric_count: float, paired: np.ndarray | None) -> float:
        """The metric over the whole corpus from the summed rows (or, for a `ranked` one, every pair)."""
        return metric_sum / metric_count if metric_count else float("nan")

    def measured_notes(self) -> list[str]:
        """What the last measurement found beside the metric, for the result's notes (qa: SQuAD's exact match)."""
        return []

    def gradient_target(self, batch: Batch, gates: Tensor, ablation: Ablation, generator: torch.Generator) -> tuple[Tensor, bool, Scores]:
        """A scalar whose gradient in `[B, L, H]` gates gives each sentence's importance.

        Also says whether to square the gradient (True) or take its magnitude, and gives
        the scores of this pass (the objective at the gates, for the baseline).
        """
        scores = self.scores(batch, gates, ablation)
        return scores.loss.sum(), False, scores


def sentence_batches(
    session: Session,
    sentences: Sequence[Sentence],
    batch_size: int | None,
    targets: Callable[[Sentence], dict[str, int]] | None = None,
    then: Callable[[Batch], Batch] | None = None,
) -> Batches:
    """Length-grouped padded batches, made on each walk; `targets(sentence)` gives a sentence's target
    values, and `then(batch)`, if given, finishes each batch (the mlm objective masks its tokens there)."""

    def finish(number: int, group: list[Sentence], encoded: BatchEncoding, indices: list[int], padded: dict[str, Tensor]) -> Batch:
        special = padded.pop("special_tokens_mask")
        inputs = {k: upload(v, session.device) for k, v in padded.items()}
        target = {"special": upload(special.bool(), session.device)}
        if targets is not None:
            values = [targets(sentence) for sentence in group]
            for key in values[0]:
                target[key] = upload(np.array([value[key] for value in values]), session.device)
        batch = Batch(inputs, target, number)
        return batch if then is None else then(batch)

    return Batches(session, sentences, batch_size, finish)


def sentence_generator(seed: int, token_ids: np.ndarray) -> torch.Generator:
    """A random generator for one sentence, seeded by `seed` and its token ids (not its place in a batch)."""
    digest = hashlib.sha256(f"{seed}:".encode() + np.asarray(token_ids, dtype=np.int64).tobytes()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def per_row_mean(values: Tensor, rows: Tensor, num_rows: int) -> tuple[Tensor, Tensor]:
    """Sum and count of `values` grouped by `rows` (for token-level losses per sentence)."""
    total = values.new_zeros(num_rows).index_add(0, rows, values)
    count = values.new_zeros(num_rows).index_add(0, rows, torch.ones_like(values))
    return total, count
