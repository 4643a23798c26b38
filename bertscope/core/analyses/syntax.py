"""Heads that track syntactic relations (Clark et al. 2019, "What Does BERT Look At?", §4).

For every dependency arc of a treebank (a dependent, its head, their relation) and every
attention head, two questions, as Clark et al. ask them:

- dependent_to_head: is the word the dependent attends to most (itself left out) its head?
- head_to_dependent: is the word the head attends to most (itself left out) this dependent?
  (A head with two dependents of one relation can get at most one of them right, as in
  Clark et al.'s evaluation.)

Attention is made word-level first, as Clark et al. convert it: a word's attention to
another word is the sum over the other word's sub-word columns, averaged over its own
sub-word rows, so each word's row is still a distribution over tokens. [CLS] and [SEP] are
not words: their columns are left out of the word-level map (a word's row then sums to
less than one), so a head that parks its attention on [SEP] is judged by where the rest
goes, as Clark et al. take "the most-attended-to other word" over words only.

The baseline is the best fixed offset: the word 1, 2 or 3 places to the left or right of
the query (Clark et al.'s "predict the word at a fixed offset"), per relation and direction.

Relations are the treebank's labels, subtypes kept apart (`nmod:poss`, `obl:tmod`,
`nsubj:pass` are their own relations, as `poss`, `tmod` and `nsubjpass` were in the Stanford
Dependencies Clark et al. used); `syntax_results.ALIASES` maps their names to UD v2's.
Arcs to the root, and arcs with a word cut off by the model's length limit, are not counted.

Streamed: chunks of sentences are sorted by length and batched under the attention caps of
core.data.batching; each layer's attention is reduced to per-head hit counts inside the
forward pass (`Session.run(on_attention=...)`), so memory does not grow with the corpus.
The counts are integers, summable across shards.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from bertscope.core import distributed
from bertscope.core.analyses.conditions import Conditions, JobOptions
from bertscope.core.analyses.streaming import CorpusBatches, item_lengths, padded, words_of
from bertscope.core.analyses.syntax_results import OFFSETS, SyntaxResult
from bertscope.core.data.batching import MAX_SQUARE
from bertscope.core.data.corpus import Sentence
from bertscope.core.errors import InputError
from bertscope.core.model.device import upload
from bertscope.core.model.lagged import LaggedReads
from bertscope.core.model.masks import Ablation
from bertscope.core.progress import Progress

if TYPE_CHECKING:
    from bertscope.core.model.session import Session


# --- word-level attention and the most-attended other word ------------------------------------


def word_pooling(word_of: Tensor, words: int) -> tuple[Tensor, Tensor]:
    """(`[B, W, T]` mean over each word's sub-word rows, `[B, T, W]` sum over its sub-word columns), once per batch.

    `word_of[b, t]` is token t's word (0..W-1), or -1 for special tokens and padding, whose
    rows and columns are left out.
    """
    inside = word_of >= 0  # a scatter, not indices found by `nonzero`: on a GPU that would wait for the device
    onehot = torch.zeros(*word_of.shape, words, device=word_of.device).scatter_(
        2, word_of.clamp(min=0)[..., None], inside[..., None].float()
    )
    pieces = onehot.sum(1).clamp(min=1)  # [B, W]
    return (onehot / pieces[:, None, :]).transpose(1, 2), onehot


def word_attention(attention: Tensor, word_of: Tensor, words: int, pooling: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """`[B, H, W, W]` word-level attention from token-level `[B, H, T, T]` (float32): columns summed over
    a word's sub-words, rows averaged, [CLS], [SEP] and padding left out (`word_pooling`).

    Two products over the batch with the heads folded into the rows and then the columns: a product of `[B, H, ...]`
    with `[B, 1, ...]` would copy the pooling once a head first (on a CPU a third more time)."""
    rows, columns = pooling if pooling is not None else word_pooling(word_of, words)
    batch, heads, length, _ = attention.shape
    summed = (attention.reshape(batch, heads * length, length) @ columns).view(batch, heads, length, words)
    pooled = rows @ summed.transpose(1, 2).reshape(batch, length, heads * words)  # [B, W, H·W]
    return pooled.view(batch, words, heads, words).transpose(1, 2)


def most_attended_other(word_level: Tensor, present: Tensor) -> Tensor:
    """`[B, H, W]`: for each query word, the index of the other present word it attends to most.

    `present[b, w]`: word w exists in sentence b (not padding, not cut off, has sub-words).
    """
    words = word_level.shape[-1]
    excluded = torch.eye(words, dtype=torch.bool, device=word_level.device)[None] | ~present[:, None, :]  # [B, W, W]
    return word_level.masked_fill(excluded[:, None], float("-inf")).argmax(-1)


# --- over a corpus ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Encoded:
    input_ids: list[int]
    word_of: list[int]  # per token: its word, -1 for special tokens
    arcs: list[tuple[int, int, str]]  # (dependent, head, relation), words from 0, both present
    words: int
    truncated: bool


class _Counts:
    """Integer hit counts per relation, kept on the model's device; relations registered as they appear."""

    def __init__(self, num_layers: int, num_heads: int, device: torch.device):
        self.relations: dict[str, int] = {}
        self.shape, self.device = (num_layers, num_heads), device
        self.correct = torch.zeros(0, 2, num_layers, num_heads, dtype=torch.long, device=device)
        self.counts = np.zeros((0, 2), dtype=np.int64)
        self.baseline = np.zeros((0, 2, len(OFFSETS)), dtype=np.int64)
        self.sentences = self.words = self.truncated = 0

    def relation_index(self, relation: str) -> int:
        if relation not in self.relations:
            self.relations[relation] = len(self.relations)
            self.correct = torch.cat([self.correct, self.correct.new_zeros(1, 2, *self.shape)])
            self.counts = np.concatenate([self.counts, np.zeros((1, 2), dtype=np.int64)])
            self.baseline = np.concatenate([self.baseline, np.zeros((1, 2, len(OFFSETS)), dtype=np.int64)])
        return self.relations[relation]

    def add_baselines(self, dependents: np.ndarray, heads: np.ndarray, relations: np.ndarray) -> None:
        """A batch's arcs counted per relation, with the arcs each fixed offset finds in each direction."""
        np.add.at(self.counts, relations, 1)
        for direction, offsets in enumerate((heads - dependents, dependents - heads)):
            for index, offset in enumerate(OFFSETS):
                np.add.at(self.baseline[:, direction, index], relations[offsets == offset], 1)

    def result(self) -> SyntaxResult:
        """The counts so far, the device's hits read now."""
        return self._host_counts()(correct=self.correct.cpu().numpy().copy())

    def later(self, reads: LaggedReads, shown: list[SyntaxResult]) -> None:
        """The counts so far, appended to `shown` once their hits are read (one batch late on a GPU): a partial result
        that does not make the host wait for the batch it has just queued."""
        complete = self._host_counts()
        reads.put(self.correct.clone(), use=lambda correct: shown.append(complete(correct=correct)))

    def _host_counts(self) -> Callable[..., SyntaxResult]:
        """A SyntaxResult of the host's counts as they are now, still to be given the device's hits (`correct`)."""
        return functools.partial(
            SyntaxResult,
            relations=tuple(self.relations),
            counts=self.counts.copy(),
            baseline_correct=self.baseline.copy(),
            sentences=self.sentences,
            words=self.words,
            truncated=self.truncated,
        )


def syntax_heads(
    session: Session,
    sentences: Iterable[Sentence],
    *,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
    chunk_size: int | None = None,
) -> Iterator[Progress[SyntaxResult]]:
    """Stream a treebank through the model, under `conditions` (None: as it is); yield the counts so far (`partial`)
    after every batch, then the result."""
    counts = _Counts(session.num_layers, session.num_heads, session.device)
    gates = session.gate_tensor(None if conditions is None else conditions.mask)
    ablation: Ablation = "zero" if conditions is None else conditions.ablation
    batches: CorpusBatches[Sentence, list[_Encoded]] = CorpusBatches(
        sentences, lambda chunk: _encode(session, chunk), lengths=item_lengths, job=job, chunk_size=chunk_size, max_square=MAX_SQUARE
    )
    reads, shown = LaggedReads(), list[SyntaxResult]()
    for batch in batches:
        _add_batch(session, counts, batch.take(batch.encoded), gates, ablation)
        counts.later(reads, shown)
        if shown:  # on a GPU the batch before this one's, the first batch's once the second is queued
            yield Progress("sentences", shown[-1].sentences, partial=shown.pop())
    if batches.cancelled:
        return
    reads.flush()
    shards = distributed.gather(counts.result())  # under torchrun: every rank's counts (relations matched by name)
    result = functools.reduce(SyntaxResult.merged, shards)
    if result.sentences == 0:
        raise InputError("no sentences to analyse; the treebank is empty")
    yield Progress("sentences", result.sentences, result=result, partial=result)


def _encode(session: Session, chunk: list[Sentence]) -> list[_Encoded]:
    """Tokenise a chunk of treebank sentences by their words, in one call; keep the arcs whose words both reach the model."""
    for sentence in chunk:
        if sentence.heads is None or sentence.deprels is None or sentence.words is None:
            raise InputError(f"{sentence.location or 'a sentence'} has no dependency heads; give a CoNLL-U treebank", setting="data")
    tokens = session.tokenizer(
        [list(words_of(sentence)) for sentence in chunk],
        is_split_into_words=True,
        truncation=True,
        max_length=session.max_length,
        return_attention_mask=False,
        return_token_type_ids=False,
    )
    encoded = []
    for row, sentence in enumerate(chunk):
        heads, deprels, words = sentence.heads, sentence.deprels, words_of(sentence)
        assert heads is not None and deprels is not None  # checked above
        word_ids = tokens.word_ids(row)
        present = {word for word in word_ids if word is not None}
        arcs = [
            (dependent, head - 1, relation)
            for dependent, (head, relation) in enumerate(zip(heads, deprels))
            if head > 0 and dependent in present and head - 1 in present
        ]
        last = max(present, default=-1)
        encoded.append(
            _Encoded(
                input_ids=tokens["input_ids"][row],
                word_of=[-1 if word is None else word for word in word_ids],
                arcs=arcs,
                words=len(words),
                truncated=last < len(words) - 1 and len(word_ids) >= session.max_length,
            )
        )
    encoded.sort(key=lambda item: len(item.input_ids))
    return encoded


def _add_batch(session: Session, counts: _Counts, batch: list[_Encoded], gates: Tensor | None, ablation: Ablation) -> None:
    """One forward pass; each layer's attention becomes hit counts as the pass computes it."""
    words = max(item.words for item in batch)
    device = session.device
    lengths = [len(item.input_ids) for item in batch]
    table, _ = padded(  # the batch's ids, attention mask and word of each token, in one copy to the device
        lengths,
        [
            (np.concatenate([item.input_ids for item in batch]), session.tokenizer.pad_token_id or 0),
            (np.ones(sum(lengths), dtype=np.int64), 0),
            (np.concatenate([item.word_of for item in batch]), -1),
        ],
    )
    input_ids, attention_mask, word_of = upload(table, device).unbind()

    arcs = [arc for item in batch for arc in item.arcs]
    arc_rows = np.repeat(np.arange(len(batch)), [len(item.arcs) for item in batch])
    arc_dependents = np.array([dependent for dependent, _, _ in arcs], dtype=np.int64)
    arc_heads = np.array([head for _, head, _ in arcs], dtype=np.int64)
    arc_relations = np.array([counts.relation_index(name) for _, _, name in arcs], dtype=np.int64)
    counts.add_baselines(arc_dependents, arc_heads, arc_relations)
    sentence, dependent, head, relation = (upload(values, device) for values in (arc_rows, arc_dependents, arc_heads, arc_relations))

    pooling = word_pooling(word_of, words)
    present = pooling[1].sum(1) > 0  # [B, W]: the words of each sentence that reached the model

    def reduce(layer: int, attention: Tensor) -> None:
        predicted = most_attended_other(word_attention(attention.float(), word_of, words, pooling), present).transpose(1, 2)  # [B, W, H]
        for direction, (query, answer) in enumerate(((dependent, head), (head, dependent))):
            hits = (predicted[sentence, query] == answer[:, None]).long()  # [N, H]
            counts.correct[:, direction, layer].index_add_(0, relation, hits)

    with torch.inference_mode():
        session.run(
            {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": torch.zeros_like(input_ids)},
            gates=gates,
            ablation=ablation,
            attentions=True,
            hidden_states=False,
            encoder_only=True,
            on_attention=reduce,
        )
    counts.sentences += len(batch)
    counts.words += sum(item.words for item in batch)
    counts.truncated += sum(item.truncated for item in batch)
