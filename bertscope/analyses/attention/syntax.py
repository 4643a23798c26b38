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
data.batching; each layer's attention is reduced to per-head hit counts inside the
forward pass (`Session.run(on_attention=...)`), so memory does not grow with the corpus.
The counts are integers, summable across shards.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.attention.syntax_results import OFFSETS, SyntaxResult
from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.streaming import CorpusBatches, joined_ids, padded, words_of
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress
from bertscope.data.batching import MAX_SQUARE
from bertscope.data.corpus import Sentence
from bertscope.model.device import upload
from bertscope.model.lagged import LaggedReads
from bertscope.model.masks import Ablation

if TYPE_CHECKING:
    from bertscope.model.session import Session


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
    a word's sub-words, rows averaged, [CLS], [SEP] and padding left out (`word_pooling`)."""
    return _words_by_query(attention, pooling if pooling is not None else word_pooling(word_of, words)).transpose(1, 2)


def _words_by_query(attention: Tensor, pooling: tuple[Tensor, Tensor]) -> Tensor:
    """`[B, W, H, W]`, a new tensor: `word_attention` with the query words first, the layout its products give.

    Two products over the batch with the heads folded into the rows and then the columns: a product of `[B, H, ...]`
    with `[B, 1, ...]` would copy the pooling once a head first (on a CPU a third more time)."""
    rows, columns = pooling
    batch, heads, length, _ = attention.shape
    words = columns.shape[-1]
    summed = (attention.reshape(batch, heads * length, length) @ columns).view(batch, heads, length, words)
    pooled = rows @ summed.transpose(1, 2).reshape(batch, length, heads * words)  # [B, W, H·W]
    return pooled.view(batch, words, heads, words)


def left_out(present: Tensor) -> Tensor:
    """`[B, W, W]`: for each query word, the words it cannot pick: itself, and the words absent from its sentence.

    `present[b, w]`: word w exists in sentence b (not padding, not cut off, has sub-words).
    """
    words = present.shape[-1]
    return torch.eye(words, dtype=torch.bool, device=present.device)[None] | ~present[:, None, :]


def most_attended_other(word_level: Tensor, present: Tensor) -> Tensor:
    """`[B, H, W]`: for each query word, the index of the other present word it attends to most."""
    return word_level.masked_fill(left_out(present)[:, None], float("-inf")).argmax(-1)


def predicted_words(attention: Tensor, pooling: tuple[Tensor, Tensor], excluded: Tensor | None) -> Tensor:
    """`[B, W, H]`: `most_attended_other(word_attention(attention, ...), present)` with the query words first, as a
    corpus batch reads it, `excluded` `[B, W, 1, W]` (`left_out`, made once a batch): the word-level map filled in
    place in the layout its products give it, with no copy and no strided pass, the same numbers.

    `excluded` None: every sentence's present words come before its absent ones (no word inside it without tokens), and
    only each word itself is filled. The same answer for every query word with another present word (the rows a corpus
    batch reads): an absent word's column has no sub-words, so it holds 0 (or NaN where the whole row is NaN), a present
    word's at least 0, and the first of equal maxima is taken, which is a present word's. Filling the diagonal alone
    writes a W-th of what the broadcast mask's fill writes, and that fill cost about what the argmax costs.

    The index is `max`'s: like `argmax` it gives the first of equal maxima and the first NaN (the same indices on EWT's
    maps, ties, NaN and -inf rows), and on rows this short its plain loop takes a sixth less time."""
    pooled = _words_by_query(attention, pooling)
    if excluded is None:
        pooled.diagonal(dim1=1, dim2=3).fill_(float("-inf"))
    else:
        pooled.masked_fill_(excluded, float("-inf"))
    return pooled.max(-1).indices


# --- over a corpus ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _EncodedChunk:
    """A chunk of treebank sentences as its batches read them (`_encode`): int64 arrays of the chunk's sentences end to
    end, each sentence's tokens `token_starts[s]:token_starts[s + 1]` and kept arcs `arc_starts[s]:arc_starts[s + 1]`.
    A batch gathers its sentences' rows with two index arrays (`_ranges`), not a Python object a sentence."""

    input_ids: np.ndarray
    word_of: np.ndarray  # per token: its word in its sentence, -1 for special tokens
    token_starts: np.ndarray  # [S + 1]
    dependents: np.ndarray  # per arc whose words both reach the model: the dependent word (from 0),
    heads: np.ndarray  # its head word,
    relations: np.ndarray  # and its relation, a place in `names`
    arc_starts: np.ndarray  # [S + 1]
    names: tuple[str, ...]  # the chunk's relations, in their order of first appearance in it
    words: np.ndarray  # per sentence: its words,
    truncated: np.ndarray  # whether the length limit cut words off,
    gaps: np.ndarray  # and whether a word without tokens comes before its last word with tokens (`predicted_words`)

    def lengths(self) -> list[int]:
        """Each sentence's token count, as the batches are planned by it."""
        return cast(list[int], np.diff(self.token_starts).tolist())


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The places `starts[i]:stops[i]` of every i, end to end: one index array for a batch's rows of a chunk's arrays."""
    sizes = stops - starts
    places: np.ndarray = np.arange(int(sizes.sum())) + np.repeat(starts - (np.cumsum(sizes) - sizes), sizes)
    return places


_REACH = max(OFFSETS) + 1  # offsets beyond the baselines' are clipped to ±_REACH, which is none of them
_OFFSET_PLACES = np.full(2 * _REACH + 1, -1)  # an offset's place in OFFSETS (offset + _REACH), -1 for none
_OFFSET_PLACES[np.add(OFFSETS, _REACH)] = np.arange(len(OFFSETS))


class _Counts:
    """Integer hit counts per relation, kept on the model's device; relations registered as they appear."""

    def __init__(self, num_layers: int, num_heads: int, device: torch.device):
        self.relations: dict[str, int] = {}
        self.shape, self.device = (num_layers, num_heads), device
        self.correct = torch.zeros(0, 2, num_layers, num_heads, dtype=torch.long, device=device)
        self.counts = np.zeros((0, 2), dtype=np.int64)
        self.baseline = np.zeros((0, 2, len(OFFSETS)), dtype=np.int64)
        self.sentences = self.words = self.truncated = 0
        self._names: tuple[str, ...] = ()  # the chunk whose relation codes `_indices` maps to rows of the counts
        self._indices = np.zeros(0, dtype=np.int64)  # -1: a code not met yet

    def relation_index(self, relation: str) -> int:
        if relation not in self.relations:
            self.relations[relation] = len(self.relations)
            self.correct = torch.cat([self.correct, self.correct.new_zeros(1, 2, *self.shape)])
            self.counts = np.concatenate([self.counts, np.zeros((1, 2), dtype=np.int64)])
            self.baseline = np.concatenate([self.baseline, np.zeros((1, 2, len(OFFSETS)), dtype=np.int64)])
        return self.relations[relation]

    def relation_indices(self, codes: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
        """Each arc's relation index from its code (a place in `names`, a chunk's relations), relations new to the
        counts registered in the order the arcs give them (as one `relation_index` an arc would). The chunk's codes met
        so far are kept mapped: most batches meet none new, and need one look-up."""
        if names is not self._names:
            self._names, self._indices = names, np.full(len(names), -1, dtype=np.int64)
        found: np.ndarray = self._indices[codes]
        unmet = found < 0
        if unmet.any():
            new, first = np.unique(codes[unmet], return_index=True)
            for code in new[np.argsort(first)].tolist():
                self._indices[code] = self.relation_index(names[code])
            found = self._indices[codes]
        return found

    def add_baselines(self, dependents: np.ndarray, heads: np.ndarray, relations: np.ndarray) -> None:
        """A batch's arcs counted per relation, with the arcs each fixed offset finds in each direction: counted with one
        `bincount` each, not an `np.add.at` an offset and direction."""
        self.counts += np.bincount(relations, minlength=len(self.counts))[:, None]
        offsets = heads - dependents  # from the dependent to its head; the other direction's is its negative
        found = _OFFSET_PLACES[np.clip(np.concatenate([offsets, -offsets]), -_REACH, _REACH) + _REACH]  # [2N]
        hit = found >= 0
        direction = np.repeat([0, 1], len(offsets))
        places = ((np.concatenate([relations, relations]) * 2 + direction) * len(OFFSETS) + found)[hit]  # in `baseline`
        self.baseline += np.bincount(places, minlength=self.baseline.size).reshape(self.baseline.shape)

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
    batches: CorpusBatches[Sentence, _EncodedChunk] = CorpusBatches(
        sentences,
        lambda chunk: _encode(session, chunk),
        lengths=_EncodedChunk.lengths,
        job=job,
        chunk_size=chunk_size,
        max_square=MAX_SQUARE,
    )
    reads, shown = LaggedReads(), list[SyntaxResult]()
    for batch in batches:
        _add_batch(session, counts, batch.encoded, np.asarray(batch.indices), gates, ablation)
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


def _encode(session: Session, chunk: list[Sentence]) -> _EncodedChunk:
    """Tokenise a chunk of treebank sentences by their words, in one call; keep the arcs whose words both reach the model.

    The chunk's tokens, words and arcs are found for the whole chunk at once (numpy over its words end to end) and kept
    so, each sentence a range of them: a Python step a word, over every word of a corpus, was a tenth of a tiny model's
    run, and an object a sentence, each made and then taken apart again by its batch, a few per cent more."""
    for sentence in chunk:
        if sentence.heads is None or sentence.deprels is None or sentence.words is None:
            raise InputError(f"{sentence.location or 'a sentence'} has no dependency heads; give a CoNLL-U treebank", setting="data")
    sizes, input_ids, word_of = _word_tokens(session, [words_of(sentence) for sentence in chunk])
    rows = np.arange(len(chunk))
    counts = np.array([len(words_of(sentence)) for sentence in chunk], dtype=np.int64)  # words of each sentence
    starts = np.cumsum(counts) - counts  # each sentence's first word among the chunk's
    token_rows, word_rows = np.repeat(rows, sizes), np.repeat(rows, counts)
    real = word_of >= 0
    present = np.zeros(int(counts.sum()), dtype=bool)  # the chunk's words that reached the model
    present[starts[token_rows[real]] + word_of[real]] = True
    last = np.full(len(chunk), -1, dtype=np.int64)  # each sentence's last word that reached it
    np.maximum.at(last, token_rows[real], word_of[real])
    labels = list(itertools.chain.from_iterable(cast(tuple[str, ...], sentence.deprels) for sentence in chunk))
    names = {name: code for code, name in enumerate(dict.fromkeys(labels))}  # in their order of first appearance
    relations = np.fromiter(map(names.__getitem__, labels), np.int64, len(labels))
    heads = np.fromiter(itertools.chain.from_iterable(cast(tuple[int, ...], sentence.heads) for sentence in chunk), np.int64, len(present))
    dependents = np.arange(len(present)) - starts[word_rows]  # each word's place in its sentence
    within = (heads > 0) & (heads <= counts[word_rows])  # a head in the sentence, not the root
    kept = within & present & present[np.where(within, starts[word_rows] + heads - 1, 0)]
    return _EncodedChunk(
        input_ids=input_ids,
        word_of=word_of,
        token_starts=np.concatenate([[0], np.cumsum(sizes)]),
        dependents=dependents[kept],
        heads=heads[kept] - 1,
        relations=relations[kept],
        arc_starts=np.searchsorted(word_rows[kept], np.arange(len(chunk) + 1)),  # each sentence's arcs among those kept
        names=tuple(names),
        words=counts,
        truncated=(last < counts - 1) & (sizes >= session.max_length),
        gaps=np.bincount(word_rows[present], minlength=len(chunk)) <= last,  # fewer words with tokens than up to the last
    )


def _word_tokens(session: Session, words: list[tuple[str, ...]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Each sentence's token count, every token's id, every token's word in its sentence or -1 for a special token),
    the sentences' tokens end to end: each sentence tokenised by its words, in one call.

    A tokenizer that splits at every space and whose normalizer works a character at a time (BERT's WordPiece) gives a
    sentence's words the same tokens as the words joined by spaces: those are tokenised as one text and each token
    found in its word by where it starts. Given the words one by one, the tokenizer normalises and splits each word
    apart, which cost the tiny model's corpus run a tenth of its forward pass more (the same ids and words, checked on
    EWT and the sample treebank); other tokenizers get their words one by one."""
    options = dict(truncation=True, max_length=session.max_length, return_attention_mask=False, return_token_type_ids=False)
    if not _splits_at_spaces(session.tokenizer):
        tokens = session.tokenizer([list(sentence) for sentence in words], is_split_into_words=True, **options)
        word_ids = [tokens.word_ids(row) for row in range(len(words))]
        sizes = np.array([len(ids) for ids in word_ids], dtype=np.int64)
        word_of = joined_ids(word_ids)  # None (a special token): -1
    else:
        texts = [" ".join(sentence) for sentence in words]
        tokens = session.tokenizer(texts, return_offsets_mapping=True, return_special_tokens_mask=True, **options)
        sizes = np.array([len(ids) for ids in tokens["input_ids"]], dtype=np.int64)
        total = int(sizes.sum())
        offsets = np.fromiter(itertools.chain.from_iterable(itertools.chain.from_iterable(tokens["offset_mapping"])), np.int64, 2 * total)
        special = np.fromiter(itertools.chain.from_iterable(tokens["special_tokens_mask"]), np.int64, total).astype(bool)
        # the texts end to end, one character between them: every word's first character and every token's, there
        lengths = np.fromiter(map(len, itertools.chain.from_iterable(words)), np.int64) + 1  # a word and its space
        word_starts = np.cumsum(lengths) - lengths
        counts = np.array([len(sentence) for sentence in words], dtype=np.int64)
        first_words = np.cumsum(counts) - counts
        text_starts = np.append(word_starts, 0)[first_words]  # a sentence of no words has no tokens to place
        token_rows = np.repeat(np.arange(len(words)), sizes)
        word = np.searchsorted(word_starts, text_starts[token_rows] + offsets[0::2], side="right") - 1
        word_of = np.where(special, -1, word - first_words[token_rows])
    input_ids = np.fromiter(itertools.chain.from_iterable(tokens["input_ids"]), np.int64, int(sizes.sum()))
    return sizes, input_ids, word_of


def _splits_at_spaces(tokenizer: object) -> bool:
    """Whether the tokenizer splits a text at every space before it looks further, and normalises it a character at a
    time: BERT's pre-tokenizer and normalizer (`_word_tokens`)."""
    from tokenizers import normalizers, pre_tokenizers

    backend = getattr(tokenizer, "backend_tokenizer", None)
    return (
        backend is not None
        and isinstance(backend.pre_tokenizer, pre_tokenizers.BertPreTokenizer)
        and (backend.normalizer is None or isinstance(backend.normalizer, normalizers.BertNormalizer))
    )


def _add_batch(session: Session, counts: _Counts, chunk: _EncodedChunk, rows: np.ndarray, gates: Tensor | None, ablation: Ablation) -> None:
    """One forward pass over the chunk's sentences `rows`; each layer's attention becomes hit counts as the pass computes
    it."""
    words = int(chunk.words[rows].max())
    device = session.device
    token_starts, token_stops = chunk.token_starts[rows], chunk.token_starts[rows + 1]
    tokens = _ranges(token_starts, token_stops)
    table, _ = padded(  # the batch's ids, attention mask and word of each token, in one copy to the device
        token_stops - token_starts,
        [
            (chunk.input_ids[tokens], session.tokenizer.pad_token_id or 0),
            (np.ones(len(tokens), dtype=np.int64), 0),
            (chunk.word_of[tokens], -1),
        ],
    )
    input_ids, attention_mask, word_of = upload(table, device).unbind()

    arc_starts, arc_stops = chunk.arc_starts[rows], chunk.arc_starts[rows + 1]
    arcs = _ranges(arc_starts, arc_stops)
    arc_rows = np.repeat(np.arange(len(rows)), arc_stops - arc_starts)
    arc_dependents, arc_heads = chunk.dependents[arcs], chunk.heads[arcs]
    arc_relations = counts.relation_indices(chunk.relations[arcs], chunk.names)
    counts.add_baselines(arc_dependents, arc_heads, arc_relations)
    # each arc in both directions: the query word's row of a `[B·W, H]` prediction, the word to find, and where its
    # hits count (the relation's row of `correct` for that direction), in one copy to the device
    directions = (
        np.stack([arc_rows * words + arc_dependents, arc_heads, 2 * arc_relations]),
        np.stack([arc_rows * words + arc_heads, arc_dependents, 2 * arc_relations + 1]),
    )
    query, answer, place = upload(np.concatenate(directions, axis=1), device).unbind()
    hits = torch.zeros(len(place), *counts.shape, dtype=torch.bool, device=device)  # [2N, L, H], counted once the pass is done

    pooling = word_pooling(word_of, words)
    excluded = None  # a word without tokens inside a sentence: its column filled too (`predicted_words`)
    if chunk.gaps[rows].any():
        excluded = left_out(pooling[1].sum(1) > 0)[:, :, None]  # [B, W, 1, W]: words present, pooled over columns

    def reduce(layer: int, attention: Tensor) -> None:
        predicted = predicted_words(attention.float(), pooling, excluded)  # [B, W, H]
        torch.eq(predicted.view(-1, predicted.shape[-1]).index_select(0, query), answer[:, None], out=hits[:, layer])

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
        counts.correct.view(-1, *counts.shape).index_add_(0, place, hits.long())  # one call a batch, not two a layer
    counts.sentences += len(rows)
    counts.words += int(chunk.words[rows].sum())
    counts.truncated += int(chunk.truncated[rows].sum())
