"""The sentence-level objectives: `mlm` (the MLM head on seeded masked tokens), `classification` (a sequence
classifier's labels) and `preserve` (how far the last hidden states move)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bertscope.analyses.importance.objectives.base import (
    MLM_RATE,
    Batch,
    Objective,
    Scores,
    per_row_mean,
    sentence_batches,
    sentence_generator,
)
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence
from bertscope.model.device import upload
from bertscope.model.masks import Ablation

if TYPE_CHECKING:
    from bertscope.model.session import Session


class MLMObjective(Objective):
    name = "mlm"
    metric = "masked-token accuracy"
    description = "MLM loss on a seeded 15% of the tokens, replaced by [MASK]"

    @classmethod
    def build(cls, session: Session, sentences: Sequence[Sentence], batch_size: int | None, seed: int) -> MLMObjective:
        mask_id = session.tokenizer.mask_token_id
        if mask_id is None:
            raise InputError("the tokenizer has no [MASK] token; the mlm objective needs one")

        def mask_tokens(batch: Batch) -> Batch:
            ids = batch.inputs["input_ids"]
            # On the CPU once, not a GPU read a sentence; the draws stacked and the masks chosen with numpy, a batch at once.
            every_ids, every_present = ids.cpu().numpy(), batch.inputs["attention_mask"].bool().cpu().numpy()
            candidates = every_present & ~batch.target["special"].cpu().numpy()
            # Each sentence's masks follow from the seed and its tokens alone: the same on every walk,
            # in any batch, on any rank (a corpus sharded by torchrun masks what one process masks).
            generators = [sentence_generator(seed, row_ids[present]) for row_ids, present in zip(every_ids, every_present, strict=True)]
            draws = torch.stack([torch.rand(ids.shape[1], generator=generator) for generator in generators]).numpy()
            chosen = (draws < MLM_RATE) & candidates
            for row in np.flatnonzero(~chosen.any(axis=1) & candidates.any(axis=1)):  # at least one masked token each
                options = np.flatnonzero(candidates[row])
                chosen[row, options[int(torch.randint(len(options), (1,), generator=generators[row]))]] = True
            chosen = upload(chosen, ids.device)
            batch.target["labels"] = torch.where(chosen, ids, torch.full_like(ids, -100))
            batch.inputs["input_ids"] = torch.where(chosen, torch.full_like(ids, mask_id), ids)
            return batch

        return cls(session, sentence_batches(session, sentences, batch_size, then=mask_tokens), len(sentences))

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        hidden = self.session.run(batch.inputs, gates=gates, ablation=ablation, hidden_states=False, encoder_only=True).last_hidden_state
        labels = batch.target["labels"]
        rows, positions = torch.nonzero(labels != -100, as_tuple=True)
        head = self.session.mlm_head
        assert head is not None  # check_objective let mlm through only with an MLM head
        logits = head(hidden[rows, positions]).float()  # only the masked tokens: the vocabulary is large
        wanted = labels[rows, positions]
        loss_sum, count = per_row_mean(F.cross_entropy(logits, wanted, reduction="none"), rows, labels.shape[0])
        correct, _ = per_row_mean((logits.argmax(-1) == wanted).float(), rows, labels.shape[0])
        return Scores(loss_sum / count.clamp(min=1), correct, count)


class ClassificationObjective(Objective):
    name = "classification"
    metric = "accuracy"
    description = "classification loss on labelled sentences"

    @classmethod
    def build(cls, session: Session, sentences: Sequence[Sentence], batch_size: int | None) -> ClassificationObjective:
        config = session.model.config
        by_name = {str(label): int(index) for label, index in (config.label2id or {}).items()}
        names = ", ".join(f"{index}={label}" for label, index in sorted(by_name.items(), key=lambda item: item[1]))
        labels: list[int] = []
        for sentence in sentences:
            if sentence.label is None:
                raise InputError(
                    f"{sentence.location or 'a sentence'}: no label; the classification objective needs labelled data "
                    "(SentEval TSV: split<TAB>label<TAB>sentence)"
                )
            label = sentence.label.strip()
            if label in by_name:
                labels.append(by_name[label])
            elif label.lstrip("-").isdigit() and config.num_labels is not None and 0 <= int(label) < config.num_labels:
                labels.append(int(label))
            else:
                raise InputError(f"{sentence.location}: label {label!r} is not one of the model's labels ({names})")
        label_of = {id(sentence): label for sentence, label in zip(sentences, labels)}
        batches = sentence_batches(session, sentences, batch_size, lambda sentence: {"labels": label_of[id(sentence)]})
        return cls(session, batches, len(sentences))

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        logits = self.session.run(batch.inputs, gates=gates, ablation=ablation, hidden_states=False).logits.float()
        labels = batch.target["labels"]
        correct = (logits.argmax(-1) == labels).float()
        return Scores(F.cross_entropy(logits, labels, reduction="none"), correct, torch.ones_like(correct))


class PreserveObjective(Objective):
    name = "preserve"
    metric = "cosine to the unmasked output"
    description = "how far the final hidden states move: Σ‖h′−h‖² / Σ‖h‖² per sentence"
    compares_with_unmasked = True

    def _output(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
        """What the distance is measured on: the final hidden states `[B, T, D]`."""
        outputs = self.session.run(batch.inputs, gates=gates, ablation=ablation, hidden_states=False, encoder_only=True)
        return cast(Tensor, outputs.last_hidden_state)

    # The unmasked outputs of the first batches, kept so that repeated measurements (a pruning
    # curve) skip their reference pass: a fixed budget, so memory does not grow with the corpus.
    CACHE_ELEMENTS = 4_000_000  # 16 MB of float32

    def reference(self, batch: Batch) -> Batch:
        if "reference" in batch.target:
            return batch
        cache = self.__dict__.setdefault("_references", {})
        reference = cache.get(batch.number)
        if reference is None:
            with torch.inference_mode():
                reference = self._output(batch, None, "zero").float()
            held = sum(kept.numel() for kept in cache.values())
            if batch.number >= 0 and held + reference.numel() <= self.CACHE_ELEMENTS:
                cache[batch.number] = reference
        return Batch(batch.inputs, {**batch.target, "reference": reference}, batch.number)

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        batch = self.reference(batch)
        hidden = self._output(batch, gates, ablation).float()
        reference = batch.target["reference"]
        real = batch.inputs["attention_mask"].float()
        moved = ((hidden - reference).pow(2).sum(-1) * real).sum(-1)
        size = (reference.pow(2).sum(-1) * real).sum(-1)
        cosine = (F.cosine_similarity(hidden, reference, dim=-1) * real).sum(-1) / real.sum(-1)
        return Scores(moved / size, cosine, torch.ones_like(cosine))

    def gradient_target(self, batch: Batch, gates: Tensor, ablation: Ablation, generator: torch.Generator) -> tuple[Tensor, bool, Scores]:
        """A random projection of the output (Hutchinson): E[(vᵀ ∂h/∂ξ)²] = ‖∂h/∂ξ‖², the first-order movement.

        The distance itself has zero gradient at the unmasked model, so Michel's |∂L/∂ξ|
        would be 0 for every head; this estimates Σ‖∂h/∂ξ_h‖² / Σ‖h‖² per sentence, the
        loss removing head h would cause to first order.
        """
        hidden = self._output(batch, gates, ablation).float()
        real = batch.inputs["attention_mask"].float()[..., None]
        # Per sentence, from the seed and its tokens: any batch, any rank. Read on the CPU once a batch, not a
        # sentence at a time from a GPU (each read of the GPU waits for it); drawn into one buffer, the real
        # tokens row by row, and placed with one assignment a batch, not one a sentence.
        every_ids, every_present = batch.inputs["input_ids"].cpu().numpy(), batch.inputs["attention_mask"].bool().cpu().numpy()
        counts = every_present.sum(axis=1)
        ends = np.cumsum(counts)
        draws = torch.empty((int(ends[-1]), hidden.shape[-1]))
        for ids, present, count, end in zip(every_ids, every_present, counts, ends, strict=True):
            seeded = sentence_generator(generator.initial_seed(), ids[present])
            torch.randn((int(count), hidden.shape[-1]), generator=seeded, out=draws[end - count : end])
        direction = torch.zeros(hidden.shape)
        direction[torch.from_numpy(every_present)] = draws
        direction = direction.to(hidden.device) * real
        size = (hidden.detach().pow(2) * real).sum((1, 2))
        ones = torch.ones_like(size)
        unmoved = Scores(torch.zeros_like(size), ones, ones)  # the pass at gates 1 is its own reference
        return ((direction * hidden).sum((1, 2)) / size.sqrt()).sum(), True, unmoved
