"""A seeded, bounded sample of every layer's representations over a corpus, from one or more models.

The corpus streams through the model(s) in length-sorted batches capped by tokens (and by
B·T² where attention maps are kept: core.data.batching);
each batch's rows — tokens, words or sentences — are offered to a reservoir sample
(Vitter's algorithm R) of at most `max_rows`, so every row of the corpus has the same
chance to be kept, the same seed keeps the same rows, and memory is `max_rows × (L+1) × D`
floats however long the corpus. With several models (the same tokenizer), every model sees
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

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from bertscope.core.analyses.geometry_results import UNITS
from bertscope.core.analyses.headstats import is_punctuation
from bertscope.core.data.batching import MAX_SQUARE, plan_batches
from bertscope.core.data.corpus import Sentence, chunked
from bertscope.core.errors import InputError
from bertscope.core.model.allocator import release_freed_memory
from bertscope.core.model.masks import Ablation, HeadMask

LABELS = {"token": ("token",), "word": ("upos", "xpos", "deprel"), "sentence": ("label",)}
DEFAULT_MAX_ROWS = 4000
CHUNK = 1024


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


@dataclass(frozen=True)
class SampleProgress:
    sentences: int
    sample: Sample | None = None  # set on the last item


@dataclass
class Reservoir:
    """Algorithm R over a stream of rows: which incoming rows to keep and in which slot."""

    capacity: int
    seed: int = 0
    seen: int = 0
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise InputError(f"the sample must hold at least one row, not {self.capacity}")
        self.rng = np.random.default_rng(self.seed)

    def offer(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """For `count` new rows: the indices among them to keep and the slots they go to (a later row wins a slot)."""
        positions = np.arange(self.seen, self.seen + count)
        self.seen += count
        slots = positions.copy()
        late = positions >= self.capacity
        if late.any():
            slots[late] = self.rng.integers(0, positions[late] + 1)
        keep = slots < self.capacity
        rows, slots = np.flatnonzero(keep), slots[keep]
        _, last = np.unique(slots[::-1], return_index=True)  # one row per slot: the last offered
        chosen = np.sort(len(slots) - 1 - last)
        return rows[chosen], slots[chosen]


@dataclass
class PreparedBatch:
    inputs: dict[str, torch.Tensor]
    real: torch.Tensor  # [B, T] bool
    special: torch.Tensor  # [B, T] bool
    positions: np.ndarray  # [R] flat b·T + t of each row's token (token and word units)
    labels: dict[str, list[str]]
    texts: list[str]
    truncated: int


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


def prepare(tokenizer, max_length: int, batch: list[Sentence], unit: str, device) -> PreparedBatch:
    """Tokenise a batch and name its rows with their labels."""
    options = dict(padding=True, truncation=True, max_length=max_length, return_tensors="pt", return_special_tokens_mask=True)
    if unit == "word":
        encoded = tokenizer([list(s.words) for s in batch], is_split_into_words=True, **options)
    else:
        pairs = [s.pair for s in batch]
        if any(p is not None for p in pairs) and not all(p is not None for p in pairs):
            raise InputError("the corpus mixes single sentences and pairs; give one kind of input per corpus")
        encoded = tokenizer([s.text for s in batch], pairs if pairs[0] is not None else None, **options)
    special = encoded.pop("special_tokens_mask").bool()
    real = encoded["attention_mask"].bool()
    length = real.shape[1]
    positions: list[int] = []
    labels: dict[str, list[str]] = {name: [] for name in LABELS[unit]}
    texts: list[str] = []
    truncated = 0
    for row, sentence in enumerate(batch):
        word_ids = encoded.word_ids(row)
        ids = encoded["input_ids"][row]
        if unit == "sentence":
            texts.append(sentence.text)
            labels["label"].append(sentence.label if sentence.label is not None else "")
            truncated += _cut_tokens(tokenizer, sentence, int(real[row].sum()), max_length)
            continue
        seen_words: set[int] = set()
        previous = None
        for position in range(length):
            if not real[row, position]:
                break
            word = word_ids[position]
            if unit == "word":
                if word is None or word in seen_words:
                    continue
                seen_words.add(word)
                positions.append(row * length + position)
                texts.append(sentence.words[word])
                for name, column in (("upos", sentence.upos), ("xpos", sentence.xpos), ("deprel", sentence.deprels)):
                    labels[name].append(column[word] if column is not None else "")
                continue
            token = tokenizer.convert_ids_to_tokens(int(ids[position]))
            if special[row, position]:
                kind = "[CLS]" if position == 0 else "[SEP]"
            elif is_punctuation(token):
                kind = "punct"
            else:
                kind = "subword" if word is not None and word == previous else "word"
            previous = word
            positions.append(row * length + position)
            texts.append(token)
            labels["token"].append(kind)
        if unit == "word":
            truncated += len(sentence.words) - len(seen_words)
        else:
            truncated += _cut_tokens(tokenizer, sentence, int(real[row].sum()), max_length)
    inputs = {name: tensor.to(device) for name, tensor in encoded.items()}
    return PreparedBatch(inputs, real.to(device), special.to(device), np.asarray(positions, dtype=np.int64), labels, texts, truncated)


def _cut_tokens(tokenizer, sentence: Sentence, kept: int, max_length: int) -> int:
    """Tokens cut from a sentence to fit the model (tokenised again only when it fills the maximum)."""
    if kept < max_length:
        return 0
    return max(0, len(tokenizer(sentence.text, sentence.pair, add_special_tokens=True)["input_ids"]) - kept)


def _token_lengths(tokenizer, max_length: int, chunk: list[Sentence], unit: str) -> list[int]:
    """Each sentence's token count (what a batch's memory follows), from one tokenizer call for the chunk."""
    if unit == "word":
        encoded = tokenizer([list(s.words) for s in chunk], is_split_into_words=True, truncation=True, max_length=max_length)
    else:
        pairs = [s.pair for s in chunk]
        encoded = tokenizer([s.text for s in chunk], pairs if all(p is not None for p in pairs) else None,
                            truncation=True, max_length=max_length)
    return [len(ids) for ids in encoded["input_ids"]]


def batch_rows(hidden_states: Sequence[torch.Tensor], prepared: PreparedBatch, unit: str, rows: np.ndarray) -> np.ndarray:
    """`[len(rows), L+1, D]` float32: the chosen rows of one batch from every hidden-state layer."""
    if unit == "sentence":
        keep = prepared.real & ~prepared.special
        weights = keep.float() / keep.float().sum(-1, keepdim=True).clamp(min=1)
        chosen = torch.as_tensor(rows, device=weights.device)
        return torch.stack(
            [torch.einsum("bt,btd->bd", weights[chosen], layer[chosen].float()) for layer in hidden_states], dim=1
        ).cpu().numpy()
    batch, length, dim = hidden_states[0].shape
    flat = torch.as_tensor(prepared.positions[rows], device=hidden_states[0].device)
    return torch.stack([layer.reshape(batch * length, dim)[flat].float() for layer in hidden_states], dim=1).cpu().numpy()


def stream_sample(
    sessions: Sequence,
    sentences: Iterable[Sentence],
    *,
    unit: str = "auto",
    max_rows: int = DEFAULT_MAX_ROWS,
    seed: int = 0,
    batch_size: int = 32,
    mask: HeadMask | None = None,
    ablation: Ablation = "zero",
    attentions: bool = False,
    on_batch: Callable[[list, PreparedBatch], None] | None = None,
    cancel: threading.Event | None = None,
) -> Iterator[SampleProgress]:
    """Run the corpus through every session; yield progress per batch, the last item carrying the Sample.

    `mask` applies to the first session only. With `attentions`, `on_batch(outputs, prepared)`
    sees every batch's outputs (one per session) before they are dropped (core.analyses.compare uses it).
    """
    if not sessions:
        raise ValueError("no session to run")
    reservoir = Reservoir(max_rows, seed)
    lead = sessions[0]
    max_length = min(session.max_length for session in sessions)
    gates = lead.gate_tensor(mask)
    stores: list[np.ndarray | None] = [None] * len(sessions)
    labels: dict[str, list[str]] = {}
    texts: list[str] = [""] * max_rows
    read = truncated = 0
    for chunk in chunked(sentences, CHUNK):
        release_freed_memory()  # what the last chunk's batches freed (core.model.allocator)
        if read == 0:
            unit = check_unit(unit, chunk)
            labels = {name: [""] * max_rows for name in LABELS[unit]}
        lengths = _token_lengths(lead.tokenizer, max_length, chunk, unit)
        for indices in plan_batches(lengths, batch_size, max_square=MAX_SQUARE if attentions else None):
            if cancel is not None and cancel.is_set():
                return
            batch = [chunk[index] for index in indices]
            prepared = prepare(lead.tokenizer, max_length, batch, unit, lead.device)
            count = len(batch) if unit == "sentence" else len(prepared.positions)
            rows, slots = reservoir.offer(count)
            outputs = []
            for index, session in enumerate(sessions):
                inputs = prepared.inputs if session.device == lead.device else {k: v.to(session.device) for k, v in prepared.inputs.items()}
                with torch.inference_mode():
                    output = session.run(
                        inputs, gates=gates if index == 0 else None, ablation=ablation, attentions=attentions,
                        hidden_states=True, encoder_only=True,
                    )
                    kept = batch_rows(output.hidden_states, prepared, unit, rows) if len(rows) else None
                if kept is not None:
                    if stores[index] is None:
                        stores[index] = np.empty((max_rows, *kept.shape[1:]), dtype=np.float32)
                    stores[index][slots] = kept
                outputs.append(output)
            if on_batch is not None:
                with torch.inference_mode():
                    on_batch(outputs, prepared)
            del outputs, output, kept  # nothing of a batch outlives it (the next pass would stack on it)
            for slot, row in zip(slots, rows):
                texts[slot] = prepared.texts[row]
                for name in labels:
                    labels[name][slot] = prepared.labels[name][row]
            read += len(batch)
            truncated += prepared.truncated
            del prepared
            yield SampleProgress(read)
    if read == 0:
        raise InputError("no sentences to analyse; the corpus is empty")
    size = min(reservoir.seen, max_rows)
    if size == 0:
        raise InputError(f"no {unit}s to analyse: every sentence came out empty")
    present = {name: tuple(values[:size]) for name, values in labels.items() if any(values[:size])}
    sample = Sample(
        unit=unit, states=tuple(store[:size] for store in stores), labels=present, texts=tuple(texts[:size]),
        sentences=read, seen=reservoir.seen, truncated=truncated,
    )
    yield SampleProgress(read, sample)


