"""Hidden state L of a corpus, token by token: what a sparse autoencoder is trained on and read on.

A corpus streams through the model in the corpus loop's batches (`streaming.CorpusBatches`); a hook on the
module whose output is hidden state L (`Family.hidden_state_module`, as erasure hooks it, so on every family
the state the model reports at that index) takes that layer's output. A job that needs nothing above L stops
the pass there (`stop=True`): the layers above cost nothing. The same hook can put another state in its place
for the layers above (`splice`), which is how a reconstruction's cost to the model is measured.

Which tokens: the real tokens of each sentence without the special ones ([CLS], [SEP], <s>, </s>: the
tokenizer's own special-tokens mask), or with them (`include_special`); never padding. A CoNLL-U corpus is
tokenised from its words (each token knows its word: UPOS, relation, first or inner piece); any other, from
its text. Which sentences: a seeded, hashed share of them is held out (`held_out`), the same sentences whatever
the batching, so training never sees the sentences its figures are measured on.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.geometry.representations import encode_chunk, row_keys
from bertscope.analyses.streaming import CorpusBatch, CorpusBatches, WordPieces, pad_batch
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence, chunked
from bertscope.model.device import upload

if TYPE_CHECKING:
    from transformers import BatchEncoding

    from bertscope.model.session import Session

Numbered = tuple[int, Sentence]  # a sentence and its number in the corpus


def check_layer(session: Session, layer: int) -> None:
    """A hidden-state index of this model: 0 (the embeddings) to its number of layers."""
    if not 0 <= layer <= session.num_layers:
        raise InputError(f"layer {layer} is out of range: hidden-state layers are 0 (embeddings) to {session.num_layers}", setting="layer")


def held_out(seed: int, numbers: np.ndarray, share: float) -> np.ndarray:
    """Which of the sentences `numbers` (their places in the corpus) are held out: a seeded hash of each one's number
    below `share` of the hash's range, so about `share` of any corpus, the same ones on every walk."""
    keys = row_keys(seed, numbers.astype(np.int64), np.zeros(len(numbers), dtype=np.int64))
    return keys < np.uint64(int(share * float(1 << 63)))


def numbered(sentences: Iterable[Sentence], seed: int, share: float, *, held: bool | None) -> Iterator[Numbered]:
    """The corpus's sentences with their numbers: every one (`held=None`), only the held-out ones (True), or only the
    others (False); decided a chunk at a time."""
    for chunk in chunked(enumerate(sentences), 1024):
        if held is None:
            yield from chunk
            continue
        chosen = held_out(seed, np.array([number for number, _ in chunk]), share)
        yield from (item for item, keep in zip(chunk, chosen, strict=True) if keep == held)


@dataclass(frozen=True, eq=False)
class TokenBatch:
    """One batch's chosen tokens: their hidden state and where each one is.

    `states` `[n, D]` float32 where the model runs; `flat` each token's place in the batch's `[B·T]` positions
    (for a splice); `rows` its row in the batch, `positions` its place in its sentence's tokens, `sentences` its
    sentence's number in the corpus; `words`/`first` (CoNLL-U) its word's number in its sentence and whether it is
    the word's first piece (-1 and False for a special token)."""

    batch: CorpusBatch[Numbered, Any]
    inputs: dict[str, Tensor]
    states: Tensor
    flat: Tensor
    rows: np.ndarray
    positions: np.ndarray
    sentences: np.ndarray
    words: np.ndarray | None
    first: np.ndarray | None
    output: Any = None  # the model's output of the pass, where it ran to the end

    @property
    def items(self) -> list[Numbered]:
        return self.batch.items

    def tokens(self, tokenizer: Any) -> list[list[str]]:
        """Each sentence's tokens as the tokenizer writes them (its real tokens, specials included)."""
        ids, real = self.inputs["input_ids"].cpu().numpy(), self.inputs["attention_mask"].bool().cpu().numpy()
        return [tokenizer.convert_ids_to_tokens(row[mask].tolist()) for row, mask in zip(ids, real, strict=True)]


class _Stop(Exception):
    """Raised by the hook once hidden state L is taken, where nothing above it is needed."""


class LayerTap:
    """A hook on the module whose output is hidden state `layer`: keeps that output (`taken`), replaces it by
    `splice(output)` where one is set, and with `stop` ends the pass there. Only the thread that made it is
    tapped (the explorer's passes in other threads run as they are)."""

    def __init__(self, session: Session, layer: int) -> None:
        check_layer(session, layer)
        self.module = session.family.hidden_state_module(session.model, layer)
        self.owner = threading.get_ident()
        self.taken: Tensor | None = None
        self.splice: Callable[[Tensor], Tensor] | None = None
        self.stop = False

    def __call__(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        if threading.get_ident() != self.owner:
            return None
        state = output if isinstance(output, Tensor) else output[0]  # a layer that returns a tuple (DeBERTa, MPNet)
        self.taken = state
        if self.stop:
            raise _Stop
        if self.splice is None:
            return None
        replaced = self.splice(state)
        return replaced if isinstance(output, Tensor) else (replaced, *output[1:])

    @contextlib.contextmanager
    def attached(self) -> Iterator[LayerTap]:
        handle = self.module.register_forward_hook(self, prepend=True)
        try:
            yield self
        finally:
            handle.remove()

    def run(self, session: Session, inputs: dict[str, Tensor], *, stop: bool, conditions: Conditions | None = None) -> Any:
        """One pass of the batch (attached), under `conditions`' head mask where given: hidden state L into `taken`;
        the encoder's output unless `stop`."""
        self.stop, self.taken = stop, None
        gates, ablation = (None, "zero") if conditions is None else (session.gate_tensor(conditions.masked), conditions.ablation)
        try:
            return session.run(inputs, gates=gates, ablation=ablation, hidden_states=False, encoder_only=True)
        except _Stop:
            return None


def token_batches(
    session: Session,
    sentences: Iterable[Numbered],
    layer: int,
    *,
    include_special: bool = False,
    stop: bool = True,
    conditions: Conditions | None = None,
    job: JobOptions = JobOptions(),
) -> Iterator[TokenBatch]:
    """The corpus's batches with hidden state `layer` of their chosen tokens, in the corpus loop's order.

    With `stop` the pass ends at `layer`; without, the batch carries the encoder's output of the whole pass too.
    `conditions`: the head mask the passes run under (None: the model as it is).
    The states are plain tensors (no gradient, not inference tensors): a trainer can take them as they are."""
    tap = LayerTap(session, layer)
    items = iter(sentences)
    first = next(items, None)
    if first is None:
        return
    words = first[1].words is not None
    max_length = session.max_length

    def encode(chunk: list[Numbered]) -> BatchEncoding:
        return encode_chunk(session.tokenizer, max_length, [sentence for _, sentence in chunk], "word" if words else "token")

    # no grad mode or hook spans a yield: the caller runs between batches, and trains
    for batch in CorpusBatches(itertools.chain([first], items), encode, job=job):
        padded = pad_batch(session.tokenizer, batch.encoded, batch.indices)
        special = padded.pop("special_tokens_mask").bool()
        real = padded["attention_mask"].bool()
        chosen = real if include_special else real & ~special
        inputs = {name: upload(tensor, session.device) for name, tensor in padded.items()}
        with torch.no_grad(), tap.attached():
            output = tap.run(session, inputs, stop=stop, conditions=conditions)
        state, tap.taken = tap.taken, None
        assert state is not None, "the hook sees every pass"
        rows, columns = (part.numpy() for part in torch.nonzero(chosen, as_tuple=True))
        flat = upload(rows * chosen.shape[1] + columns, session.device)
        states = state.reshape(-1, state.shape[-1])[flat].float()
        del state
        numbers = np.array([number for number, _ in batch.items], dtype=np.int64)
        word_numbers = first_piece = None
        if words:
            word_numbers, first_piece = _word_of_each(batch, chosen, real)
        positions = _positions(real, rows, columns)
        yield TokenBatch(batch, inputs, states, flat, rows, positions, numbers[rows], word_numbers, first_piece, output)


def _positions(real: Tensor, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Each chosen token's place among its sentence's real tokens (padding is on the right or the left)."""
    before: np.ndarray = (~real).long().cumsum(1).numpy()  # left padding: pads before a token shift it
    return np.asarray(columns - before[rows, columns])


def _word_of_each(batch: CorpusBatch[Numbered, Any], chosen: Tensor, real: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The chosen tokens' word numbers and first-piece flags (-1 and False where a token has no word: specials)."""
    word_ids = [batch.encoded.word_ids(index) for index in batch.indices]
    pieces = WordPieces.of(word_ids)
    words = np.full(chosen.shape, -1, dtype=np.int64)
    first = np.zeros(chosen.shape, dtype=bool)
    # word ids are listed over each row's unpadded tokens; place them at the row's real positions
    places = np.flatnonzero(real.numpy().reshape(-1))
    row_starts = np.concatenate([[0], np.cumsum(real.sum(1).numpy())[:-1]])
    flat = places[row_starts[pieces.rows] + pieces.positions]
    words.reshape(-1)[flat] = pieces.words
    first.reshape(-1)[flat] = pieces.first
    mask = chosen.numpy()
    return words[mask], first[mask]
