"""What head importance is measured against: the objectives, as losses under head gates.

Every objective turns a batch of sentences and `[R, L, H]` gates into a loss per row (lower
is better) and a metric per row (higher is better), so that one code path serves gradients
through float gates (Michel et al.), exact ablation with many masks batched as rows, and
pruning curves:

- `mlm`: cross-entropy of the MLM head on a seeded 15% of each sentence's tokens, replaced
  by [MASK]; metric: accuracy on them. Models with an MLM head.
- `classification`: cross-entropy of the model's classifier on labelled sentences (a
  SentEval-style file, labels by name or number); metric: accuracy. Sequence classifiers.
- `probe`: cross-entropy of a probe trained by the probing feature on one hidden-state layer
  (0 = embeddings) for one task, measured on the held-out test sentences; metric: accuracy.
  Any encoder, with labelled data or a built-in task.
- `preserve`: how far the final hidden states move, Σ‖h' − h‖² / Σ‖h‖² over a sentence's
  real tokens; metric: mean cosine of h' to h. Any encoder, any text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.importance.results import OBJECTIVES, check_objective_heads, missing_heads
from bertscope.analyses.streaming import CorpusBatches, WordPieces, pad_batch, words_of
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

MLM_RATE = 0.15
WORD_COLUMNS = {"upos": "upos", "xpos": "xpos", "deprel": "deprels"}  # a word task's Sentence attribute


@dataclass
class Batch:
    """Model inputs and targets of some sentences; every tensor has the batch as its first dimension."""

    inputs: dict[str, Tensor]
    target: dict[str, Tensor] = field(default_factory=dict)
    number: int = -1  # its place in a walk over the corpus (the same every walk)

    @property
    def size(self) -> int:
        return int(self.inputs["input_ids"].shape[0])

    def repeated(self, times: int) -> Batch:
        """The batch stacked `times` over (row k·B + b is sentence b), for one mask per copy."""
        if times == 1:
            return self

        def tile(tensor: Tensor) -> Tensor:
            return tensor.repeat(times, *([1] * (tensor.dim() - 1)))

        return Batch({k: tile(v) for k, v in self.inputs.items()}, {k: tile(v) for k, v in self.target.items()}, self.number)


# How an objective turns a padded batch into its Batch: (batch number, its sentences, the chunk's encoding, the
# batch's places in it, the padded tensors).
Finish = Callable[[int, list[Sentence], "BatchEncoding", list[int], dict[str, Tensor]], Batch]


class Batches:
    """An objective's batches, built afresh on every walk over its sentences, a chunk at a time.

    Every measurement (importance, each point of a pruning curve) walks the corpus again,
    so batches are not kept between walks: a walk (streaming.CorpusBatches) holds one chunk's
    token ids and one batch's tensors, whatever the corpus's length. Walks are deterministic,
    so batch `number` k is the same sentences (and, for `mlm`, the same masked tokens) every
    time. `finish(number, sentences, encoded, indices, padded)` turns a padded batch into the
    objective's Batch.
    """

    def __init__(
        self, session: Session, sentences: Sequence[Sentence], batch_size: int | None, finish: Finish, *, words: bool = False
    ) -> None:
        # Under torchrun each rank walks its own shard (sentence i when i % size == rank); the objective's
        # `sentences` stays the whole corpus's count, and the sums are added across ranks (runtime).
        sentences = list(distributed.shard(sentences)) if distributed.world().active else sentences
        self.session, self.sentences, self.finish, self.words = session, sentences, finish, words
        self.corpus = CorpusBatches(sentences, self._encode, job=JobOptions(batch_size=batch_size))

    def _encode(self, chunk: Sequence[Sentence]) -> BatchEncoding:
        tokenizer, limit = self.session.tokenizer, self.session.max_length
        if self.words:
            return cast(
                "BatchEncoding", tokenizer([list(words_of(s)) for s in chunk], is_split_into_words=True, truncation=True, max_length=limit)
            )
        pairs = [s.pair for s in chunk]
        if any(p is not None for p in pairs) and not all(p is not None for p in pairs):
            raise InputError("a batch mixes single sentences and pairs; give one kind of input per corpus")
        texts = [s.text for s in chunk]
        return cast(
            "BatchEncoding",
            tokenizer(texts, pairs if pairs[0] is not None else None, truncation=True, max_length=limit, return_special_tokens_mask=True),
        )

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.corpus:
            padded = pad_batch(self.session.tokenizer, batch.encoded, batch.indices)
            yield self.finish(batch.number, batch.items, batch.encoded, batch.indices, padded)

    def __len__(self) -> int:
        """Sentences walked over (known without encoding them: a count of batches would encode the corpus once more)."""
        return len(self.sentences)

    @property
    def done(self) -> int:
        """Sentences in the batches walked so far."""
        return self.corpus.done


@dataclass
class Scores:
    """Per row: the loss, and the metric as a sum and a count (accuracy = correct / counted)."""

    loss: Tensor  # [R]
    metric_sum: Tensor  # [R]
    metric_count: Tensor  # [R]


class Objective:
    """A loss over prepared batches; subclasses say how to compute it from the model's outputs."""

    name = ""
    metric = ""
    description = ""

    def __init__(self, session: Session, batches: Batches, sentences: int, notes: list[str] | None = None) -> None:
        self.session = session
        self.batches = batches
        self.sentences = sentences
        self.notes = notes or []
        self.source = ""  # where its data came from, as the CLI's JSON names it
        self.texts: list[str] = []  # the sentences measured on, as text (for timing a pruned model)

    def reference(self, batch: Batch) -> Batch:
        """The batch with whatever the loss compares against (the unmasked output, for `preserve`)."""
        return batch

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        raise NotImplementedError

    def gradient_target(self, batch: Batch, gates: Tensor, ablation: Ablation, generator: torch.Generator) -> tuple[Tensor, bool, Scores]:
        """A scalar whose gradient in `[B, L, H]` gates gives each sentence's importance.

        Also says whether to square the gradient (True) or take its magnitude, and gives
        the scores of this pass (the objective at the gates, for the baseline).
        """
        scores = self.scores(batch, gates, ablation)
        return scores.loss.sum(), False, scores


def check_objective(session: Session, name: str) -> str:
    """`name` if this model can serve it, else an InputError listing the objectives that work."""
    has_mlm_head = session.mlm_head is not None
    if name not in OBJECTIVES:
        working = ", ".join(o for o in OBJECTIVES if o not in missing_heads(session.info.architecture, has_mlm_head, session.is_classifier))
        raise InputError(f"unknown objective {name!r}; objectives for this model: {working}")
    check_objective_heads(name, session.info.architecture, has_mlm_head, session.is_classifier)
    return name


def make_objective(
    session: Session,
    name: str,
    sentences: Sequence[Sentence],
    *,
    batch_size: int | None = None,
    seed: int = 0,
    probe_task: str | None = None,
    probe_layer: int | None = None,
    probe_data: Splits | None = None,
) -> Objective:
    """Prepare `name` over these sentences (tokenised, masked and labelled once, deterministically)."""
    check_objective(session, name)
    sentences = list(sentences)
    if name == "probe":
        return ProbeObjective.build(
            session, sentences, batch_size=batch_size, seed=seed, task=probe_task, layer=probe_layer, splits=probe_data
        )
    if not sentences:
        raise InputError("no sentences to measure the objective on; give a corpus with at least one sentence")
    objective: Objective
    if name == "mlm":
        objective = MLMObjective.build(session, sentences, batch_size, seed)
    elif name == "classification":
        objective = ClassificationObjective.build(session, sentences, batch_size)
    else:
        objective = PreserveObjective(session, _batches(session, sentences, batch_size), len(sentences))
    objective.texts = [sentence.text for sentence in sentences]
    return objective


def _batches(
    session: Session,
    sentences: Sequence[Sentence],
    batch_size: int | None,
    targets: Callable[[Sentence], dict[str, int]] | None = None,
    then: Callable[[Batch], Batch] | None = None,
) -> Batches:
    """Length-grouped padded batches, made on each walk; `targets(sentence)` gives a sentence's target
    values, and `then(batch)`, if given, finishes each batch (the mlm objective masks its tokens there)."""

    def finish(number: int, group: list[Sentence], encoded: BatchEncoding, indices: list[int], padded: dict[str, Tensor]) -> Batch:
        special = padded.pop("special_tokens_mask")
        inputs = {k: upload(v, session.device) for k, v in padded.items()}
        target = {"special": upload(special.bool(), session.device)}
        if targets is not None:
            values = [targets(sentence) for sentence in group]
            for key in values[0]:
                target[key] = upload(np.array([value[key] for value in values]), session.device)
        batch = Batch(inputs, target, number)
        return batch if then is None else then(batch)

    return Batches(session, sentences, batch_size, finish)


def sentence_generator(seed: int, token_ids: np.ndarray) -> torch.Generator:
    """A random generator for one sentence, seeded by `seed` and its token ids (not its place in a batch)."""
    digest = hashlib.sha256(f"{seed}:".encode() + np.asarray(token_ids, dtype=np.int64).tobytes()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def _per_row_mean(values: Tensor, rows: Tensor, num_rows: int) -> tuple[Tensor, Tensor]:
    """Sum and count of `values` grouped by `rows` (for token-level losses per sentence)."""
    total = values.new_zeros(num_rows).index_add(0, rows, values)
    count = values.new_zeros(num_rows).index_add(0, rows, torch.ones_like(values))
    return total, count


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

        return cls(session, _batches(session, sentences, batch_size, then=mask_tokens), len(sentences))

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        hidden = self.session.run(batch.inputs, gates=gates, ablation=ablation, hidden_states=False, encoder_only=True).last_hidden_state
        labels = batch.target["labels"]
        rows, positions = torch.nonzero(labels != -100, as_tuple=True)
        head = self.session.mlm_head
        assert head is not None  # check_objective let mlm through only with an MLM head
        logits = head(hidden[rows, positions]).float()  # only the masked tokens: the vocabulary is large
        wanted = labels[rows, positions]
        loss_sum, count = _per_row_mean(F.cross_entropy(logits, wanted, reduction="none"), rows, labels.shape[0])
        correct, _ = _per_row_mean((logits.argmax(-1) == wanted).float(), rows, labels.shape[0])
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
        batches = _batches(session, sentences, batch_size, lambda sentence: {"labels": label_of[id(sentence)]})
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

    def _hidden(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
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
                reference = self._hidden(batch, None, "zero").float()
            held = sum(kept.numel() for kept in cache.values())
            if batch.number >= 0 and held + reference.numel() <= self.CACHE_ELEMENTS:
                cache[batch.number] = reference
        return Batch(batch.inputs, {**batch.target, "reference": reference}, batch.number)

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        batch = self.reference(batch)
        hidden = self._hidden(batch, gates, ablation).float()
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
        hidden = self._hidden(batch, gates, ablation).float()
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

            batches = _batches(session, test, batch_size, target)
        else:
            batches = _word_batches(session, test, task, index, batch_size)
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
        loss_sum, count = _per_row_mean(F.cross_entropy(logits, wanted, reduction="none"), rows, labels.shape[0])
        correct, _ = _per_row_mean((logits.argmax(-1) == wanted).float(), rows, labels.shape[0])
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


def _word_batches(session: Session, sentences: Sequence[Sentence], task: str, index: dict[str, int], batch_size: int | None) -> Batches:
    """Batches of pre-split words with each word's label at its first sub-word (-100 elsewhere)."""
    column = WORD_COLUMNS[task]
    for sentence in sentences:
        if getattr(sentence, column) is None:
            raise InputError(f"{sentence.location}: no {task.upper()} column; this file cannot probe {task}")

    def finish(number: int, group: list[Sentence], encoded: BatchEncoding, indices: list[int], padded: dict[str, Tensor]) -> Batch:
        labels = torch.full(padded["input_ids"].shape, -100, dtype=torch.long)
        starts = WordPieces.of([encoded.word_ids(position_in_chunk) for position_in_chunk in indices]).starts()
        tags = [getattr(group[row], column)[word] for row, word in zip(starts.rows.tolist(), starts.words.tolist(), strict=True)]
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
