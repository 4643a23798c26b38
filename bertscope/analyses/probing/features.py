"""Every layer's representation of words or sentences, for probing, with an on-disk cache.

One forward pass per batch gives all L+1 hidden-state layers (index 0 = embeddings). Words
are pooled from their sub-word tokens (`first` or `mean`); sentences are the [CLS] vector
or the mean of the real, non-special tokens. Results are cached on disk, keyed by the
model's fingerprint, a hash of the data and the options; entries are written atomically,
and an entry that does not load cleanly is computed again, never trusted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import threading
import zipfile
from collections.abc import Generator, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import torch

from bertscope import runtime as distributed
from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.streaming import CorpusBatches, WordPieces, pad_batch, words_of
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress, relay
from bertscope.data.cache import default_cache_dir
from bertscope.data.corpus import Sentence
from bertscope.data.files import atomic_write, publish, reserve_space, temporary_beside
from bertscope.model.device import upload
from bertscope.model.lagged import LaggedReads
from bertscope.model.masks import Ablation

if TYPE_CHECKING:
    from transformers import BatchEncoding

    from bertscope.model.deferred import DeferredSession
    from bertscope.model.session import Session

CACHE_VERSION = 6  # 2: rows name their word (a word with no tokens has no row); 3: stored layer by layer; 4: float16;
# 5: float32 where float16 would round away the spread; 6: `precision` in the options
PRECISIONS = ("auto", "float32")
FLOAT16_MAX = float(np.finfo(np.float16).max)
# float16 is kept where its rounding noise stays below ROUNDING_SHARE of a feature's spread for all but
# LOSSY_FEATURES of a layer's features (measured on the first batch; constant features do not count).
ROUNDING_SHARE = 0.01
LOSSY_FEATURES = 0.01
WORD_POOLING = ("first", "mean")
SENTENCE_POOLING = ("cls", "mean")


@dataclass(frozen=True)
class FeatureOptions:
    level: str = "sentence"  # "word" (needs sentences with .words) or "sentence"
    word_pooling: str = "first"
    sentence_pooling: str = "cls"
    mask: str = ""  # head mask spec under which the features are taken
    ablation: Ablation = "zero"
    # "auto": float16 where its rounding loses nothing a linear probe reads (`_float16_would_lose`), else float32;
    # "float32" for fits that follow the inputs' last digits (the structural probes are not convex: float16's
    # rounding flips between CPU kernel paths moved their UUAS by 0.01 on EWT, float32 features by 0.002)
    precision: str = "auto"

    def __post_init__(self) -> None:
        if self.level not in ("word", "sentence"):
            raise InputError(f"unknown feature level {self.level!r}; use word or sentence")
        if self.word_pooling not in WORD_POOLING:
            raise InputError(f"unknown word pooling {self.word_pooling!r}; use one of: {', '.join(WORD_POOLING)}")
        if self.sentence_pooling not in SENTENCE_POOLING:
            raise InputError(f"unknown sentence pooling {self.sentence_pooling!r}; use one of: {', '.join(SENTENCE_POOLING)}")
        if self.precision not in PRECISIONS:
            raise InputError(f"unknown feature precision {self.precision!r}; use one of: {', '.join(PRECISIONS)}")


@dataclass(frozen=True)
class Features:
    """`X` `[N, L+1, D]`: one row per word (or sentence) that fitted the model.

    `X` is a read-only view of a layer-major `[L+1, N, D]` array (often a memory map of the
    cache entry), so that `X[:, layer]` is contiguous. It is float16 where that loses
    nothing a probe reads: half the memory, disk and first-touch page faults of float32
    (seconds per corpus on small virtual machines), for probe accuracies within 0.03 point of
    float32 features' (generated treebank, deprel, every layer of MiniLM). It is float32
    where float16 would not do: a hidden state beyond its range, or features that vary
    little around a large value, where float16's steps are as large as the variation itself
    (MiniLM's [CLS]: values near 0.5, a spread of 4e-4, float16's step there 2.4e-4; see
    `_float16_would_lose`).
    """

    X: np.ndarray
    sentence_index: np.ndarray  # [N] which sentence the row comes from
    word_index: np.ndarray  # [N] which word of it (0 for sentence-level rows)
    truncated_words: int  # words lost because their sentence was cut to the model's maximum
    from_cache: bool = False
    numerics: dict[str, Any] | None = None  # the passes' device, dtype and CPU kernel path (`Session.numerics`), kept in the cache


def data_hash(sentences: Sequence[Sentence], level: str) -> str:
    """What the features depend on in the data: the texts (and words, for word level)."""
    digest = hashlib.sha256()
    for sentence in sentences:
        words = sentence.words if level == "word" else None
        digest.update(json.dumps([sentence.text, sentence.pair, words]).encode())
    return digest.hexdigest()[:24]


def cache_key(fingerprint: str, data: str, options: FeatureOptions, max_length: int, numerics: str = "float32") -> str:
    """The name of a cache entry: the model's fingerprint, maximum length and `numerics_key`, the `data_hash` and the
    options."""
    payload = json.dumps(
        {
            "v": CACHE_VERSION,
            "model": fingerprint,
            "data": data,
            "options": asdict(options),
            "max_length": max_length,
            "numerics": numerics,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def extract_features(
    model: Session | DeferredSession,
    sentences: Sequence[Sentence],
    options: FeatureOptions,
    *,
    cache_dir: str | Path | Literal[False] | None = None,
    batch_size: int | None = None,
    cancel: threading.Event | None = None,
    dtype: type | None = None,
) -> Iterator[Progress[Features]]:
    """Yield progress per batch; the last item carries the Features (from the cache when it holds them).

    `dtype` (np.float16 or np.float32) stores the features so instead of judging from the first
    batch (`_float16_would_lose`): torchrun's ranks take the one process's choice. Options with
    `precision="float32"` store float32 whatever `dtype` says.

    `cache_dir=None` uses the default cache; pass `False` to switch the cache off. The
    cache entry is written by a background thread while the caller goes on; reading that
    entry waits for the write. A `DeferredSession` is loaded only when the cache misses.
    """
    if not sentences:
        raise InputError("no sentences to take features from")
    if options.level == "word" and any(sentence.words is None for sentence in sentences):
        raise InputError("word-level features need sentences split into words (a CoNLL-U file)")
    path = None
    if cache_dir is not False:
        directory, data = _directory(cache_dir), data_hash(sentences, options.level)
        path, cached = _lookup(model, directory, data, options)
        if cached is None and model.ready() is not model:  # a miss: a DeferredSession loads its model now
            path, cached = _lookup(model.ready(), directory, data, options)  # its own key, if the files told it wrongly
        if cached is not None:
            yield Progress("features", len(sentences), len(sentences), cached)
            return
    session = model.ready()
    gates = session.gate_tensor(session.mask(options.mask))
    _check_pairs(sentences, options.level)
    features = None
    if options.precision == "float32":
        dtype = np.float32
    for stored in (np.float16, np.float32) if dtype is None else (dtype, np.float32):
        try:
            features = yield from _extract(session, sentences, options, gates, path, stored, batch_size, cancel, judge=dtype is None)
            break
        except _BeyondFloat16:
            continue  # again in float32, from the first batch
    if features is not None:
        yield Progress("features", len(sentences), len(sentences), features)


def _directory(cache_dir: str | Path | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def _entry(model: Session | DeferredSession, directory: Path, data: str, options: FeatureOptions) -> Path:
    """The cache entry `model` names for the data (.npy: the layer-major features; .npz: which word each row is)."""
    max_length = model.max_length
    assert max_length is not None  # known: `_lookup` asks only then, and a loaded session always knows it
    return directory / f"features-{cache_key(model.fingerprint, data, options, max_length, model.numerics_key)}"


def _lookup(model: Session | DeferredSession, directory: Path, data: str, options: FeatureOptions) -> tuple[Path | None, Features | None]:
    """`_entry` and its features if the cache holds them; neither where the model's maximum length is not known yet."""
    if model.max_length is None:
        return None, None
    path = _entry(model, directory, data, options)
    return path, _load(path, model)


class _BeyondFloat16(Exception):
    """Features float16 cannot hold: a hidden state too large for it (not seen in a post-LayerNorm encoder, but
    possible), or a spread it would round away (`_float16_would_lose`)."""


def _float16_would_lose(pooled: torch.Tensor) -> bool:
    """Whether float16 would round away what varies in `[B, L+1, D]` rows: in some layer, more than LOSSY_FEATURES of
    the features that vary get rounding noise (step / √12) above ROUNDING_SHARE of their spread over the rows.

    A single row shows no spread: float32 then (a one-sentence job costs nothing either way).
    """
    if len(pooled) < 2:
        return True
    rows = pooled.float()
    spread = rows.std(0)  # [L+1, D]
    largest = rows.abs().amax(0)
    step = torch.exp2(torch.floor(torch.log2(largest.clamp_min(2.0**-14))) - 10)  # float16's spacing at that size
    varying = spread > 0
    lossy = varying & (step / 12**0.5 > ROUNDING_SHARE * spread)
    share = lossy.sum(1).float() / varying.sum(1).clamp_min(1)
    return bool((share > LOSSY_FEATURES).any())


def _extract(
    session: Session,
    sentences: Sequence[Sentence],
    options: FeatureOptions,
    gates: torch.Tensor | None,
    path: Path | None,
    dtype: type,
    batch_size: int | None,
    cancel: threading.Event | None,
    judge: bool = True,
) -> Generator[Progress[Features], None, Features | None]:
    """The batches' forward passes, yielding progress; returns the Features, or None if cancelled.

    float16 features give way to float32 (`_BeyondFloat16`) on a state beyond its range, and, if `judge`, where the
    first batch shows a spread float16 would round away."""
    # Rows go straight to their place in input order, layer-major (each layer one contiguous
    # matrix for the probes): a sentence gets one slot per word (one for sentence level), and
    # the slots of words that have no row (cut off, or tokenised to nothing) are dropped at the end.
    slots = [len(words_of(sentence)) if options.level == "word" else 1 for sentence in sentences]
    first_slot = np.concatenate([[0], np.cumsum(slots)[:-1]])
    shape = (session.num_layers + 1, sum(slots), session.hidden_size)
    entry = _MappedEntry.create(path, shape, dtype) if path is not None else None
    by_layer: np.ndarray = entry.array if entry is not None else np.empty(shape, dtype=dtype)
    torch_dtype = torch.float16 if dtype == np.float16 else torch.float32
    filled = np.zeros(sum(slots), dtype=bool)
    word_index = np.zeros(sum(slots), dtype=np.int64)
    lost = 0

    def store(numbers: list[int], present: list[list[int]], rows: np.ndarray, beyond: np.ndarray | None = None) -> None:
        """A batch's rows `[rows of the batch, L+1, D]`, read to the host, put in their slots; `beyond`: whether a
        state was beyond float16's range (float16 rows), read with them."""
        if beyond is not None and bool(beyond):
            raise _BeyondFloat16
        block = rows.transpose(1, 0, 2)  # [L+1, rows of the batch, D]
        row = 0
        for index, words in zip(numbers, present, strict=True):  # slice copies: numpy's scattered assignment is 10x slower
            start_slot, end_row = first_slot[index], row + len(words)
            by_layer[:, start_slot : start_slot + len(words)] = block[:, row:end_row]
            word_index[start_slot : start_slot + len(words)] = words
            filled[start_slot : start_slot + len(words)] = True
            row = end_row

    reads = LaggedReads()  # a batch's rows are stored once the next batch's pass is queued (on a GPU)
    try:
        batches = _batches(session, sentences, options.level, batch_size, cancel)
        for batch in batches:
            inputs, special = _pad(session, batch.encoded, batch.indices)
            with torch.inference_mode():
                pooled, present = _pooled(session, batch.encoded, batch.indices, inputs, special, gates, options)
                if options.level == "word":
                    lost += sum(
                        len(words_of(sentence)) - (words[-1] + 1 if words else 0)
                        for sentence, words in zip(batch.items, present, strict=True)
                    )
                if dtype == np.float16 and judge and batch.number == 0 and _float16_would_lose(pooled):
                    raise _BeyondFloat16
                checked = (pooled.abs().amax() > FLOAT16_MAX,) if dtype == np.float16 else ()
                reads.put(pooled.to(torch_dtype), *checked, use=functools.partial(store, batch.numbers, present))
            del inputs, special, pooled, checked  # nothing of a batch outlives it (the next pass would stack on it)
            yield Progress("features", batch.done, len(sentences))
        reads.flush()
        if batches.cancelled:
            return None
    finally:
        complete = bool(filled.all())
        if entry is not None and not complete:  # cancelled, failed, or rows to drop: the file is not the entry
            entry.discard()
    sentence_index = np.repeat(np.arange(len(sentences)), slots)
    if not complete:
        by_layer, sentence_index, word_index = by_layer[:, filled], sentence_index[filled], word_index[filled]
    by_layer.flags.writeable = False  # a memory map of the cache entry: writing would change the file
    features = Features(
        X=by_layer.transpose(1, 0, 2), sentence_index=sentence_index, word_index=word_index, truncated_words=lost, numerics=session.numerics
    )
    if entry is not None:  # None: no cache, or a directory that cannot hold one
        assert path is not None  # an entry is made only at a path
        _finish_in_background(path, features, entry if complete else None)
    return features


def _pooled(
    session: Session,
    encoded: BatchEncoding,
    in_chunk: list[int],
    inputs: dict[str, torch.Tensor],
    special: torch.Tensor | None,
    gates: torch.Tensor | None,
    options: FeatureOptions,
) -> tuple[torch.Tensor, list[list[int]]]:
    """`[rows, L+1, D]` float32 features of one batch, and per sentence the words that have a row (sentence level: [0])."""
    outputs = session.run(inputs, gates=gates, ablation=options.ablation, attentions=False, hidden_states=True)
    if options.level == "sentence":
        pooled = _pool_sentences(outputs.hidden_states, inputs["attention_mask"], special, options.sentence_pooling)
        return pooled, [[0]] * len(in_chunk)
    return _pool_words(outputs.hidden_states, [encoded.word_ids(index) for index in in_chunk], options.word_pooling)


def _one_process_dtype(session: Session, sentences: Sequence[Sentence], options: FeatureOptions, batch_size: int | None) -> type:
    """The dtype one process would store these sentences' features in: it judges on its first batch
    (`_float16_would_lose`), which each rank of torchrun computes again, so that all store what one process would."""
    if options.precision == "float32":
        return np.float32
    first = next(iter(_batches(session, sentences, options.level, batch_size)))
    inputs, special = _pad(session, first.encoded, first.indices)
    gates = session.gate_tensor(session.mask(options.mask))
    with torch.inference_mode():
        pooled, _ = _pooled(session, first.encoded, first.indices, inputs, special, gates, options)
    return np.float32 if pooled.abs().amax() > FLOAT16_MAX or _float16_would_lose(pooled) else np.float16


def _batches(
    session: Session, sentences: Sequence[Sentence], level: str, batch_size: int | None, cancel: threading.Event | None = None
) -> CorpusBatches[Sentence, BatchEncoding]:
    """The sentences' batches, each chunk tokenised in one call (`_encode`)."""
    return CorpusBatches(sentences, lambda chunk: _encode(session, chunk, level), job=JobOptions(batch_size=batch_size, cancel=cancel))


def _check_pairs(sentences: Sequence[Sentence], level: str) -> None:
    if level == "sentence":
        pairs = [sentence.pair is not None for sentence in sentences]
        if any(pairs) and not all(pairs):
            raise InputError("the corpus mixes single sentences and pairs; give one kind of input per corpus")


def _encode(session: Session, sentences: Sequence[Sentence], level: str) -> BatchEncoding:
    """A chunk of sentences tokenised in one call (the fast tokenizer runs it in parallel), unpadded."""
    options: dict[str, Any] = dict(truncation=True, max_length=session.max_length)
    if level == "word":  # single sequences: the token types are all 0, and padding makes the attention mask
        return cast(
            "BatchEncoding",
            session.tokenizer(
                [list(words_of(sentence)) for sentence in sentences],
                is_split_into_words=True,
                return_attention_mask=False,
                return_token_type_ids=False,
                **options,
            ),
        )
    pairs = [sentence.pair for sentence in sentences]
    texts = [sentence.text for sentence in sentences]
    return cast(
        "BatchEncoding", session.tokenizer(texts, pairs if pairs[0] is not None else None, return_special_tokens_mask=True, **options)
    )


def _pad(session: Session, encoded: BatchEncoding, indices: list[int]) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """The model inputs of one batch of encoded sentences, padded, on the session's device, and
    the special-tokens mask (sentence level) or None."""
    batch = pad_batch(session.tokenizer, encoded, indices)
    special = batch.pop("special_tokens_mask", None)
    return {name: upload(tensor, session.device) for name, tensor in batch.items()}, special


def _pool_sentences(
    hidden_states: Sequence[torch.Tensor], attention_mask: torch.Tensor, special: torch.Tensor | None, pooling: str
) -> torch.Tensor:
    """`[B, L+1, D]`: the first token's vectors, or the mean over real non-special tokens."""
    if pooling == "cls":
        return torch.stack([layer[:, 0] for layer in hidden_states], dim=1)
    assert special is not None  # sentence level encodes with the special-tokens mask
    keep = attention_mask.bool() & ~upload(special, attention_mask.device).bool()
    weights = keep.float() / keep.float().sum(-1, keepdim=True).clamp(min=1)
    return torch.stack([torch.einsum("bt,btd->bd", weights, layer.float()) for layer in hidden_states], dim=1)


def _pool_words(
    hidden_states: Sequence[torch.Tensor], word_ids: list[list[int | None]], pooling: str
) -> tuple[torch.Tensor, list[list[int]]]:
    """`[W, L+1, D]` float32 for the words of the whole batch that have tokens, in order, pooled
    from their sub-words, and the indices of those words in each sentence.

    One gather per layer for the batch: no `[B, T, L+1, D]` stack of every token's states.
    A word cut off by truncation, or one the tokenizer turns into nothing, has no row.
    """
    batch, length, dim = hidden_states[0].shape
    pieces = WordPieces.of(word_ids)
    starts = pieces.starts()
    present = [starts.words[here].tolist() for here in starts.per_row(len(word_ids))]
    device = hidden_states[0].device
    taken = starts if pooling == "first" else pieces
    flat = upload(taken.rows * length + taken.positions, device)
    pooled = torch.empty(len(starts.words), len(hidden_states), dim, dtype=torch.float32, device=device)
    if pooling == "first":
        for layer, states in enumerate(hidden_states):
            pooled[:, layer] = states.reshape(batch * length, dim)[flat]
        return pooled, present
    # Mean: a word's pieces are consecutive among the gathered positions; average each run.
    runs = upload(np.diff(np.flatnonzero(np.append(pieces.first, True))), device)  # each word's piece count
    for layer, states in enumerate(hidden_states):
        gathered = states.reshape(batch * length, dim)[flat].float()
        pooled[:, layer] = torch.segment_reduce(gathered, "mean", lengths=runs, axis=0)
    return pooled, present


_writing: dict[Path, threading.Thread] = {}  # cache entries being finished, by path


class _MappedEntry:
    """A cache entry's features file, created beside it and filled in place through a memory map.

    Filling the page cache directly saves copying half a gigabyte into fresh memory and then
    again into the file: page faults and the two copies cost 1-3 s of CPU on 2-core virtual
    machines. The file takes the entry's name only once complete (`_finish`).
    """

    def __init__(self, temporary: Path, array: np.memmap):
        self.temporary, self.array = temporary, array

    @classmethod
    def create(cls, path: Path, shape: tuple[int, ...], dtype: type) -> _MappedEntry | None:
        """None when the cache directory cannot be written (the features are then kept in memory only)."""
        temporary = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = temporary_beside(path.with_suffix(".npy"))
            array = np.lib.format.open_memmap(temporary, mode="w+", dtype=dtype, shape=shape)
            reserve_space(temporary, start=array.offset)  # a full disk is an error here, not a crash when a page is first written
            return cls(temporary, array)
        except (OSError, ValueError):
            if temporary is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary)
            return None

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temporary)


def _finish_in_background(path: Path, features: Features, entry: _MappedEntry | None) -> None:
    """Finish the entry in a thread while the caller goes on (waiting for the disk takes a
    while). The thread is not a daemon: the interpreter waits for it at exit."""
    thread = threading.Thread(target=_finish, args=(path, features, entry), name=f"bertscope cache {path.name}")
    _writing[path] = thread
    thread.start()


def finish_writes() -> None:
    """Wait until every cache entry being written is on disk."""
    while _writing:
        _writing.pop(next(iter(_writing))).join()


def _finish(path: Path, features: Features, entry: _MappedEntry | None) -> None:
    """Put the features file in place (written here when there is no filled map), then the rows'
    sentence and word numbers, whose arrival completes the entry."""
    try:
        if entry is not None:
            entry.array.flush()
            publish(entry.temporary, path.with_suffix(".npy"))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(path.with_suffix(".npy")) as handle:
                np.save(handle, features.X.transpose(1, 0, 2))
        with atomic_write(path.with_suffix(".npz")) as handle:
            np.savez(
                handle,
                sentence_index=features.sentence_index,
                word_index=features.word_index,
                truncated_words=np.array(features.truncated_words),
                numerics=np.array(json.dumps(features.numerics)),
            )
    except (OSError, InputError):
        if entry is not None:
            entry.discard()  # a cache that cannot be written only costs time next run


def _load(path: Path, session: Session | DeferredSession) -> Features | None:
    """The cached features (a read-only memory map), or None when the entry is missing or damaged
    (then it is recomputed).

    bertscope only ever replaces entries whole (a new file renamed over the old), which leaves
    existing maps intact; a file cut short in place while mapped would crash the reader.
    """
    writing = _writing.pop(path, None)
    if writing is not None:
        writing.join()
    try:
        with np.load(path.with_suffix(".npz"), allow_pickle=False) as rows:
            sentence_index, word_index, truncated = rows["sentence_index"], rows["word_index"], int(rows["truncated_words"])
            numerics = json.loads(str(rows["numerics"]))
        by_layer = np.load(path.with_suffix(".npy"), mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):  # json's errors are ValueErrors
        return None
    if by_layer.ndim != 3 or by_layer.shape[0] != session.num_layers + 1 or by_layer.shape[2] != session.hidden_size:
        return None
    if by_layer.dtype not in (np.float16, np.float32) or len(sentence_index) != by_layer.shape[1] or len(word_index) != by_layer.shape[1]:
        return None
    return Features(
        X=by_layer.transpose(1, 0, 2),
        sentence_index=sentence_index,
        word_index=word_index,
        truncated_words=truncated,
        from_cache=True,
        numerics=numerics,
    )


def extract_sharded(
    session: Session | DeferredSession, sentences: Sequence[Sentence], options: FeatureOptions, **extract: Any
) -> Iterator[Progress[Features]]:
    """`extract_features` under torchrun: each rank takes the features of its shard (sentence i when
    i % size == rank) and rank 0 gets every rank's rows, back in input order: the very Features of
    one process (the other ranks get their own shard's, or none when rank 0 found the whole corpus's
    in the cache, which it writes). In a single process, `extract_features` itself.
    """
    if not distributed.world().active:
        yield from extract_features(session, sentences, options, **extract)
        return
    here, cache_dir = distributed.world(), extract.pop("cache_dir", None)
    empty = Features(
        np.zeros((0, session.num_layers + 1, session.hidden_size), np.float16), np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    )
    # The cache holds the whole corpus's entry, as one process names it, so that one process and any number of ranks
    # share it: rank 0 looks, and every rank follows its answer (nodes need not share a disk).
    cached: Features | None = None
    if here.main and cache_dir is not False:
        directory, data = _directory(cache_dir), data_hash(sentences, options.level)
        _, cached = _lookup(session, directory, data, options)
    if distributed.from_main(cached is not None):
        yield Progress("features", len(sentences), len(sentences), cached if here.main else empty)
        return
    part = list(distributed.shard(sentences))
    local: Features | None = None
    if part:
        whole = len(sentences)  # progress in the whole corpus's terms: every rank is about as far as this one
        dtype = _one_process_dtype(session.ready(), sentences, options, extract.get("batch_size"))
        local = yield from relay(
            extract_features(session, part, options, cache_dir=False, dtype=dtype, **extract),
            lambda step: Progress(step.stage, min(step.done * here.size, whole), whole),
        )
        if local is None:
            return  # cancelled
    rows = (
        None
        if local is None
        else (np.ascontiguousarray(local.X), local.sentence_index * here.size + here.rank, local.word_index, local.truncated_words)
    )
    parts = [piece for piece in distributed.gather(rows, to_main=True) if piece is not None]
    if not here.main:
        yield Progress("features", len(part), len(part), local or empty)
        return
    X = np.concatenate([piece[0] for piece in parts])
    sentence_index = np.concatenate([piece[1] for piece in parts])
    word_index = np.concatenate([piece[2] for piece in parts])
    order = np.lexsort((word_index, sentence_index))  # input order: by sentence, then word
    by_layer = np.ascontiguousarray(X[order].transpose(1, 0, 2))
    by_layer.flags.writeable = False
    features = Features(
        X=by_layer.transpose(1, 0, 2),
        sentence_index=sentence_index[order],
        word_index=word_index[order],
        truncated_words=sum(piece[3] for piece in parts),
        numerics=session.ready().numerics,
    )
    if cache_dir is not False:
        # the loaded model's own key, as one process writes it
        _finish_in_background(_entry(session.ready(), directory, data, options), features, None)
    yield Progress("features", len(sentences), len(sentences), features)
