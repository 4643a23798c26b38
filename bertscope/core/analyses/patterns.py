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
taken of the value-weighted norms ‖α_ij f_h(x_j)‖ (Kobayashi et al. 2020, core.model.norms):
each query's row of norms divided by its sum, so a share of norm says how much of what the
head moves into the token comes from there, as a share of weight says where it looks. They
come from the same forward pass and accumulate as more per-head sums (`norm_cls`, ...).

A local head (ModernBERT's sliding-window layers) sees only keys within ±w of its query: on
inputs longer than its window, a share to [CLS], [SEP] or punctuation averages over the
queries that can see such a token, and V's columns over the queries that can see them, so
that what the window hides is not read as attention the head chose not to pay.

Over a corpus, each head gets the share of sentences in each class and its dominant class;
each layer the mean of its heads. Statistics accumulate batch by batch on the model's
device, so memory does not grow with the corpus.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import Tensor

from bertscope.core import distributed
from bertscope.core.analyses.headstats import is_punctuation
from bertscope.core.analyses.streaming import CorpusBatches, item_lengths
from bertscope.core.data.batching import MAX_SQUARE, MAX_TOKENS
from bertscope.core.data.corpus import Sentence
from bertscope.core.errors import InputError
from bertscope.core.model.masks import Ablation, HeadMask
from bertscope.core.model.results import NORM_SHARES, PATTERNS, STATISTICS, PatternResult
from bertscope.core.progress import Progress

if TYPE_CHECKING:
    from bertscope.core.model.session import Session

STRIPES, MIXED, BLOCK = 0.6, 0.2, 0.85
TOP_COLUMNS = 2


# --- per batch, on the device -------------------------------------------------------------
#
# Every statistic is a mean over query tokens of a per-query figure; they are computed together,
# as columns of one tensor, with one product of the attention for all the key sets and one
# weighted mean for all the statistics, and what depends only on the batch once for all layers.
# On a GPU every tensor operation costs a launch, however small: on one H100, `patterns` took
# 6.7x a bare forward when each statistic had its own operations (benchmarks/README.md).

# The columns of `_feature_table`: STATISTICS, then the pattern features V, D, B.
FEATURES = (*STATISTICS, "V", "D", "B")


@dataclass
class BatchMasks:
    """What the statistics need to know about a padded batch, as `[B, T]` tensors."""

    real: Tensor  # bool: not padding
    first_special: Tensor  # bool: [CLS] / <s>
    later_special: Tensor  # bool: [SEP] / </s> and any other special token
    punctuation: Tensor  # bool
    segment: Tensor  # long: 0, 1 for the pair's segments; -1 for special tokens and padding
    two_segments: Tensor  # [B] bool: the input is a pair

    @functools.cached_property
    def key_sets(self) -> Tensor:
        """`[B, T, 6]` float: the keys whose attention a statistic sums ([CLS], [SEP], punctuation, words,
        the words of segment 0 and of segment 1), once a batch for every layer."""
        words = self.real & (self.segment >= 0)
        return torch.stack(
            [self.first_special, self.later_special, self.punctuation, words, words & (self.segment == 0), words & (self.segment == 1)],
            dim=-1,
        ).float()

    @functools.cached_property
    def query_sets(self) -> tuple[Tensor, Tensor]:
        """`[B, T, 4]` float: the queries a mean is over (real tokens; those with a previous and with a next
        real token; words), and `[B, 4]` their counts, at least 1."""
        real = self.real.float()
        has_prev = real.clone()
        has_prev[:, 0] = 0
        has_next = torch.zeros_like(real)
        has_next[:, :-1] = real[:, :-1] * real[:, 1:]
        sets = torch.stack([real, has_prev, has_next, self.key_sets[..., 3]], dim=-1)
        return sets, sets.sum(1).clamp(min=1)

    def visible(self, window: int | None) -> Tensor | None:
        """`[T, T]` float: 1 where a head with this window sees the key; None where it sees every key."""
        if window is None or self.real.shape[1] <= window + 1:
            return None
        cache = self.__dict__.setdefault("_visible", {})
        if window not in cache:
            cache[window] = (self.distance <= window).float()
        return cache[window]

    def windowed_query_sets(self, window: int | None) -> tuple[Tensor, Tensor]:
        """`query_sets` and three more columns: the real queries within the window of a [CLS], of a [SEP] and of a
        punctuation token (for a head that sees every key: the real queries, as `_REAL`)."""
        cache = self.__dict__.setdefault("_windowed_query_sets", {})
        if window not in cache:
            sets, counts = self.query_sets
            visible = self.visible(window)
            if visible is None:
                extra = sets[..., [_REAL] * 3]
            else:
                extra = ((self.key_sets[..., :3].transpose(1, 2) @ visible).transpose(1, 2) > 0).float() * sets[..., _REAL, None]
            sets = torch.cat([sets, extra], dim=-1)
            cache[window] = sets, sets.sum(1).clamp(min=1)
        return cache[window]

    def query_weights(self, over: tuple[int, ...], window: int | None = None) -> tuple[Tensor, Tensor]:
        """`[B, T, S]` and `[B, S]`: the columns `over` of `windowed_query_sets` and their counts (kept for the
        batch's other layers)."""
        if self.visible(window) is None:
            window = None
        cache = self.__dict__.setdefault("_query_weights", {})
        if (over, window) not in cache:
            sets, counts = self.windowed_query_sets(window)
            index = torch.tensor(over, device=sets.device)
            cache[over, window] = sets[..., index], counts[:, index]
        return cache[over, window]

    @functools.cached_property
    def distance(self) -> Tensor:
        """`[T, T]` float: |i - j| between query i and key j."""
        positions = torch.arange(self.real.shape[1], device=self.real.device)
        return (positions[:, None] - positions[None, :]).abs().float()

    @functools.cached_property
    def band(self) -> Tensor:
        """`[T, T]` float: 1 where |i - j| <= 1, the diagonal pattern's band."""
        return (self.distance <= 1).float()


_REAL, _HAS_PREV, _HAS_NEXT, _WORDS = range(4)  # the columns of `BatchMasks.query_sets`
_SEES_CLS, _SEES_SEP, _SEES_PUNCTUATION = range(4, 7)  # and those `windowed_query_sets` adds
# Which queries each share of NORM_SHARES is a mean over.
_SHARE_QUERIES = (_SEES_CLS, _SEES_SEP, _SEES_PUNCTUATION, _REAL, _HAS_PREV, _HAS_NEXT)


def _query_means(per_query: Tensor, masks: BatchMasks, over: tuple[int, ...], window: int | None = None) -> Tensor:
    """`[B, H, S]`: the mean of each column s of `per_query` `[B, H, T, S]` over the queries `over[s]`."""
    weights, totals = masks.query_weights(over, window)  # [B, T, S], [B, S]
    return (per_query * weights[:, None]).sum(2) / totals[:, None]


def _share_columns(attention: Tensor, to_keys: Tensor) -> list[Tensor]:
    """The per-query figures `[B, H, T]` of NORM_SHARES: attention to [CLS], [SEP], punctuation, the token
    itself, the previous token and the next one (0 where there is none)."""
    pad = torch.nn.functional.pad
    return [
        to_keys[..., 0],
        to_keys[..., 1],
        to_keys[..., 2],
        torch.diagonal(attention, dim1=-2, dim2=-1),
        pad(torch.diagonal(attention, offset=-1, dim1=-2, dim2=-1), (1, 0)),
        pad(torch.diagonal(attention, offset=1, dim1=-2, dim2=-1), (0, 1)),
    ]


def _share_table(attention: Tensor, masks: BatchMasks, window: int | None = None) -> Tensor:
    """`[B, H, 6]`: per sentence and head, the NORM_SHARES of rows that sum to one, each averaged over its queries."""
    to_keys = attention @ masks.key_sets[:, None, :, :3]  # [B, H, T, 3]: one product for the three key sets
    return _query_means(torch.stack(_share_columns(attention, to_keys), dim=-1), masks, _SHARE_QUERIES, window)


def shares(attention: Tensor, masks: BatchMasks, window: int | None = None) -> dict[str, Tensor]:
    """Per sentence and head (`[B, H]`), the NORM_SHARES of rows that sum to one: to [CLS], [SEP],
    punctuation, the token itself, the previous and the next token, each averaged over real queries
    (those that can see such a token, for a head whose `window` hides some keys)."""
    return dict(zip(NORM_SHARES, _share_table(attention.float(), masks, window).unbind(-1), strict=True))


def norm_shares(norms: Tensor, masks: BatchMasks, window: int | None = None) -> dict[str, Tensor]:
    """The NORM_SHARES of value-weighted norms `[B, H, T, T]`: each query's row divided by its sum first.

    A row whose norms are all zero (a head switched off) has no share anywhere.
    """
    return dict(zip(NORM_SHARES, _norm_share_table(norms, masks, window).unbind(-1), strict=True))


def _norm_share_table(norms: Tensor, masks: BatchMasks, window: int | None = None) -> Tensor:
    norms = norms.float()
    return _share_table(norms / norms.sum(-1, keepdim=True).clamp(min=1e-12), masks, window)


def head_features(attention: Tensor, masks: BatchMasks, window: int | None = None) -> dict[str, Tensor]:
    """Per sentence and head (`[B, H]`), every statistic and the V, D, B pattern features.

    `attention` is one layer's `[B, H, T, T]`, rows over padding are ignored; `window`: its heads see only keys
    within ±window of the query (module docstring).
    """
    return dict(zip(FEATURES, _feature_table(attention, masks, window).unbind(-1), strict=True))


def _feature_table(attention: Tensor, masks: BatchMasks, window: int | None = None) -> Tensor:
    """`[B, H, len(FEATURES)]`: `head_features` as the columns of one tensor."""
    attention = attention.float()
    batch, heads, length, _ = attention.shape
    to_keys = attention @ masks.key_sets[:, None]  # [B, H, T, 6]
    # Attention to words of the query's own segment, and that as a share of the query's attention to words.
    query_segments = masks.key_sets[:, None, :, 4:6]  # a word query's segment, one-hot: [B, 1, T, 2]
    inside = (to_keys[..., 4:6] * query_segments).sum(-1)
    inside_share = inside / to_keys[..., 3].clamp(min=1e-9)

    # Pattern features: V from the two most-attended key columns, D from the band |i - j| <= 1 without them.
    sets, counts = masks.query_sets
    received = (attention * sets[:, None, :, _REAL, None]).sum(-2)  # [B, H, T]: weight each key receives
    visible = masks.visible(window)
    # over the queries that can see each key: all real ones, or those within the window
    seen_by = counts[:, None, _REAL, None] if visible is None else (sets[:, :, _REAL] @ visible).clamp(min=1)[:, None]
    columns = (received / seen_by).masked_fill(~masks.real[:, None, :], -1.0)
    top_values, top_index = columns.topk(min(TOP_COLUMNS, length), dim=-1)
    vertical = top_values.clamp(min=0).sum(-1)
    off_top = torch.ones(batch, heads, length, device=attention.device).scatter_(-1, top_index, 0.0)
    band_mass = ((attention * off_top[:, :, None, :]) * masks.band).sum(-1)

    per_query = torch.stack(
        [
            *_share_columns(attention, to_keys),
            inside,
            torch.special.entr(attention).sum(-1),
            (attention * masks.distance).sum(-1),
            inside_share,
            band_mass,
        ],
        dim=-1,
    )
    # cls sep punct self prev next | block entropy distance | the block ratio, D
    means = _query_means(per_query, masks, (*_SHARE_QUERIES, _WORDS, _REAL, _REAL, _WORDS, _REAL), window)
    block = means[..., 9:10] * masks.two_segments[:, None, None]  # B only for pairs
    return torch.cat([means[..., :9], vertical[..., None], means[..., 10:11], block], dim=-1)


def classify(vertical: Tensor, diagonal: Tensor, block: Tensor) -> Tensor:
    """Index into PATTERNS for each head (any shape), by the rules in the module docstring."""
    stripes = vertical + diagonal >= STRIPES
    mixed = (vertical >= MIXED) & (diagonal >= MIXED)
    pattern = torch.full_like(vertical, PATTERNS.index("heterogeneous"), dtype=torch.long)
    pattern = torch.where(block >= BLOCK, PATTERNS.index("block"), pattern)
    along = torch.where(vertical >= diagonal, PATTERNS.index("vertical"), PATTERNS.index("diagonal"))
    along = torch.where(mixed, PATTERNS.index("vertical+diagonal"), along)
    return torch.where(stripes, along, pattern)


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
        first_special=torch.as_tensor(first)[None],
        later_special=torch.as_tensor(special & ~first)[None],
        punctuation=torch.zeros(1, length, dtype=torch.bool),
        segment=torch.as_tensor(segment, dtype=torch.long)[None],
        two_segments=torch.as_tensor([len(set(segment[segment >= 0].tolist())) > 1]),
    )
    features = head_features(torch.as_tensor(weights, dtype=torch.float32)[None, None], masks)
    return PATTERNS[int(classify(features["V"], features["D"], features["B"])[0, 0])]


# --- over a corpus -------------------------------------------------------------------------


class _Accumulator:
    """Sums over sentences, kept on the device as float64 `[L, H, S]` tensors (S: STATISTICS, NORM_SHARES)."""

    def __init__(self, num_layers: int, num_heads: int, device: torch.device, norms: bool = False):
        self.table = torch.zeros(num_layers, num_heads, len(STATISTICS), dtype=torch.float64, device=device)
        self.norm_table = torch.zeros(num_layers, num_heads, len(NORM_SHARES), dtype=torch.float64, device=device) if norms else None
        self.counts = torch.zeros(num_layers, num_heads, len(PATTERNS), dtype=torch.float64, device=device)
        self.sentences = 0
        self.tokens = 0
        self.truncated = 0

    def add(self, features: dict[int, Tensor], shares: dict[int, Tensor]) -> None:
        """A batch's `_feature_table` (and `_norm_share_table`) of each layer, added at once: a few operations a
        batch rather than a few a layer (on a GPU each is a launch)."""
        layers = list(features)
        table = torch.stack(list(features.values()))  # [layers, B, H, S + 3]
        self.table[layers] += table[..., : len(STATISTICS)].sum(1).double()
        vertical, diagonal, block = table[..., len(STATISTICS) :].unbind(-1)
        self.counts[layers] += torch.nn.functional.one_hot(classify(vertical, diagonal, block), len(PATTERNS)).sum(1).double()
        if shares:
            assert self.norm_table is not None  # made with norms=True
            self.norm_table[list(shares)] += torch.stack(list(shares.values())).sum(1).double()

    @property
    def sums(self) -> dict[str, Tensor]:
        """Per statistic, `[L, H]`: the sums so far."""
        sums = dict(zip(STATISTICS, self.table.unbind(-1), strict=True))
        if self.norm_table is not None:
            sums |= {f"norm_{name}": total for name, total in zip(NORM_SHARES, self.norm_table.unbind(-1), strict=True)}
        return sums

    def statistics(self) -> dict:
        """The sufficient statistics: what ranks add up (core.distributed.sum_across)."""
        tables = {"table": self.table} | ({"norm_table": self.norm_table} if self.norm_table is not None else {})
        return {**tables, "counts": self.counts, "sentences": self.sentences, "tokens": self.tokens, "truncated": self.truncated}

    def sum_across_ranks(self) -> None:
        """Every rank's sums in this one (nothing changes in a single process)."""
        summed = distributed.sum_across(self.statistics())
        self.table, self.norm_table = summed["table"], summed.get("norm_table")
        self.counts, self.sentences, self.tokens, self.truncated = (summed[key] for key in ("counts", "sentences", "tokens", "truncated"))

    def result(self) -> PatternResult:
        sentences = max(self.sentences, 1)
        tables = [self.table] if self.norm_table is None else [self.table, self.norm_table]
        values = (torch.cat(tables, -1) / sentences).float().cpu().numpy()  # one read of the device, not one a statistic
        return PatternResult(
            sentences=self.sentences,
            tokens=self.tokens,
            truncated=self.truncated,
            statistics={name: np.ascontiguousarray(values[..., index]) for index, name in enumerate(self.sums)},
            pattern_shares=(self.counts / sentences).float().cpu().numpy(),
        )


def pattern_statistics(
    session: Session,
    sentences: Iterable[Sentence],
    *,
    mask: HeadMask | None = None,
    ablation: Ablation = "zero",
    batch_size: int | None = None,
    chunk_size: int | None = None,
    max_tokens: int = MAX_TOKENS,
    max_square: int = MAX_SQUARE,
    cancel: threading.Event | None = None,
    norms: bool = False,
) -> Iterator[Progress[PatternResult]]:
    """Stream a corpus through the model; yield the statistics so far (`partial`) after every batch, then the result.

    Sentences are read `chunk_size` (streaming.CHUNK) at a time and sorted by length within
    the chunk, so batches carry little padding. Memory is flat in the corpus: each layer's
    attention maps are reduced to per-head sums as the pass computes them (one layer's maps
    alive at a time), and batches are capped by padded tokens and by B·T²
    (core.data.batching), so a chunk's longest sentences cost no more than its shortest. `norms` adds the shares of
    value-weighted norms, from the same passes (module docstring).
    """
    accumulator = _Accumulator(session.num_layers, session.num_heads, session.device, norms)
    gates = session.gate_tensor(mask)
    punctuation_of: dict[int, bool] = {}  # bounded by the vocabulary
    batches: CorpusBatches[Sentence, list[EncodedSentence]] = CorpusBatches(
        sentences,
        lambda chunk: encode_sorted(session, chunk),
        lengths=item_lengths,
        batch_size=batch_size,
        chunk_size=chunk_size,
        max_tokens=max_tokens,
        max_square=max_square,
        cancel=cancel,
    )
    for batch in batches:
        encoded = batch.take(batch.encoded)
        accumulator.truncated += sum(item.truncated for item in encoded)
        _add_batch(session, accumulator, encoded, punctuation_of, gates, ablation, norms)
        yield Progress("sentences", accumulator.sentences, partial=accumulator.result())
    if batches.cancelled:
        return
    accumulator.sum_across_ranks()  # under torchrun: the whole corpus's sums on every rank
    if accumulator.sentences == 0:
        raise InputError("no sentences to analyse; the corpus is empty")
    result = accumulator.result()
    yield Progress("sentences", accumulator.sentences, result=result, partial=result)


def _add_batch(
    session: Session,
    accumulator: _Accumulator,
    batch: list[EncodedSentence],
    punctuation_of: dict[int, bool],
    gates: Tensor | None,
    ablation: Ablation,
    norms: bool = False,
) -> None:
    """One forward pass, its attention maps (and norms) reduced layer by layer; nothing of it outlives the call."""
    inputs, masks = batch_tensors(session, batch, punctuation_of)

    features: dict[int, Tensor] = {}  # per layer `[B, H, S + 3]`: small, added to the sums once the pass is done
    shares: dict[int, Tensor] = {}

    def reduce(layer: int, attention: Tensor) -> None:
        features[layer] = _feature_table(attention, masks, session.attention_window(layer))

    def reduce_norms(layer: int, layer_norms: Tensor) -> None:
        shares[layer] = _norm_share_table(layer_norms, masks, session.attention_window(layer))

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
    accumulator.add(features, shares)
    accumulator.sentences += len(batch)
    accumulator.tokens += int(masks.real.sum())


@dataclass(frozen=True)
class EncodedSentence:
    input_ids: list[int]
    token_type_ids: list[int]
    special: list[int]
    segment: list[int]  # 0 / 1, -1 for special tokens
    truncated: int


def encode_sorted(session: Session, chunk: list[Sentence]) -> list[EncodedSentence]:
    """Tokenise a chunk (one call for single sentences, one for pairs), truncate, sort by length."""
    encoded = []
    for with_pairs in (False, True):
        group = [sentence for sentence in chunk if (sentence.pair is not None) == with_pairs]
        if group:
            encoded.extend(_encode_group(session, group, with_pairs))
    encoded.sort(key=lambda item: len(item.input_ids))
    return encoded


def _encode_group(session: Session, group: list[Sentence], with_pairs: bool) -> list[EncodedSentence]:
    tokenizer, limit = session.tokenizer, session.max_length
    options: dict[str, Any] = dict(add_special_tokens=True, return_special_tokens_mask=True, return_token_type_ids=True, verbose=False)
    texts = [sentence.text for sentence in group]
    pairs = [sentence.pair for sentence in group] if with_pairs else None
    full = tokenizer(texts, pairs, truncation=False, **options)
    encoded = []
    for index in range(len(group)):
        source, row, cut = full, index, 0
        if len(full["input_ids"][index]) > limit:  # rare: tokenise this one again, cut to fit
            cut = len(full["input_ids"][index]) - limit
            pair = [pairs[index]] if pairs is not None else None
            source, row = tokenizer([texts[index]], pair, truncation="longest_first", max_length=limit, **options), 0
        encoded.append(
            EncodedSentence(
                input_ids=source["input_ids"][row],
                token_type_ids=source["token_type_ids"][row],
                special=source["special_tokens_mask"][row],
                segment=[-1 if s is None else s for s in source.sequence_ids(row)],
                truncated=cut,
            )
        )
    return encoded


def batch_tensors(session: Session, batch: list[EncodedSentence], punctuation_of: dict[int, bool]) -> tuple[dict[str, Tensor], BatchMasks]:
    """Pad a length-sorted batch into model inputs and the masks the statistics need."""
    length = max(len(item.input_ids) for item in batch)
    pad_id = session.tokenizer.pad_token_id or 0

    def padded(rows: list[list[int]] | list[list[bool]], value: int) -> Tensor:
        return torch.tensor([row + [value] * (length - len(row)) for row in rows], dtype=torch.long)

    input_ids = padded([item.input_ids for item in batch], pad_id)
    real = padded([[1] * len(item.input_ids) for item in batch], 0).bool()
    special = padded([item.special for item in batch], 1).bool() & real
    first = torch.zeros_like(special)
    first[:, 0] = special[:, 0]
    for item in batch:
        for token_id in item.input_ids:
            if token_id not in punctuation_of:
                token = cast(str, session.tokenizer.convert_ids_to_tokens(token_id))  # transformers: str for one id, a list for many
                punctuation_of[token_id] = is_punctuation(token)
    punctuation = padded([[punctuation_of[t] for t in item.input_ids] for item in batch], 0).bool() & ~special
    segment = padded([item.segment for item in batch], -1)
    device = session.device
    inputs = {
        "input_ids": input_ids.to(device),
        "attention_mask": real.long().to(device),
        "token_type_ids": padded([item.token_type_ids for item in batch], 0).to(device),
    }
    masks = BatchMasks(
        real=real.to(device),
        first_special=first.to(device),
        later_special=(special & ~first).to(device),
        punctuation=punctuation.to(device),
        segment=segment.to(device),
        two_segments=torch.tensor([len({s for s in item.segment if s >= 0}) > 1 for item in batch], device=device),
    )
    return inputs, masks
