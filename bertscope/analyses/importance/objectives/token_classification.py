"""`token-classification`: a token classifier's labels at each word's first word piece; entity F1 or token accuracy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.importance.objectives.base import Batch, Batches, Objective, Scores, per_row_mean
from bertscope.analyses.importance.objectives.probe import _word_batches
from bertscope.analyses.importance.tagging import f1_counts, scheme_of
from bertscope.analyses.streaming import WordPieces
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence
from bertscope.model.masks import Ablation

if TYPE_CHECKING:
    from bertscope.model.session import Session


class TokenClassificationObjective(Objective):
    name = "token-classification"
    metric = "token accuracy"
    description = "cross-entropy of the token classifier's labels at each word's first word piece"

    def __init__(self, session: Session, batches: Batches, sentences: int, notes: list[str], *, scheme: str | None) -> None:
        super().__init__(session, batches, sentences, notes)
        self.scheme = scheme  # IOB1, IOB2 or BIOES: entity F1; None: token accuracy
        self.metric = f"entity F1 ({scheme})" if scheme else "token accuracy"
        self.names = session.label_names
        self.scale = 1.0  # sentences / labelled pieces: a row's summed cross-entropy times this averages over the corpus's pieces

    @classmethod
    def build(cls, session: Session, sentences: Sequence[Sentence], batch_size: int | None) -> TokenClassificationObjective:
        names = session.label_names
        index = {name: number for number, name in enumerate(names)}
        for sentence in sentences:
            if sentence.tags is None:
                raise InputError(
                    f"{sentence.location or 'a sentence'}: no labels; the token-classification objective needs tagged words "
                    "(CoNLL-2003: a token and its label a line; or CoNLL-U, --label-column upos, xpos or deprel)"
                )
            unknown = next((tag for tag in sentence.tags if tag not in index), None)
            if unknown is not None:
                raise InputError(f"{sentence.location}: label {unknown!r} is not one of the model's labels ({', '.join(names)})")
        scheme = scheme_of(names, (sentence.tags for sentence in sentences if sentence.tags is not None))
        batches = _word_batches(session, sentences, lambda sentence: sentence.tags or (), index, batch_size)
        how = f"entity-level F1 over {scheme} tags, as conlleval and seqeval score them" if scheme else "token accuracy (not entity tags)"
        notes = [f"labels at each word's first word piece (transformers' convention); metric: {how}"]
        objective = cls(session, batches, len(sentences), notes, scheme=scheme)
        pieces = int(distributed.sum_across({"pieces": _labelled_pieces(batches)})["pieces"])
        objective.scale = len(sentences) / max(pieces, 1)
        return objective

    def _loss_and_guesses(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Each row's loss, and every labelled piece's row, gold label and guess."""
        logits = self.session.run(batch.inputs, gates=gates, ablation=ablation, hidden_states=False).logits.float()
        labels = batch.target["labels"]
        rows, positions = torch.nonzero(labels != -100, as_tuple=True)
        picked, wanted = logits[rows, positions], labels[rows, positions]
        summed, _ = per_row_mean(F.cross_entropy(picked, wanted, reduction="none"), rows, labels.shape[0])
        return summed * self.scale, rows, wanted, picked.argmax(-1)

    def losses(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
        return self._loss_and_guesses(batch, gates, ablation)[0]

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        loss, rows, wanted, guessed = self._loss_and_guesses(batch, gates, ablation)
        count = loss.shape[0]
        if self.scheme is None:
            correct, counted = per_row_mean((guessed == wanted).float(), rows, count)
            return Scores(loss, correct, counted)
        read = torch.stack([rows, wanted, guessed]).cpu().numpy()  # one read of the device a batch
        found = np.zeros((2, count))  # per row: 2·TP, and the entities predicted and gold
        bounds = np.searchsorted(read[0], np.arange(count + 1))  # nonzero gives the rows in order
        for row in range(count):
            gold, guess = read[1:, bounds[row] : bounds[row + 1]]
            found[:, row] = f1_counts([self.names[i] for i in gold], [self.names[i] for i in guess])
        hits, entities = torch.as_tensor(found, device=loss.device)
        return Scores(loss, hits, entities)


def _labelled_pieces(batches: Batches) -> int:
    """Words whose first piece is in the encoding (not cut off by the length limit): counted over one walk of the tokens."""
    count = 0
    for _, chunk, encoded in batches.corpus.chunks():
        count += len(WordPieces.of([encoded.word_ids(row) for row in range(len(chunk))]).starts().rows)
    return count
