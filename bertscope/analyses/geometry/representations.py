"""A seeded, bounded sample of every layer's representations over a corpus, from one or more models.

The corpus streams through the model(s) in length-sorted batches capped by tokens (and by
B·T² where attention maps are kept: data.batching);
each batch's rows — tokens, words or sentences — are offered to a seeded bottom-k sample
of at most `max_rows` (`SmallestKeys`): every row gets a key hashed from the seed, its
sentence's number in the corpus and its place in the sentence, and the rows of the
smallest keys are kept. So every row has the same chance to be kept, the same seed keeps
the same rows whatever the batching or the number of torchrun ranks (each rank keeps its
own shard's smallest, rank 0 the smallest of those), and memory is `max_rows × (L+1) × D`
floats however long the corpus. The kept rows come in corpus order. With several models (the same tokenizer), every model sees
the same batches and the same rows are kept for all of them, so their layers can be
compared row for row.

Units:
- `token`: every real token, special tokens included; labelled by kind: [CLS], [SEP],
  punct, word (a word's first piece) or subword (a later piece);
- `word`: CoNLL-U words, each the vector of its first sub-word token (as the probes'
  default `first` pooling); labelled by UPOS, XPOS and DEPREL;
- `sentence`: the mean of a sentence's real non-special tokens; labelled by its SentEval label.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
import torch

from bertscope import runtime as distributed
from bertscope.analyses.attention.headstats import is_punctuation
from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.geometry.results import UNITS
from bertscope.analyses.streaming import CorpusBatches, WordPieces, pad_batch, words_of
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress
from bertscope.data.batching import MAX_SQUARE
from bertscope.data.corpus import Sentence
from bertscope.model.device import upload
from bertscope.model.masks import Ablation

if TYPE_CHECKING:
    from transformers import BatchEncoding, PreTrainedTokenizerBase

    from bertscope.model.session import Session

LABELS = {"token": ("token",), "word": ("upos", "xpos", "deprel"), "sentence": ("label",)}
DEFAULT_MAX_ROWS = 4000


@dataclass(frozen=True, eq=False)
class Sample:
    """The kept rows: per model `[n, L+1, D]` float32 (hidden-state indexing, 0 = embeddings)."""

    unit: str
    states: tuple[np.ndarray, ...]
    labels: dict[str, tuple[str, ...]]  # label scheme -> one label per kept row (schemes the data has)
    texts: tuple[str, ...]  # the token, word or sentence each row stands for
    sentences: int  # sentences read
    seen: int  # rows in the whole corpus, before sampling
    truncated: int  # tokens (token and sentence units) or words cut to fit the model's maximum length

    @property
    def size(self) -> int:
        return len(self.texts)


EMPTY = np.uint64(np.iinfo(np.uint64).max)  # the key of an empty slot: above every row's key
_ORDINAL_BITS = np.uint64(20)  # a row's place in its sentence takes the low bits of its identity


def _mix(values: np.ndarray) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser on uint64 arrays (wrapping arithmetic): nearby inputs, unrelated outputs."""
    values = values + np.uint64(0x9E3779B97F4A7C15)
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return cast(npt.NDArray[np.uint64], values ^ (values >> np.uint64(31)))


def row_keys(seed: int, sentences: np.ndarray, ordinals: np.ndarray) -> np.ndarray:
    """Each row's sampling key: a seeded hash of (its sentence's number in the corpus, its place in the sentence)."""
    identity = (sentences.astype(np.uint64) << _ORDINAL_BITS) | ordinals.astype(np.uint64)
    salt = _mix(np.array([seed % (1 << 64)], dtype=np.uint64))
    return _mix(identity ^ salt) >> np.uint64(1)  # below EMPTY


@dataclass
class SmallestKeys:
    """Bottom-k sampling: of all rows offered, keep the `capacity` whose keys are smallest.

    With keys from `row_keys` the kept rows are a uniform sample without replacement that
    depends on the seed and the corpus only, not on the order rows arrive in.
    """

    capacity: int
    seen: int = 0
    keys: np.ndarray = field(init=False)
    origins: np.ndarray = field(init=False)  # [capacity, 3]: each slot's (sentence number, place in it, content: `_content`)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise InputError(f"the sample must hold at least one row, not {self.capacity}")
        self.keys = np.full(self.capacity, EMPTY, dtype=np.uint64)
        self.origins = np.zeros((self.capacity, 3), dtype=np.int64)

    def offer(self, keys: np.ndarray, origins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For new rows' keys: the indices among them to keep and the slots they take (from rows now dropped, or empty)."""
        self.seen += len(keys)
        rows = np.flatnonzero(keys < self.keys.max())
        if not len(rows):
            return rows, rows
        pool = np.concatenate([self.keys, keys[rows]])
        chosen = np.zeros(len(pool), dtype=bool)
        chosen[np.argpartition(pool, self.capacity - 1)[: self.capacity]] = True
        admitted = rows[chosen[self.capacity :]]
        slots = np.flatnonzero(~chosen[: self.capacity])  # as many as admitted: the capacity stays full
        self.keys[slots], self.origins[slots] = keys[admitted], origins[admitted]
        return admitted, slots

    @property
    def filled(self) -> np.ndarray:
        """The slots that hold a row."""
        return np.flatnonzero(self.keys != EMPTY)


@dataclass
class PreparedBatch:
    inputs: dict[str, torch.Tensor]
    real: torch.Tensor  # [B, T] bool
    special: torch.Tensor  # [B, T] bool
    positions: np.ndarray  # [R] flat b·T + t of each row's token (token and word units)
    owners: np.ndarray  # [R] the batch row (sentence) each row belongs to
    ordinals: np.ndarray  # [R] each row's place among its sentence's rows
    labels: dict[str, list[str]]
    texts: list[str]
    truncated: int
    tokens: int  # real tokens in the batch, counted on the host


def check_unit(unit: str, sentences: Sequence[Sentence]) -> str:
    """The unit for these sentences (`auto`: words for CoNLL-U, sentences for SentEval, else tokens)."""
    first = sentences[0] if sentences else None
    if unit == "auto":
        if first is not None and first.words is not None:
            return "word"
        return "sentence" if first is not None and first.label is not None else "token"
    if unit not in UNITS:
        raise InputError(f"unknown unit {unit!r}; use auto, {', '.join(UNITS)}")
    if unit == "word" and first is not None and first.words is None:
        raise InputError("word units need sentences split into words: give a CoNLL-U file, or use token units", setting="unit")
    return unit


def encode_chunk(tokenizer: PreTrainedTokenizerBase, max_length: int, chunk: list[Sentence], unit: str) -> BatchEncoding:
    """A chunk's sentences tokenised in one call, unpadded (its batches are padded from it: `prepare`)."""
    options: dict[str, Any] = dict(truncation=True, max_length=max_length, return_special_tokens_mask=True)
    if unit == "word":
        return cast("BatchEncoding", tokenizer([list(words_of(s)) for s in chunk], is_split_into_words=True, **options))
    pairs = [s.pair for s in chunk]
    if any(p is not None for p in pairs) and not all(p is not None for p in pairs):
        raise InputError("the corpus mixes single sentences and pairs; give one kind of input per corpus")
    return cast("BatchEncoding", tokenizer([s.text for s in chunk], pairs if pairs[0] is not None else None, **options))


def prepare(
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    batch: list[Sentence],
    unit: str,
    device: torch.device,
    chunk: BatchEncoding,
    indices: list[int],
) -> PreparedBatch:
    """Pad a batch (its sentences' `indices` in the chunk's encoding) and name its rows with their labels."""
    encoded = pad_batch(tokenizer, chunk, indices)
    special = encoded.pop("special_tokens_mask").bool()
    real = encoded["attention_mask"].bool()
    length = real.shape[1]
    positions: list[int] = []
    owners: list[int] = []
    ordinals: list[int] = []
    labels: dict[str, list[str]] = {name: [] for name in LABELS[unit]}
    texts: list[str] = []
    truncated = 0
    real_lengths = real.sum(-1).tolist()  # padding is on the right: a row's real tokens come first
    if unit == "token":  # lists, not a tensor element per token: this loop sees every token of the corpus
        ids, specials = encoded["input_ids"].tolist(), special.tolist()
    if unit == "word":  # each word's first token, found for the batch at once: the loop below sees each sentence once
        starts = WordPieces.of([chunk.word_ids(index) for index in indices]).starts()
        in_row = starts.per_row(len(batch))
    for row, sentence in enumerate(batch):
        if unit == "sentence":
            owners.append(row)
            ordinals.append(0)
            texts.append(sentence.text)
            labels["label"].append(sentence.label if sentence.label is not None else "")
            truncated += _cut_tokens(tokenizer, sentence, real_lengths[row], max_length)
            continue
        first_row = len(positions)
        kept = real_lengths[row]
        if unit == "word":
            words, found = words_of(sentence), starts.words[in_row[row]].tolist()
            positions.extend((row * length + starts.positions[in_row[row]]).tolist())
            prefix = not found or found[-1] == len(found) - 1  # the first len(found) words, unless one came out of no token
            for name, column in (("text", words), ("upos", sentence.upos), ("xpos", sentence.xpos), ("deprel", sentence.deprels)):
                if column is None:
                    values: Sequence[str] = [""] * len(found)
                else:
                    values = column[: len(found)] if prefix else [column[word] for word in found]
                (texts if name == "text" else labels[name]).extend(values)
            truncated += len(words) - len(found)
        else:
            word_ids = chunk.word_ids(indices[row])
            tokens = tokenizer.convert_ids_to_tokens(ids[row][:kept])
            previous = None
            for position, (word, token) in enumerate(zip(word_ids[:kept], tokens)):
                if specials[row][position]:
                    kind = "[CLS]" if position == 0 else "[SEP]"
                elif is_punctuation(token):
                    kind = "punct"
                else:
                    kind = "subword" if word is not None and word == previous else "word"
                previous = word
                positions.append(row * length + position)
                texts.append(token)
                labels["token"].append(kind)
            truncated += _cut_tokens(tokenizer, sentence, kept, max_length)
        owners.extend([row] * (len(positions) - first_row))
        ordinals.extend(range(len(positions) - first_row))
    inputs = {name: upload(tensor, device) for name, tensor in encoded.items()}
    return PreparedBatch(
        inputs,
        upload(real, device),
        upload(special, device),
        np.asarray(positions, dtype=np.int64),
        np.asarray(owners, dtype=np.int64),
        np.asarray(ordinals, dtype=np.int64),
        labels,
        texts,
        truncated,
        sum(real_lengths),
    )


def _cut_tokens(tokenizer: PreTrainedTokenizerBase, sentence: Sentence, kept: int, max_length: int) -> int:
    """Tokens cut from a sentence to fit the model (tokenised again only when it fills the maximum)."""
    if kept < max_length:
        return 0
    return max(0, len(tokenizer(sentence.text, sentence.pair, add_special_tokens=True)["input_ids"]) - kept)


def batch_rows(hidden_states: Sequence[torch.Tensor], prepared: PreparedBatch, unit: str, rows: np.ndarray) -> torch.Tensor:
    """`[len(rows), L+1, D]` float32 where the model ran: the chosen rows of one batch from every hidden-state layer."""
    if unit == "sentence":
        keep = prepared.real & ~prepared.special
        weights = keep.float() / keep.float().sum(-1, keepdim=True).clamp(min=1)
        chosen = upload(rows, weights.device)
        return torch.stack([torch.einsum("bt,btd->bd", weights[chosen], layer[chosen].float()) for layer in hidden_states], dim=1)
    batch, length, dim = hidden_states[0].shape
    flat = upload(prepared.positions[rows], hidden_states[0].device)
    return torch.stack([layer.reshape(batch * length, dim)[flat].float() for layer in hidden_states], dim=1)


def stream_sample(
    sessions: Sequence[Session],
    sentences: Iterable[Sentence],
    *,
    unit: str = "auto",
    max_rows: int = DEFAULT_MAX_ROWS,
    attentions: bool = False,
    on_batch: Callable[[list[Any], PreparedBatch], None] | None = None,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[Progress[Sample]]:
    """Run the corpus through every session; yield progress per batch, the last item carrying the Sample of rows `job.seed`
    chose.

    `conditions` (None: the model as it is) apply to the first session only. With `attentions`, `on_batch(outputs, prepared)`
    sees every batch's outputs (one per session) before they are dropped (analyses.geometry.compare uses it).
    Under torchrun each rank runs its shard of the corpus; the Sample's counts are the whole
    corpus's on every rank, its rows are on rank 0 only (the others' Sample has none).
    """
    if not sessions:
        raise ValueError("no session to run")
    sampler = SmallestKeys(max_rows)
    lead = sessions[0]
    max_length = min(session.max_length for session in sessions)
    gates = lead.gate_tensor(None if conditions is None else conditions.masked)
    ablation: Ablation = "zero" if conditions is None else conditions.ablation
    # Per session, once a batch has rows to keep: the sample where the model runs, read to the host once at the end.
    # A read a batch would make the host wait for each batch's forward before it prepares the next (on a GPU).
    stores: dict[int, torch.Tensor] = {}
    labels: dict[str, list[str]] = {}
    texts: list[str] = [""] * max_rows
    truncated = 0
    numbered = iter(distributed.shard(enumerate(sentences)))  # (number in the corpus, sentence): this rank's share
    first = next(numbered, None)
    if first is not None:  # the unit follows from the first sentence
        unit = check_unit(unit, [first[1]])
        labels = {name: [""] * max_rows for name in LABELS[unit]}
        numbered = itertools.chain([first], numbered)
    batches = CorpusBatches(
        numbered,
        lambda chunk: encode_chunk(lead.tokenizer, max_length, [sentence for _, sentence in chunk], unit),
        job=job,
        max_square=MAX_SQUARE if attentions else None,
    )
    for numbered_batch in batches:
        numbers = np.array([number for number, _ in numbered_batch.items], dtype=np.int64)
        batch = [sentence for _, sentence in numbered_batch.items]
        prepared = prepare(lead.tokenizer, max_length, batch, unit, lead.device, numbered_batch.encoded, numbered_batch.indices)
        contents = np.array([_content(sentence, unit) for sentence in batch], dtype=np.int64)
        origins = np.stack([numbers[prepared.owners], prepared.ordinals, contents[prepared.owners]], axis=1)
        rows, slots = sampler.offer(row_keys(job.seed, origins[:, 0], origins[:, 1]), origins)
        outputs = []
        for index, session in enumerate(sessions):
            inputs = prepared.inputs if session.device == lead.device else {k: v.to(session.device) for k, v in prepared.inputs.items()}
            with torch.inference_mode():
                output = session.run(
                    inputs,
                    gates=gates if index == 0 else None,
                    ablation=ablation,
                    attentions=attentions,
                    hidden_states=True,
                    encoder_only=True,
                )
                kept = batch_rows(output.hidden_states, prepared, unit, rows) if len(rows) else None
            if kept is not None:
                if index not in stores:
                    stores[index] = torch.empty((max_rows, *kept.shape[1:]), dtype=torch.float32, device=kept.device)
                stores[index][upload(slots, kept.device)] = kept
            outputs.append(output)
        if on_batch is not None:
            with torch.inference_mode():
                on_batch(outputs, prepared)
        del outputs, output, kept  # nothing of a batch outlives it (the next pass would stack on it)
        for slot, row in zip(slots, rows):
            texts[slot] = prepared.texts[row]
            for name in labels:
                labels[name][slot] = prepared.labels[name][row]
        truncated += prepared.truncated
        del prepared
        yield Progress("representations", numbered_batch.done)
    if batches.cancelled:
        return
    read = batches.done
    counts = distributed.sum_across({"read": read, "seen": sampler.seen, "truncated": truncated})  # the whole corpus's
    if counts["read"] == 0:
        raise InputError("no sentences to analyse; the corpus is empty")
    if counts["seen"] == 0:
        raise InputError(f"no {unit if unit != 'auto' else 'row'}s to analyse: every sentence came out empty")
    filled = sampler.filled
    every_key = np.concatenate(distributed.gather(sampler.keys[filled]))  # 8 bytes a kept row, from every rank
    if len(every_key) > max_rows:  # send rank 0 only the rows that make the whole corpus's sample
        filled = filled[sampler.keys[filled] <= np.partition(every_key, max_rows - 1)[max_rows - 1]]
    mine = _Kept(
        unit if read else "",
        sampler.keys[filled],
        sampler.origins[filled],
        tuple(stores[index].cpu().numpy()[filled] for index in range(len(sessions))) if len(filled) else (),
        {name: [values[slot] for slot in filled] for name, values in labels.items()},
        [texts[slot] for slot in filled],
    )
    del stores, labels, texts
    parts = distributed.gather(mine, to_main=True)  # one process: [mine]; under torchrun every rank's on rank 0
    whole = Sample(unit=unit, states=(), labels={}, texts=(), sentences=counts["read"], seen=counts["seen"], truncated=counts["truncated"])
    yield Progress("representations", read, result=_smallest_of(parts, max_rows, len(sessions), whole))


def _content(sentence: Sentence, unit: str) -> int:
    """What a sentence's rows depend on, hashed (the same in every process, unlike `hash`)."""
    words = sentence.words if unit == "word" else None
    digest = hashlib.blake2b(repr((sentence.text, sentence.pair, words)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


@dataclass(frozen=True, eq=False)
class _Kept:
    """One rank's kept rows with their keys, before the ranks' samples are merged."""

    unit: str  # "" for a rank that read no sentence
    keys: np.ndarray
    origins: np.ndarray  # [n, 3] (sentence number, place in the sentence, content)
    states: tuple[np.ndarray, ...]  # per model [n, L+1, D]; () when none was kept
    labels: dict[str, list[str]]
    texts: list[str]


def _smallest_of(parts: list[_Kept], max_rows: int, models: int, whole: Sample) -> Sample:
    """`whole` (the corpus's counts) with the rows of the `max_rows` smallest keys over every part, in corpus order.

    No part holds a row on ranks other than 0: `whole` as it is.
    """
    parts = [part for part in parts if len(part.keys)]
    if not parts:
        return whole
    keys = np.concatenate([part.keys for part in parts])
    origins = np.concatenate([part.origins for part in parts])
    chosen = np.argsort(keys, kind="stable")[:max_rows]
    chosen = chosen[np.lexsort((origins[chosen, 1], origins[chosen, 0]))]  # by sentence, then place in it
    # Rows of the same input (an equal sentence, the same place) are equal in exact arithmetic; the forward's float
    # rounding depends on the batch a sentence ran in (its padding, its rank), which would leave them near-duplicates
    # that TwoNN and the neighbours count as distinct points. Each such row takes the first one's vector.
    _, first, same = np.unique(origins[chosen, 1:], axis=0, return_index=True, return_inverse=True)
    chosen_first = chosen[first[same.reshape(-1)]]
    states = tuple(np.concatenate([part.states[model] for part in parts])[chosen_first] for model in range(models))
    texts = [text for part in parts for text in part.texts]
    names = parts[0].labels
    labels = {name: tuple(label for part in parts for label in part.labels[name]) for name in names}
    present = {name: tuple(values[index] for index in chosen) for name, values in labels.items()}
    present = {name: values for name, values in present.items() if any(values)}
    return replace(whole, unit=parts[0].unit, states=states, labels=present, texts=tuple(texts[index] for index in chosen))
