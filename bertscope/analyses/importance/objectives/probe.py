"""`probe`: a probe trained on one hidden-state layer for one task, measured on the held-out sentences."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.importance.objectives.base import WORD_COLUMNS, Batch, Batches, Objective, Scores, per_row_mean, sentence_batches
from bertscope.analyses.streaming import WordPieces
from bertscope.base.errors import InputError
from bertscope.base.progress import outcome
from bertscope.data.corpus import Sentence
from bertscope.model.allocator import fitting_heap
from bertscope.model.device import upload
from bertscope.model.masks import Ablation

if TYPE_CHECKING:
    from transformers import BatchEncoding

    from bertscope.analyses.probing.features import Features
    from bertscope.analyses.probing.probes import TrainedProbes
    from bertscope.data.splits import Splits
    from bertscope.model.session import Session


class ProbeObjective(Objective):
    name = "probe"
    metric = "probe accuracy"
    description = "loss of a probe trained on one layer for one task"

    def __init__(
        self,
        session: Session,
        batches: Batches,
        sentences: int,
        notes: list[str],
        *,
        task: str,
        layer: int,
        level: str,
        weights: dict[str, Tensor],
        probe_accuracy: float,
    ) -> None:
        super().__init__(session, batches, sentences, notes)
        self.task, self.layer, self.level = task, layer, level
        self.weights = weights  # torch tensors of the chosen layer's probe
        self.probe_accuracy = probe_accuracy
        self.description = f"loss of a linear probe for {task} on hidden-state layer {layer}"

    @classmethod
    def build(
        cls,
        session: Session,
        sentences: Sequence[Sentence],
        *,
        batch_size: int | None,
        seed: int,
        task: str | None,
        layer: int | None,
        splits: Splits | None,
    ) -> ProbeObjective:
        from bertscope.data.probing_tasks import STRUCTURAL_TASKS, TASKS, WORD_TASKS, generate
        from bertscope.data.splits import make_splits

        if task is None:
            raise InputError(
                "the probe objective needs a task: a built-in task, a SentEval file's labels, or upos/xpos/deprel", setting="task"
            )
        if task in STRUCTURAL_TASKS:
            raise InputError(f"task {task!r} is a structural probe; the probe objective takes classification tasks")
        layer = session.num_layers if layer is None else layer
        if not 0 <= layer <= session.num_layers:
            raise InputError(f"probe layer {layer} is out of range: hidden-state layers are 0 (embeddings) to {session.num_layers}")
        if not sentences:
            if task not in TASKS:
                raise InputError(f"unknown built-in task {task!r}; give a data file, or one of: {', '.join(TASKS)}", setting="task")
            sentences = generate(task, train=600, dev=150, test=250, seed=seed)
        level = "word" if task in WORD_TASKS else "sentence"
        split = make_splits(sentences, None, None, seed=seed) if splits is None else splits
        trained: TrainedProbes | None = None
        classes: list[str] | None = None
        if distributed.is_main():  # under torchrun rank 0 alone trains the probe, on every sentence; the others receive it
            trained, classes = _train_probe(session, split, task, level, layer, batch_size, seed)
        trained, classes = distributed.from_main((trained, classes))
        assert trained is not None and classes is not None  # rank 0's, on every rank
        weights = {name: torch.as_tensor(getattr(trained, name)[0], device=session.device) for name in ("mean", "std", "weights", "bias")}
        index = {label: i for i, label in enumerate(classes)}
        test = split.test
        notes = list(split.notes)
        if level == "sentence":
            scored = [s for s in test if s.label in index]
            if len(scored) < len(test):
                notes.append(f"{len(test) - len(scored)} test sentences with labels left out of training were left out")
            test = scored

            def target(sentence: Sentence) -> dict[str, int]:
                assert sentence.label is not None  # scored: its label is one of the classes
                return {"labels": index[sentence.label]}

            batches = sentence_batches(session, test, batch_size, target)
        else:
            column = WORD_COLUMNS[task]
            for sentence in test:
                if getattr(sentence, column) is None:
                    raise InputError(f"{sentence.location}: no {task.upper()} column; this file cannot probe {task}")
            batches = _word_batches(session, test, lambda sentence: getattr(sentence, column), index, batch_size)
            skipped = _unscored_words(batches, task, index)
            if skipped:
                notes.append(f"{skipped} test words with labels left out of training (unseen or too rare there) were left out")
        dev_accuracy = float(trained.chosen_dev_accuracy[0])  # at the strength the fit chose
        objective = cls(
            session, batches, len(test), notes, task=task, layer=layer, level=level, weights=weights, probe_accuracy=dev_accuracy
        )
        objective.texts = [sentence.text for sentence in test]
        return objective

    def _logits(self, vectors: Tensor) -> Tensor:
        w = self.weights
        return ((vectors.float() - w["mean"]) / w["std"]) @ w["weights"] + w["bias"]

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        outputs = self.session.run(batch.inputs, gates=gates, ablation=ablation, hidden_states=True, encoder_only=True)
        hidden = outputs.hidden_states[self.layer]
        labels = batch.target["labels"]
        if self.level == "sentence":
            logits = self._logits(hidden[:, 0])  # [CLS], as the probing feature's default sentence pooling
            correct = (logits.argmax(-1) == labels).float()
            return Scores(F.cross_entropy(logits, labels, reduction="none"), correct, torch.ones_like(correct))
        rows, positions = torch.nonzero(labels != -100, as_tuple=True)
        logits = self._logits(hidden[rows, positions])  # each word's first sub-word, as the feature's default pooling
        wanted = labels[rows, positions]
        loss_sum, count = per_row_mean(F.cross_entropy(logits, wanted, reduction="none"), rows, labels.shape[0])
        correct, _ = per_row_mean((logits.argmax(-1) == wanted).float(), rows, labels.shape[0])
        return Scores(loss_sum / count.clamp(min=1), correct, count)


def _train_probe(
    session: Session, split: Splits, task: str, level: str, layer: int, batch_size: int | None, seed: int
) -> tuple[TrainedProbes, list[str]]:
    """The probe objective's linear probe at hidden-state `layer`, trained on `split`'s train and dev sentences, and its classes."""
    from bertscope.analyses.probing import probes
    from bertscope.analyses.probing.features import FeatureOptions, extract_features
    from bertscope.analyses.probing.run import encode_labels, word_labels

    options = FeatureOptions(level=level)
    features = {}
    for name in ("train", "dev"):
        steps = extract_features(session, getattr(split, name), options, cache_dir=False, batch_size=batch_size)
        features[name] = outcome(steps, f"features of the {name} split")

    def labels_of(name: str, rows: Features | None = None) -> list[str]:
        group = getattr(split, name)
        if level == "word":
            assert rows is not None  # a word's label is read at its feature row
            return word_labels(group, rows, task)
        missing = [s.location for s in group if s.label is None]
        if missing:
            raise InputError(f"{missing[0]}: no label; a sentence-level probe needs a SentEval file (split, label, sentence)")
        return [s.label for s in group]

    test_labels = [] if level == "word" else labels_of("test")
    encoded = encode_labels(labels_of("train", features["train"]), labels_of("dev", features["dev"]), test_labels)
    with fitting_heap():
        trained = probes.train_probes(
            encoded.rows("train", features["train"].X[:, layer : layer + 1]),
            encoded.train,
            encoded.rows("dev", features["dev"].X[:, layer : layer + 1]),
            encoded.dev,
            num_classes=len(encoded.classes),
            kind="linear",
            device=str(session.device),
            seed=seed,
        )
    return trained, encoded.classes


def _word_batches(
    session: Session,
    sentences: Sequence[Sentence],
    tags_of: Callable[[Sentence], Sequence[str]],
    index: dict[str, int],
    batch_size: int | None,
) -> Batches:
    """Batches of pre-split words with each word's label (`tags_of(sentence)[word]`) at its first sub-word (-100 elsewhere)."""

    def finish(number: int, group: list[Sentence], encoded: BatchEncoding, indices: list[int], padded: dict[str, Tensor]) -> Batch:
        labels = torch.full(padded["input_ids"].shape, -100, dtype=torch.long)
        starts = WordPieces.of([encoded.word_ids(position_in_chunk) for position_in_chunk in indices]).starts()
        tags = [tags_of(group[row])[word] for row, word in zip(starts.rows.tolist(), starts.words.tolist(), strict=True)]
        values = torch.tensor([index.get(tag, -100) for tag in tags], dtype=torch.long)  # -100: a label the probe never saw
        labels[torch.from_numpy(starts.rows), torch.from_numpy(starts.positions)] = values
        return Batch({k: upload(v, session.device) for k, v in padded.items()}, {"labels": upload(labels, session.device)}, number)

    return Batches(session, sentences, batch_size, finish, words=True)


def _unscored_words(batches: Batches, task: str, index: dict[str, int]) -> int:
    """Words whose label the probe never saw in training (counted over one walk of the tokens, no pass)."""
    column = WORD_COLUMNS[task]
    count = 0
    for _, chunk, encoded in batches.corpus.chunks():
        starts = WordPieces.of([encoded.word_ids(row) for row in range(len(chunk))]).starts()
        words = zip(starts.rows.tolist(), starts.words.tolist(), strict=True)
        count += sum(getattr(chunk[row], column)[word] not in index for row, word in words)
    return count
