"""Attention pattern analytics over sentences and corpora (Kovaleva et al. 2019; Clark et al. 2019).

Per head and per sentence, on the real (non-padding) tokens:

- statistics, each averaged over the query tokens: the share of attention to [CLS], to
  [SEP] (every special token after the first), to punctuation, to the token itself, to the
  previous and the next token, to the query's own segment ("block"); the entropy of the
  attention distribution (nats); the mean attention distance in tokens;
- a pattern class after Kovaleva et al., from three interpretable features:
  * vertical V: the attention mass that falls on the two most-attended key positions
    (their mean received weight, summed). Every query looking at the same one or two
    tokens ([CLS], [SEP], a full stop) draws vertical stripes;
  * diagonal D: the mass on the query itself and its two neighbours (|i − j| ≤ 1),
    leaving out those two top columns so a stripe is not counted twice;
  * block B: for inputs with two segments (a sentence pair), the share of a word's
    attention to words that stays inside its own segment. A uniform head gives B near the
    segment's share of the words (about one half); a block head gives B near 1.

  The rules, in order: if V + D ≥ 0.6 the head is structured along stripes: both
  V ≥ 0.2 and D ≥ 0.2 make it `vertical+diagonal`, otherwise the larger one names it
  (`vertical` or `diagonal`). Else, with two segments and B ≥ 0.85, it is `block`. Else it is
  `heterogeneous`. The thresholds are chosen so that the synthetic maps of each class in
  tests/test_patterns.py, with up to 30% of their mass spread uniformly as noise, land in
  their class, and a uniform map lands in `heterogeneous`. Kovaleva et al. trained a small
  CNN on 400 hand-labelled maps instead; rules trade a little accuracy for being readable
  and reproducible on any model.

With `norms`, the six shares ([CLS], [SEP], punctuation, self, previous, next) are also
taken of the value-weighted norms ‖α_ij f_h(x_j)‖ (Kobayashi et al. 2020, model.norms):
each query's row of norms divided by its sum, so a share of norm says how much of what the
head moves into the token comes from there, as a share of weight says where it looks. They
come from the same forward pass and accumulate as more per-head sums (`norm_cls`, ...).

A local head (ModernBERT's sliding-window layers) sees only keys within ±w of its query: on
inputs longer than its window, a share to [CLS], [SEP] or punctuation averages over the
queries that can see such a token, and V's columns over the queries that can see them, so
that what the window hides is not read as attention the head chose not to pay.

Over a corpus, each head gets the share of sentences in each class and its dominant class;
each layer the mean of its heads. A head switched off by the mask is of its own class, off
(results.OFF): its map is the ablation's (zeros, or uniform), so it is not classified, and
the layer's shares are the mean of its other heads. Statistics accumulate batch by batch on the model's
device, so memory does not grow with the corpus.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.attention.headstats import PunctuationIds, punctuation_ids
from bertscope.analyses.attention.patterns_results import NORM_SHARES, PATTERNS, STATISTICS, PatternResult
from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.streaming import CorpusBatches, item_lengths, joined_ids, padded
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress
from bertscope.data.batching import MAX_SQUARE
from bertscope.data.corpus import Sentence
from bertscope.model.device import upload
from bertscope.model.lagged import LaggedReads
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding

if TYPE_CHECKING:
    from bertscope.model.session import Session

STRIPES, MIXED, BLOCK = 0.6, 0.2, 0.85
TOP_COLUMNS = 2


# --- per batch, on the device -------------------------------------------------------------
#
# On a GPU every tensor operation costs a launch, however small: on one H100, `patterns` took 6.7x a bare forward
# when each statistic had its own operations (benchmarks/README.md). So a layer's statistics are a few large
# operations on its maps: every statistic that is a weighted sum of the attention (the shares and the distance) is
# one product of the maps with a table of weights, a column a statistic, each weight already divided by the number
# of queries its mean is over; the entropy is one more product, V a product with a row of the queries' weights, D a
# weighted sum over the queries, B (pairs only) a product with the segments' words. The weights depend only on the
# batch (and a local layer's window): they are made for the first layer and serve the others. The largest,
# `LayerWeights.linear`, holds as many numbers as 8 heads' maps of the batch.

# The statistics that are weighted sums of the attention: the columns of `LayerWeights.linear`.
LINEAR = ("cls", "sep", "punct", "self", "prev", "next", "block", "distance")
# The columns of `_feature_table`: those, the entropy, and the pattern features V, D, B.
FEATURES = (*LINEAR, "entropy", "V", "D", "B")


@dataclass(frozen=True)
class LayerWeights:
    """What a layer's `[B, H, T, T]` maps are weighed by (query i, key j), made once a batch and window."""

    linear: Tensor  # [B, T*T, len(LINEAR)]: each statistic's weight, over the number of queries it is a mean over
    real_queries: Tensor  # [B, T, 1]: the real queries, over their number (the entropy's mean)
    columns: Tensor  # [B, 1, 1, T]: V's received weight, a row over the queries: the real ones, over their number
    seen_by: Tensor | None  # [B, 1, 1, T]: for a head that does not see every key, 1 over the real queries that see key j
    band: Tensor  # [B, 1, T, T]: D's band: the real queries where |i - j| <= 1, over the number of real queries


@dataclass
class BatchMasks:
    """What the statistics need to know about a padded batch of B inputs of T tokens."""

    real: Tensor  # [B, T] bool: not padding
    special_keys: Tensor  # [B, T, 3] float: the keys [CLS] (or <s>), [SEP] (</s>, any later special token), punctuation
    segment_words: Tensor  # [B, T, 2] float: the words of segment 0 and of segment 1 (a pair's; special tokens in neither)
    two_segments: Tensor  # [B] bool: the input is a pair
    pairs: bool = True  # some input of the batch is a pair (known on the host: B is computed only then)

    @functools.cached_property
    def pair_words(self) -> Tensor:
        """`[B, T, 1]`: B's mean: a pair's word queries, over their number (0 for single inputs)."""
        words = self.segment_words.sum(-1)
        return (words * (self.two_segments / words.sum(1).clamp(min=1))[:, None])[..., None]

    @functools.cached_property
    def offset(self) -> Tensor:
        """`[T, T]` float: i - j between query i and key j."""
        positions = torch.arange(self.real.shape[1], device=self.real.device, dtype=torch.float32)
        return positions[:, None] - positions[None, :]

    def visible(self, window: int | None) -> Tensor | None:
        """`[T, T]` float: 1 where a head with this window sees the key; None where it sees every key."""
        if window is None or self.real.shape[1] <= window + 1:
            return None
        cache: dict[int, Tensor] = self.__dict__.setdefault("_visible", {})
        if window not in cache:
            cache[window] = (self.offset.abs() <= window).float()
        return cache[window]

    def weights(self, window: int | None = None) -> LayerWeights:
        """The weights of a layer whose heads see keys within ±window (None: every key), made once a batch."""
        visible = self.visible(window)
        cache: dict[int | None, LayerWeights] = self.__dict__.setdefault("_weights", {})
        key = None if visible is None else window
        if key not in cache:
            cache[key] = self._make_weights(visible)
        return cache[key]

    def _make_weights(self, visible: Tensor | None) -> LayerWeights:
        batch, length = self.real.shape
        real = self.real.float()
        count = real.sum(1, keepdim=True).clamp(min=1)  # [B, 1]: real tokens
        words = self.segment_words.sum(-1)
        # The queries each statistic of LINEAR is a mean over. Padding is on the right: the real queries after the first
        # have a previous token, those before the last a next one. For a head that does not see every key, a share to
        # [CLS], [SEP] or punctuation is a mean over the real queries that see such a token.
        has_previous, has_next = torch.nn.functional.pad(real[:, 1:], (1, 0)), torch.nn.functional.pad(real[:, 1:], (0, 1))
        sees = [real] * 3 if visible is None else list((((self.special_keys.transpose(1, 2) @ visible) > 0) * real[:, None]).unbind(1))
        queries = torch.stack([*sees, real, has_previous, has_next, words, real], dim=-1)
        queries = queries / queries.sum(1, keepdim=True).clamp(min=1)  # [B, T, 8]
        # The keys each statistic sums, for each query: [CLS], [SEP], punctuation; the token itself, the previous one,
        # the next one; the words of the query's segment; all, weighed by the distance |i - j|.
        relative = torch.stack([self.offset == 0, self.offset == 1, self.offset == -1, self.offset.abs()], dim=-1)
        keys = torch.cat(
            [
                self.special_keys[:, None].expand(batch, length, length, 3),
                relative[..., :3].expand(batch, length, length, 3),
                (self.segment_words @ self.segment_words.transpose(1, 2))[..., None],
                relative[..., 3:].expand(batch, length, length, 1),
            ],
            dim=-1,
        )
        real_queries = (real / count)[:, :, None]  # [B, T, 1]
        return LayerWeights(
            linear=keys.mul_(queries[:, :, None]).flatten(1, 2),  # in place: a long input's table is large
            real_queries=real_queries,
            columns=real_queries.transpose(1, 2)[:, None] if visible is None else real[:, None, None, :],
            seen_by=None if visible is None else 1 / (real @ visible).clamp(min=1)[:, None, None, :],
            band=real_queries[:, None] * (relative[..., 3] <= 1),
        )


def _linear_means(attention: Tensor, masks: BatchMasks, window: int | None = None) -> Tensor:
    """`[B, H, len(LINEAR)]`: each statistic of LINEAR, one product for all."""
    return attention.flatten(2) @ masks.weights(window).linear


def shares(attention: Tensor, masks: BatchMasks, window: int | None = None) -> dict[str, Tensor]:
    """Per sentence and head (`[B, H]`), the NORM_SHARES of rows that sum to one: to [CLS], [SEP],
    punctuation, the token itself, the previous and the next token, each averaged over real queries
    (those that can see such a token, for a head whose `window` hides some keys)."""
    return dict(zip(NORM_SHARES, _linear_means(attention.float(), masks, window)[..., : len(NORM_SHARES)].unbind(-1), strict=True))


def norm_shares(norms: Tensor, masks: BatchMasks, window: int | None = None) -> dict[str, Tensor]:
    """The NORM_SHARES of value-weighted norms `[B, H, T, T]`: each query's row divided by its sum first.

    A row whose norms are all zero (a head switched off) has no share anywhere.
    """
    return dict(zip(NORM_SHARES, _norm_share_table(norms, masks, window).unbind(-1), strict=True))


def _norm_share_table(norms: Tensor, masks: BatchMasks, window: int | None = None) -> Tensor:
    norms = norms.float()
    return _linear_means(norms / norms.sum(-1, keepdim=True).clamp(min=1e-12), masks, window)[..., : len(NORM_SHARES)]


def head_features(attention: Tensor, masks: BatchMasks, window: int | None = None) -> dict[str, Tensor]:
    """Per sentence and head (`[B, H]`), every statistic and the V, D, B pattern features.

    `attention` is one layer's `[B, H, T, T]`, rows over padding are ignored; `window`: its heads see only keys
    within ±window of the query (module docstring).
    """
    return dict(zip(FEATURES, _feature_table(attention, masks, window).unbind(-1), strict=True))


def _feature_table(attention: Tensor, masks: BatchMasks, window: int | None = None) -> Tensor:
    """`[B, H, len(FEATURES)]`: `head_features` as the columns of one tensor."""
    attention = attention.float()
    weights = masks.weights(window)
    entropy = torch.special.entr(attention).sum(-1) @ weights.real_queries
    # V: the weight the two most-attended keys receive, each a mean over the queries that see it; D: the band
    # |i - j| <= 1 without those two columns
    columns = weights.columns @ attention  # [B, H, 1, T]; 0 for padding, as for a key no one sees
    if weights.seen_by is not None:  # the received weight a mean over the queries that see each key
        columns = columns * weights.seen_by
    top_values, top_index = columns.topk(min(TOP_COLUMNS, columns.shape[-1]), dim=-1)
    diagonal = (attention * weights.band).sum(-2, keepdim=True).scatter(-1, top_index, 0.0).sum(-1)
    # B: a word's attention to the words of its own segment, as a share of its attention to words (pairs only)
    block = torch.zeros_like(diagonal)
    if masks.pairs:
        to_segments = attention @ masks.segment_words[:, None]  # [B, H, T, 2]
        inside = (to_segments * masks.segment_words[:, None]).sum(-1)
        block = (inside / to_segments.sum(-1).clamp(min=1e-9)) @ masks.pair_words
    return torch.cat([_linear_means(attention, masks, window), entropy, top_values.sum(-1), diagonal, block], dim=-1)


def classify(vertical: np.ndarray, diagonal: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Index into PATTERNS for each head (arrays of any shape), by the rules in the module docstring."""
    stripes = vertical + diagonal >= STRIPES
    mixed = (vertical >= MIXED) & (diagonal >= MIXED)
    along = np.where(vertical >= diagonal, PATTERNS.index("vertical"), PATTERNS.index("diagonal"))
    along = np.where(mixed, PATTERNS.index("vertical+diagonal"), along)
    return np.where(stripes, along, np.where(block >= BLOCK, PATTERNS.index("block"), PATTERNS.index("heterogeneous")))


def classify_map(weights: np.ndarray, special: np.ndarray, segments: np.ndarray | None = None) -> str:
    """The pattern class of one `[T, T]` attention map (for tests and single sentences).

    `special` marks special tokens; `segments` gives 0/1 per token for a pair (else one segment).
    """
    length = weights.shape[-1]
    special = np.asarray(special, dtype=bool)
    segment = np.where(special, -1, 0 if segments is None else np.asarray(segments))
    first = np.zeros(length, dtype=bool)
    first[0] = special[0]
    masks = BatchMasks(
        real=torch.ones(1, length, dtype=torch.bool),
        special_keys=torch.as_tensor(np.stack([first, special & ~first, np.zeros(length, dtype=bool)], axis=-1), dtype=torch.float32)[None],
        segment_words=torch.as_tensor(segment[:, None] == np.arange(2), dtype=torch.float32)[None],
        two_segments=torch.as_tensor([len(set(segment[segment >= 0].tolist())) > 1]),
    )
    features = head_features(torch.as_tensor(weights, dtype=torch.float32)[None, None], masks)
    return PATTERNS[int(classify(*(features[name].numpy() for name in ("V", "D", "B")))[0, 0])]


# --- over a corpus -------------------------------------------------------------------------


class _Accumulator:
    """Sums over sentences, kept on the host as float64 `[L, H, S]` arrays (S: the statistics in FEATURES' order,
    NORM_SHARES), and each head's count of sentences per pattern class."""

    def __init__(self, num_layers: int, num_heads: int, norms: bool = False, mask: HeadMask | None = None, ablation: Ablation = "zero"):
        self.mask, self.ablation = (mask if mask is not None and len(mask) else None), ablation
        self.table = np.zeros((num_layers, num_heads, len(STATISTICS)))
        self.norm_table = np.zeros((num_layers, num_heads, len(NORM_SHARES))) if norms else None
        self.counts = np.zeros((num_layers, num_heads, len(PATTERNS)))
        self.sentences = 0
        self.tokens = 0
        self.truncated = 0

    @staticmethod
    def batch_table(features: list[Tensor], shares: list[Tensor]) -> Tensor:
        """A batch's `_feature_table` (and `_norm_share_table`) of every layer as one tensor `[L, B, H, ·]` where the
        maps were: one read a batch, and no operation a layer beyond the tables (on a GPU each is a launch)."""
        return torch.cat([torch.stack(features), *([torch.stack(shares)] if shares else [])], -1)

    def add(self, table: np.ndarray, sentences: int, tokens: int) -> None:
        """A batch's `batch_table`, read to the host, added to the sums."""
        statistics, patterns, norm_shares = np.split(table, [len(STATISTICS), len(FEATURES)], axis=-1)
        self.table += statistics.sum(1, dtype=np.float64)
        pattern = classify(*np.moveaxis(patterns, -1, 0))  # [L, B, H]
        self.counts += (pattern[..., None] == np.arange(len(PATTERNS))).sum(1)
        if self.norm_table is not None:
            self.norm_table += norm_shares.sum(1, dtype=np.float64)
        self.sentences += sentences
        self.tokens += tokens

    def statistics(self) -> dict[str, Any]:
        """The sufficient statistics: what ranks add up (runtime.sum_across)."""
        tables = {"table": self.table} | ({"norm_table": self.norm_table} if self.norm_table is not None else {})
        return {**tables, "counts": self.counts, "sentences": self.sentences, "tokens": self.tokens, "truncated": self.truncated}

    def sum_across_ranks(self) -> None:
        """Every rank's sums in this one (nothing changes in a single process)."""
        summed = distributed.sum_across(self.statistics())
        self.table, self.norm_table = summed["table"], summed.get("norm_table")
        self.counts, self.sentences, self.tokens, self.truncated = (summed[key] for key in ("counts", "sentences", "tokens", "truncated"))

    def result(self) -> PatternResult:
        sentences = max(self.sentences, 1)
        tables = [self.table, self.counts] if self.norm_table is None else [self.table, self.norm_table, self.counts]
        values = (np.concatenate(tables, -1) / sentences).astype(np.float32)
        norms = [f"norm_{name}" for name in NORM_SHARES] if self.norm_table is not None else []
        columns = dict(zip([*FEATURES[: len(STATISTICS)], *norms], np.moveaxis(values[..., : -len(PATTERNS)], -1, 0), strict=True))
        shares = np.ascontiguousarray(values[..., -len(PATTERNS) :])
        for layer, head in self.mask.off if self.mask is not None else ():
            shares[layer, head] = 0.0  # switched off: of no pattern (PatternResult's OFF)
        return PatternResult(
            sentences=self.sentences,
            tokens=self.tokens,
            truncated=self.truncated,
            statistics={name: np.ascontiguousarray(columns[name]) for name in [*STATISTICS, *norms]},
            pattern_shares=shares,
            mask=self.mask,
            ablation=self.ablation,
        )


def pattern_statistics(
    session: Session,
    sentences: Iterable[Sentence],
    *,
    norms: bool = False,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
    chunk_size: int | None = None,
) -> Iterator[Progress[PatternResult]]:
    """Stream a corpus through the model; yield the statistics so far (`partial`) after every batch, then the result.

    Sentences are read `chunk_size` (streaming.CHUNK) at a time and sorted by length within
    the chunk, so batches carry little padding. Memory is flat in the corpus: each layer's
    attention maps are reduced to per-head sums as the pass computes them (one layer's maps
    alive at a time), and batches are capped by padded tokens and by B·T²
    (data.batching), so a chunk's longest sentences cost no more than its shortest. `norms` adds the shares of
    value-weighted norms, from the same passes (module docstring). The passes run under `conditions` (None: the model
    as it is); `job` gives the batch size and the cancel.
    """
    mask = None if conditions is None else conditions.mask
    ablation: Ablation = "zero" if conditions is None else conditions.ablation
    accumulator = _Accumulator(session.num_layers, session.num_heads, norms, mask, ablation)
    reads = LaggedReads()  # each batch's table is added once the next batch's pass is queued (on a GPU)
    gates = session.gate_tensor(mask)
    punctuation = punctuation_ids(session.tokenizer)
    batches: CorpusBatches[Sentence, list[Encoding]] = CorpusBatches(
        sentences, lambda chunk: encode_sorted(session, chunk), lengths=item_lengths, job=job, chunk_size=chunk_size, max_square=MAX_SQUARE
    )
    for batch in batches:
        encoded = batch.take(batch.encoded)
        accumulator.truncated += sum(item.truncated for item in encoded)
        _add_batch(session, accumulator, reads, encoded, punctuation, gates, ablation, norms)
        yield Progress("sentences", accumulator.sentences, partial=accumulator.result())
    if batches.cancelled:
        return
    reads.flush()
    accumulator.sum_across_ranks()  # under torchrun: the whole corpus's sums on every rank
    if accumulator.sentences == 0:
        raise InputError("no sentences to analyse; the corpus is empty")
    result = accumulator.result()
    yield Progress("sentences", accumulator.sentences, result=result, partial=result)


def _add_batch(
    session: Session,
    accumulator: _Accumulator,
    reads: LaggedReads,
    batch: list[Encoding],
    punctuation: PunctuationIds,
    gates: Tensor | None,
    ablation: Ablation,
    norms: bool = False,
) -> None:
    """One forward pass, its attention maps (and norms) reduced layer by layer; nothing of it outlives the call but its
    table, on its way to the host (`reads`)."""
    inputs, masks = batch_tensors(session, batch, punctuation)

    features: list[Tensor] = []  # per layer `[B, H, len(FEATURES)]`: small, added to the sums once the pass is done
    shares: list[Tensor] = []  # every layer reports, in order

    def reduce(layer: int, attention: Tensor) -> None:
        features.append(_feature_table(attention, masks, session.attention_window(layer)))

    def reduce_norms(layer: int, layer_norms: Tensor) -> None:
        shares.append(_norm_share_table(layer_norms, masks, session.attention_window(layer)))

    with torch.inference_mode():
        session.run(
            inputs,
            gates=gates,
            ablation=ablation,
            attentions=True,
            hidden_states=False,
            encoder_only=True,
            on_attention=reduce,
            on_norms=reduce_norms if norms else None,
        )
    sentences, tokens = len(batch), sum(len(item) for item in batch)
    reads.put(accumulator.batch_table(features, shares), use=lambda table: accumulator.add(table, sentences, tokens))


def encode_sorted(session: Session, chunk: list[Sentence]) -> list[Encoding]:
    """Tokenise a chunk (model.tokens.encode_many: one call for single sentences, one for pairs), sorted by length."""
    encoded = session.encode_many([sentence.text for sentence in chunk], [sentence.pair for sentence in chunk])
    encoded.sort(key=len)
    return encoded


def batch_tensors(session: Session, batch: list[Encoding], punctuation: PunctuationIds) -> tuple[dict[str, Tensor], BatchMasks]:
    """Pad a length-sorted batch into model inputs and the masks the statistics need: made on the host, the batch's
    tokens at once (not a few numpy calls a sentence), one copy of each to the device."""
    ids = np.concatenate([item.input_ids for item in batch])
    names = ("input_ids", "token_type_ids", "attention_mask")
    rows, real = padded(  # the model's inputs (copied to the device), then the special tokens and segments
        [len(item) for item in batch],
        [
            (ids, session.tokenizer.pad_token_id or 0),
            (np.concatenate([item.token_type_ids for item in batch]), 0),
            (np.ones(len(ids), dtype=np.int64), 0),
            (np.concatenate([item.special for item in batch]), 0),
            (joined_ids(item.segment_ids for item in batch), -1),
        ],
    )
    special, segments = rows[3].astype(bool), rows[4]
    keys = np.zeros((*real.shape, 5), dtype=np.float32)  # [B, T, 5]: special_keys, then segment_words
    keys[:, 0, 0], keys[:, 1:, 1] = special[:, 0], special[:, 1:]
    keys[..., 2][real] = punctuation(ids) & ~special[real]
    keys[..., 3:] = segments[..., None] == np.arange(2)
    pairs = ((segments == 0).any(axis=1) & (segments == 1).any(axis=1)).tolist()
    inputs = dict(zip(names, upload(rows[: len(names)], session.device).unbind(), strict=True))
    on_device = upload(keys, session.device)
    masks = BatchMasks(
        real=inputs["attention_mask"].bool(),
        special_keys=on_device[..., :3],
        segment_words=on_device[..., 3:],
        two_segments=upload(np.array(pairs, dtype=bool), session.device),
        pairs=any(pairs),
    )
    return inputs, masks
