"""The sentence-embedding objectives: `similarity` (Spearman's rho of pooled cosines against gold scores) and
`embedding` (how far each pooled embedding turns)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.importance.objectives.base import Batch, Batches, Finish, Objective, Scores, sentence_generator
from bertscope.analyses.importance.objectives.sentences import PreserveObjective
from bertscope.analyses.streaming import CorpusBatches, pad_batch
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence
from bertscope.model.device import upload
from bertscope.model.masks import Ablation

if TYPE_CHECKING:
    from transformers import BatchEncoding

    from bertscope.model.session import Session


class PairBatches(Batches):
    """Sentence pairs for a bi-encoder: the two sentences of pair i encoded apart, rows 2i and 2i + 1 of a batch."""

    def __init__(self, session: Session, sentences: Sequence[Sentence], batch_size: int | None, finish: Finish) -> None:
        super().__init__(session, sentences, batch_size, finish)
        # a pair's padded cost: two rows of the longer side's length
        self.corpus = CorpusBatches(self.sentences, self._encode, lengths=_pair_lengths, job=JobOptions(batch_size=batch_size))

    def _encode(self, chunk: Sequence[Sentence]) -> BatchEncoding:
        texts = [s.text for s in chunk] + [s.pair or "" for s in chunk]  # the first sentences, then the second ones
        return cast("BatchEncoding", self.session.tokenizer(texts, truncation=True, max_length=self.session.max_length))

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.corpus:
            size = len(batch.encoded["input_ids"]) // 2
            rows = [row for index in batch.indices for row in (index, size + index)]
            padded = pad_batch(self.session.tokenizer, batch.encoded, rows)
            yield self.finish(batch.number, batch.items, batch.encoded, batch.indices, padded)


def _pair_lengths(encoded: BatchEncoding) -> list[int]:
    ids = encoded["input_ids"]
    size = len(ids) // 2
    return [2 * max(len(ids[index]), len(ids[size + index])) for index in range(size)]


def _pooled(session: Session, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
    """Each row's sentence embedding `[R, D]`, pooled as the model says (model.pooling)."""
    hidden = session.run(batch.inputs, gates=gates, ablation=ablation, hidden_states=False, encoder_only=True).last_hidden_state
    return session.pooling(hidden, batch.inputs["attention_mask"])


class SimilarityObjective(Objective):
    name = "similarity"
    metric = "Spearman's rho"
    description = "squared error between each pair's cosine and its gold score scaled to [0, 1]"
    ranked = True

    @classmethod
    def build(cls, session: Session, sentences: Sequence[Sentence], batch_size: int | None) -> SimilarityObjective:
        scores = []
        for sentence in sentences:
            score = _float(sentence.label) if sentence.pair is not None else None
            if score is None:
                raise InputError(
                    f"{sentence.location or 'a sentence'}: not a pair with a score; the similarity objective needs a TSV of "
                    "sentence1, sentence2 and score"
                )
            scores.append(score)
        scaled, how = _scaled(scores)
        score_of = {id(sentence): value for sentence, value in zip(sentences, scaled, strict=True)}

        def finish(number: int, group: list[Sentence], encoded: BatchEncoding, indices: list[int], padded: dict[str, Tensor]) -> Batch:
            target = {"score": upload(np.array([score_of[id(sentence)] for sentence in group], dtype=np.float32), session.device)}
            return Batch({k: upload(v, session.device) for k, v in padded.items()}, target, number)

        notes = [f"sentences embedded by {session.pooling.source}; gold scores {how}"]
        return cls(session, PairBatches(session, sentences, batch_size, finish), len(sentences), notes)

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        if gates is not None and gates.dim() == 3:  # a pair's two rows run under its first row's gates: one gate per pair
            gates = gates[0::2].repeat_interleave(2, dim=0)
        embedded = _pooled(self.session, batch, gates, ablation)
        cosine = F.cosine_similarity(embedded[0::2], embedded[1::2], dim=-1)
        score = batch.target["score"]
        loss = torch.zeros(embedded.shape[0], device=cosine.device).index_copy(
            0, torch.arange(0, embedded.shape[0], 2, device=cosine.device), (cosine - score).pow(2)
        )  # a pair's loss on its first row, its second row's 0
        zeros = torch.zeros_like(loss)
        return Scores(loss, zeros, zeros, paired=torch.stack([cosine, score], dim=1))

    def corpus_metric(self, metric_sum: float, metric_count: float, paired: np.ndarray | None) -> float:
        from scipy.stats import spearmanr

        if paired is None or len(paired) < 2 or np.ptp(paired[:, 0]) == 0 or np.ptp(paired[:, 1]) == 0:
            return float("nan")  # no ranking to correlate
        return float(spearmanr(paired[:, 0], paired[:, 1]).statistic)


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and np.isfinite(value) else None


def _scaled(scores: list[float]) -> tuple[list[float], str]:
    """Gold scores on [0, 1], and how: as they are, STS's 0-5 divided by 5, or the file's range stretched to [0, 1]."""
    low, high = min(scores), max(scores)
    if low >= 0 and high <= 1:
        return scores, "on [0, 1], taken as they are"
    if low >= 0 and high <= 5:
        return [score / 5 for score in scores], "on STS's 0-5 scale, divided by 5 (as sentence-transformers' STS examples)"
    if high == low:
        raise InputError(f"every gold score is {low:g}; similarity needs scores that differ", setting="data")
    return [(score - low) / (high - low) for score in scores], f"scaled to [0, 1] by the file's range, {low:g} to {high:g}"


class EmbeddingObjective(PreserveObjective):
    name = "embedding"
    metric = "cosine to the unmasked embedding"
    description = "how far each sentence's pooled embedding turns: 1 − cos(e′, e)"

    def _output(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
        """What the distance is measured on: the sentence embeddings `[B, D]`."""
        return _pooled(self.session, batch, gates, ablation)

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        batch = self.reference(batch)
        moved, reference = F.normalize(self._output(batch, gates, ablation).float(), dim=-1), F.normalize(batch.target["reference"], dim=-1)
        cosine = (moved * reference).sum(-1)
        return Scores((moved - reference).pow(2).sum(-1) / 2, cosine, torch.ones_like(cosine))  # ‖ê′ − ê‖²/2 = 1 − cos, never below 0

    def gradient_target(self, batch: Batch, gates: Tensor, ablation: Ablation, generator: torch.Generator) -> tuple[Tensor, bool, Scores]:
        """A random projection (Hutchinson) across the embedding: E[(vᵀ P ∂e/∂ξ)²] / 2‖e‖², the first-order loss.

        1 − cos(e + δ, e) ≈ ‖P δ‖² / 2‖e‖², P the projection off e (moving along e turns nothing);
        its gradient is 0 at the unmasked model, so the movement is estimated as `preserve`'s is.
        """
        embedded = self._output(batch, gates, ablation).float()
        ids, present = batch.inputs["input_ids"].cpu().numpy(), batch.inputs["attention_mask"].bool().cpu().numpy()
        draws = torch.stack(
            [
                torch.randn(embedded.shape[-1], generator=sentence_generator(generator.initial_seed(), row[real]))
                for row, real in zip(ids, present)
            ]
        ).to(embedded.device)
        unit = F.normalize(embedded.detach(), dim=-1)
        across = draws - (draws * unit).sum(-1, keepdim=True) * unit
        size = embedded.detach().norm(dim=-1)
        ones = torch.ones_like(size)
        unmoved = Scores(torch.zeros_like(size), ones, ones)  # the pass at gates 1 is its own reference
        return ((across * embedded).sum(-1) / (size * 2**0.5)).sum(), True, unmoved
