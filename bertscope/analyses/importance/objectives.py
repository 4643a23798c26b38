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
- `token-classification`: cross-entropy of a token classifier's labels (a CoNLL-2003 or
  CoNLL-U file, labels by the model's id2label names) at each word's first word piece, as
  transformers' token-classification examples label them, averaged over the corpus's labelled
  pieces; metric: entity-level F1 as conlleval and seqeval define it for IOB1, IOB2 and BIOES
  labels (analyses.importance.tagging), token accuracy for other label sets.
- `similarity`: a sentence-embedding model on pairs with gold scores; each sentence pooled as the
  model's sentence-transformers files say (model.pooling), the loss the squared error between
  the pair's cosine and its score scaled to [0, 1] (sentence-transformers' CosineSimilarityLoss);
  metric: Spearman's rho between cosines and scores over the corpus.
- `embedding`: how far each sentence's pooled embedding turns, 1 − cos(e', e); metric: the
  mean cosine. The sentence-level `preserve`, for any encoder and any text.
- `qa`: an extractive question-answering model on SQuAD questions, each question and its
  context in the windows transformers' run_qa makes of a long context (384 tokens or the model's
  limit, overlapping by 128 or a third of that); the loss (CE(start) + CE(end)) / 2 of the first
  gold answer's tokens found from the offsets ([CLS] where a window lacks the answer, or the
  question has none), averaged over the windows; metric: SQuAD's F1 of the best span across a
  question's windows (analyses.importance.squad), its exact match in the notes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.importance.results import OBJECTIVES, Measurement, check_objective_heads, missing_heads
from bertscope.analyses.importance.squad import best_scores
from bertscope.analyses.importance.tagging import f1_counts, scheme_of
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
    """Per row: the loss, and the metric as a sum and a count (accuracy = correct / counted; F1 = 2·TP / entities
    predicted and gold); for a metric over the whole corpus (a rank correlation), its (prediction, gold) pairs."""

    loss: Tensor  # [R]
    metric_sum: Tensor  # [R]
    metric_count: Tensor  # [R]
    paired: Tensor | None = None  # [P, 2]


class Tally:
    """The scores of a walk over the corpus added up (a rank metric's pairs kept), then across torchrun's ranks."""

    def __init__(self, objective: Objective) -> None:
        self.objective = objective
        self.loss = self.metric_sum = self.metric_count = 0.0
        self.paired: list[np.ndarray] = []

    def add(self, scores: Scores) -> None:
        sums = torch.stack([part.detach().sum().double() for part in (scores.loss, scores.metric_sum, scores.metric_count)])
        loss, metric_sum, metric_count = sums.tolist()  # one read of the device, not three
        self.loss, self.metric_sum, self.metric_count = self.loss + loss, self.metric_sum + metric_sum, self.metric_count + metric_count
        if scores.paired is not None:
            self.paired.append(scores.paired.detach().double().cpu().numpy())

    def measurement(self, **arrays: Any) -> tuple[Measurement, dict[str, Any]]:
        """The objective over the whole corpus, and `arrays` summed across the ranks with it."""
        summed = distributed.sum_across({"loss": self.loss, "metric_sum": self.metric_sum, "metric_count": self.metric_count, **arrays})
        paired = None
        if self.objective.ranked:  # every rank's pairs (a collective: every rank takes part)
            paired = np.concatenate([part for parts in distributed.gather(self.paired) for part in parts] or [np.zeros((0, 2))])
        metric = self.objective.corpus_metric(summed["metric_sum"], summed["metric_count"], paired)
        return Measurement(summed["loss"] / max(self.objective.sentences, 1), metric), summed


class Objective:
    """A loss over prepared batches; subclasses say how to compute it from the model's outputs."""

    name = ""
    metric = ""
    description = ""
    compares_with_unmasked = False  # the loss is a distance from the unmasked model's output (preserve, embedding)
    ranked = False  # the metric is a rank correlation over the whole corpus (Scores.paired), not a sum over rows

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

    def losses(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
        """The loss per row alone (an ablation sweep's masked rows, whose metric nobody reads)."""
        return self.scores(batch, gates, ablation).loss

    def corpus_metric(self, metric_sum: float, metric_count: float, paired: np.ndarray | None) -> float:
        """The metric over the whole corpus from the summed rows (or, for a `ranked` one, every pair)."""
        return metric_sum / metric_count if metric_count else float("nan")

    def measured_notes(self) -> list[str]:
        """What the last measurement found beside the metric, for the result's notes (qa: SQuAD's exact match)."""
        return []

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
    elif name == "token-classification":
        objective = TokenClassificationObjective.build(session, sentences, batch_size)
    elif name == "qa":
        objective = QuestionAnsweringObjective.build(session, sentences, batch_size)
    elif name == "similarity":
        objective = SimilarityObjective.build(session, sentences, batch_size)
    elif name == "embedding":
        notes = [f"sentences embedded by {session.pooling.source}"]
        objective = EmbeddingObjective(session, _batches(session, sentences, batch_size), len(sentences), notes)
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
        summed, _ = _per_row_mean(F.cross_entropy(picked, wanted, reduction="none"), rows, labels.shape[0])
        return summed * self.scale, rows, wanted, picked.argmax(-1)

    def losses(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
        return self._loss_and_guesses(batch, gates, ablation)[0]

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        loss, rows, wanted, guessed = self._loss_and_guesses(batch, gates, ablation)
        count = loss.shape[0]
        if self.scheme is None:
            correct, counted = _per_row_mean((guessed == wanted).float(), rows, count)
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


QA_MAX_LENGTH = 384  # transformers' run_qa: max_seq_length, doc_stride, max_answer_length
QA_STRIDE = 128
QA_MAX_ANSWER_TOKENS = 30


class QuestionBatches(Batches):
    """Questions and their contexts as transformers' run_qa encodes them: the question first, the context second,
    truncated alone (`only_second`) into windows overlapping by `stride` tokens; a row per window, its question
    found by the encoding's `overflow_to_sample_mapping`."""

    def __init__(
        self, session: Session, sentences: Sequence[Sentence], batch_size: int | None, finish: Finish, *, length: int, stride: int
    ) -> None:
        super().__init__(session, sentences, batch_size, finish)
        self.length, self.stride = length, stride
        self.windows = 0  # rows of a whole walk (counted at build): what the progress counts

    def _encode(self, chunk: Sequence[Sentence]) -> BatchEncoding:
        try:
            return self._windows(chunk)
        except Exception as error:  # the tokenizers library's truncation errors are plain Exceptions
            culprit = next((s for s in chunk if not self._fits(s)), chunk[0])
            raise InputError(
                f"{culprit.location}: the question and a {self.stride}-token overlap leave no room for its context within "
                f"{self.length} tokens ({error}); shorten the question"
            ) from None

    def _windows(self, chunk: Sequence[Sentence]) -> BatchEncoding:
        return cast(
            "BatchEncoding",
            self.session.tokenizer(
                [s.text for s in chunk],
                [s.pair or "" for s in chunk],
                truncation="only_second",
                max_length=self.length,
                stride=self.stride,
                return_overflowing_tokens=True,
                return_offsets_mapping=True,
            ),
        )

    def _fits(self, sentence: Sentence) -> bool:
        """Whether one question encodes alone (which of a chunk the tokenizer refused)."""
        try:
            self._windows([sentence])
        except Exception:
            return False
        return True

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.corpus:
            inputs = {key: batch.encoded[key] for key in ("input_ids", "token_type_ids", "attention_mask") if key in batch.encoded}
            padded = pad_batch(self.session.tokenizer, inputs, batch.indices)
            yield self.finish(batch.number, batch.chunk, batch.encoded, batch.indices, padded)

    def __len__(self) -> int:
        return self.windows or len(self.sentences)


def answer_tokens(
    offsets: Sequence[tuple[int, int]], sequence_ids: Sequence[int | None], answer: tuple[str, int] | None
) -> tuple[int, int]:
    """The (start, end) tokens of `answer` (its text and first character) in one window, as transformers' run_qa
    finds them from the offsets; (0, 0), [CLS], where the window's context does not hold the whole answer or there
    is none (SQuAD 2.0's unanswerable questions)."""
    context = [position for position, sequence in enumerate(sequence_ids) if sequence == 1]
    if answer is None or not context:
        return 0, 0
    first_char, last_char = answer[1], answer[1] + len(answer[0])
    first, last = context[0], context[-1]
    if not (offsets[first][0] <= first_char and offsets[last][1] >= last_char):
        return 0, 0
    start = first
    while start <= last and offsets[start][0] <= first_char:
        start += 1
    end = last
    while end >= first and offsets[end][1] >= last_char:
        end -= 1
    return start - 1, end + 1


class QuestionAnsweringObjective(Objective):
    name = "qa"
    metric = "SQuAD F1"
    description = "(CE(start) + CE(end)) / 2 of the answer span, averaged over the context windows"
    ranked = True  # the best span is chosen across a question's windows: scored over the whole corpus (Scores.paired)

    def __init__(self, session: Session, batches: Batches, sentences: int, notes: list[str], questions: list[Sentence]) -> None:
        super().__init__(session, batches, sentences, notes)
        self.questions = questions  # by the number in Scores.paired's first column
        self.with_no_answer = any(not question.answers for question in questions)  # SQuAD 2.0: "" may be predicted
        self.scale = 1.0  # questions / windows: a row's loss times this averages over the corpus's windows
        self.exact_match = float("nan")  # of the last measurement

    @classmethod
    def build(cls, session: Session, sentences: Sequence[Sentence], batch_size: int | None) -> QuestionAnsweringObjective:
        if not session.tokenizer.is_fast:
            raise InputError("the qa objective needs a fast tokenizer (its character offsets place the answers)")
        for sentence in sentences:
            if sentence.answers is None or sentence.pair is None:
                raise InputError(
                    f"{sentence.location or 'a sentence'}: not a question with a context; the qa objective needs SQuAD JSON "
                    "(data, paragraphs, context, qas)"
                )
        number_of = {id(sentence): number for number, sentence in enumerate(sentences)}
        length = min(session.max_length, QA_MAX_LENGTH)
        stride = min(QA_STRIDE, length // 3)  # run_qa's 128 of 384, and the same share of a shorter model limit

        def finish(number: int, chunk: list[Sentence], encoded: BatchEncoding, indices: list[int], padded: dict[str, Tensor]) -> Batch:
            width = padded["input_ids"].shape[1]
            positions = np.zeros((len(indices), 3), dtype=np.int64)  # start, end, question number
            context = np.zeros((len(indices), width), dtype=bool)
            offsets = np.zeros((len(indices), width, 2), dtype=np.int64)
            for row, window in enumerate(indices):
                question = chunk[encoded["overflow_to_sample_mapping"][window]]
                sequence_ids, places = encoded.sequence_ids(window), encoded["offset_mapping"][window]
                answer = question.answers[0] if question.answers else None  # run_qa trains on the first gold answer
                positions[row, :2] = answer_tokens(places, sequence_ids, answer)
                positions[row, 2] = number_of[id(question)]
                context[row, : len(sequence_ids)] = [sequence == 1 for sequence in sequence_ids]
                offsets[row, : len(places)] = places
            target = {
                "start": upload(positions[:, 0], session.device),
                "end": upload(positions[:, 1], session.device),
                "question": upload(positions[:, 2], session.device),
                "context": upload(context, session.device),
                "offsets": torch.from_numpy(offsets),  # read on the CPU, where the answers' text is
            }
            return Batch({k: upload(v, session.device) for k, v in padded.items()}, target, number)

        batches = QuestionBatches(session, sentences, batch_size, finish, length=length, stride=stride)
        windows = int(
            distributed.sum_across({"windows": sum(len(encoded["input_ids"]) for _, _, encoded in batches.corpus.chunks())})["windows"]
        )
        batches.windows = windows
        notes = [
            f"question first, context second, in windows of {length} tokens overlapping by {stride} (transformers' run_qa); "
            f"{windows:,} windows for {len(sentences):,} questions; a window without the answer targets [CLS], as an "
            "unanswerable question does",
            f"metric: SQuAD's F1 of the best span (start ≤ end in the context, at most {QA_MAX_ANSWER_TOKENS} tokens) across "
            "a question's windows, best over its gold answers"
            + ("; no answer predicted where [CLS] outscores every span (SQuAD 2.0)" if any(not s.answers for s in sentences) else ""),
        ]
        objective = cls(session, batches, len(sentences), notes, list(sentences))
        objective.scale = len(sentences) / max(windows, 1)
        return objective

    def _logits(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> tuple[Tensor, Tensor, Tensor]:
        """Each row's loss, and its start and end logits with padding ruled out (no candidate, no share of the loss)."""
        outputs = self.session.run(batch.inputs, gates=gates, ablation=ablation, hidden_states=False)
        padding = ~batch.inputs["attention_mask"].bool()
        start = outputs.start_logits.float().masked_fill(padding, float("-inf"))
        end = outputs.end_logits.float().masked_fill(padding, float("-inf"))
        target = batch.target
        loss = (F.cross_entropy(start, target["start"], reduction="none") + F.cross_entropy(end, target["end"], reduction="none")) / 2
        return loss * self.scale, start, end

    def losses(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
        return self._logits(batch, gates, ablation)[0]

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        loss, start, end = self._logits(batch, gates, ablation)
        with torch.no_grad():
            inside = batch.target["context"]
            spans = start.masked_fill(~inside, float("-inf"))[:, :, None] + end.masked_fill(~inside, float("-inf"))[:, None, :]
            places = torch.arange(spans.shape[1], device=spans.device)
            length = places[None, :] - places[:, None]  # end − start
            spans = spans.masked_fill((length < 0) | (length >= QA_MAX_ANSWER_TOKENS), float("-inf"))
            best, flat = spans.flatten(1).max(-1)
            null = start[:, 0] + end[:, 0]
            read = (
                torch.stack(
                    [
                        batch.target["question"].double(),
                        best.double(),
                        (flat // spans.shape[1]).double(),
                        (flat % spans.shape[1]).double(),
                        null.double(),
                    ]
                )
                .cpu()
                .numpy()
            )  # one read of the device
        offsets = batch.target["offsets"].numpy()
        rows = np.zeros((loss.shape[0], 5))  # question, best span's score, its exact match, its F1, [CLS]'s score
        for row, (question, score, first, last, cls_score) in enumerate(read.T):
            sentence = self.questions[int(question)]
            context = sentence.pair or ""
            answer = context[offsets[row, int(first), 0] : offsets[row, int(last), 1]] if np.isfinite(score) else ""
            exact, overlap = best_scores(answer, [text for text, _ in sentence.answers or ()])
            rows[row] = (question, score, exact, overlap, cls_score)
        zeros = torch.zeros_like(loss)
        return Scores(loss, zeros, zeros, paired=torch.as_tensor(rows))

    def corpus_metric(self, metric_sum: float, metric_count: float, paired: np.ndarray | None) -> float:
        """F1 over the questions, each scored at its best span across its windows (and EM kept as `exact_match`)."""
        if paired is None or not len(paired):
            self.exact_match = float("nan")
            return float("nan")
        order = np.lexsort((-paired[:, 1], paired[:, 0]))  # by question, its best-scoring window first
        ordered = paired[order]
        firsts = np.flatnonzero(np.r_[True, ordered[1:, 0] != ordered[:-1, 0]])
        exact, overlap = ordered[firsts, 2].copy(), ordered[firsts, 3].copy()
        if self.with_no_answer:  # run_qa's null answer: [CLS]'s least score across the windows above the best span
            least_null = np.minimum.reduceat(ordered[:, 4], firsts)
            empty = least_null > ordered[firsts, 1]
            unanswerable = np.array([not self.questions[int(q)].answers for q in ordered[firsts, 0]])
            exact[empty] = overlap[empty] = unanswerable[empty].astype(float)
        self.exact_match = float(exact.mean())
        return float(overlap.mean())

    def measured_notes(self) -> list[str]:
        return [f"exact match {self.exact_match:.4f} beside F1 (SQuAD's EM, at the baseline)"]


class PairBatches(Batches):
    """Sentence pairs for a bi-encoder: the two sentences of pair i encoded apart, rows 2i and 2i + 1 of a batch."""

    def __init__(self, session: Session, sentences: Sequence[Sentence], batch_size: int | None, finish: Finish) -> None:
        super().__init__(session, sentences, batch_size, finish)
        # a pair's padded cost: two rows of the longer side's length
        self.corpus = CorpusBatches(self.sentences, self._encode, lengths=_pair_lengths, job=JobOptions(batch_size=batch_size))

    def _encode(self, chunk: Sequence[Sentence]) -> BatchEncoding:
        texts = [s.text for s in chunk] + [s.pair or "" for s in chunk]  # the first sentences, then the second ones
        return cast("BatchEncoding", self.session.tokenizer(texts, truncation=True, max_length=self.session.max_length))

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.corpus:
            size = len(batch.encoded["input_ids"]) // 2
            rows = [row for index in batch.indices for row in (index, size + index)]
            padded = pad_batch(self.session.tokenizer, batch.encoded, rows)
            yield self.finish(batch.number, batch.items, batch.encoded, batch.indices, padded)


def _pair_lengths(encoded: BatchEncoding) -> list[int]:
    ids = encoded["input_ids"]
    size = len(ids) // 2
    return [2 * max(len(ids[index]), len(ids[size + index])) for index in range(size)]


def _pooled(session: Session, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
    """Each row's sentence embedding `[R, D]`, pooled as the model says (model.pooling)."""
    hidden = session.run(batch.inputs, gates=gates, ablation=ablation, hidden_states=False, encoder_only=True).last_hidden_state
    return session.pooling(hidden, batch.inputs["attention_mask"])


class SimilarityObjective(Objective):
    name = "similarity"
    metric = "Spearman's rho"
    description = "squared error between each pair's cosine and its gold score scaled to [0, 1]"
    ranked = True

    @classmethod
    def build(cls, session: Session, sentences: Sequence[Sentence], batch_size: int | None) -> SimilarityObjective:
        scores = []
        for sentence in sentences:
            score = _float(sentence.label) if sentence.pair is not None else None
            if score is None:
                raise InputError(
                    f"{sentence.location or 'a sentence'}: not a pair with a score; the similarity objective needs a TSV of "
                    "sentence1, sentence2 and score"
                )
            scores.append(score)
        scaled, how = _scaled(scores)
        score_of = {id(sentence): value for sentence, value in zip(sentences, scaled, strict=True)}

        def finish(number: int, group: list[Sentence], encoded: BatchEncoding, indices: list[int], padded: dict[str, Tensor]) -> Batch:
            target = {"score": upload(np.array([score_of[id(sentence)] for sentence in group], dtype=np.float32), session.device)}
            return Batch({k: upload(v, session.device) for k, v in padded.items()}, target, number)

        notes = [f"sentences embedded by {session.pooling.source}; gold scores {how}"]
        return cls(session, PairBatches(session, sentences, batch_size, finish), len(sentences), notes)

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        if gates is not None and gates.dim() == 3:  # a pair's two rows run under its first row's gates: one gate per pair
            gates = gates[0::2].repeat_interleave(2, dim=0)
        embedded = _pooled(self.session, batch, gates, ablation)
        cosine = F.cosine_similarity(embedded[0::2], embedded[1::2], dim=-1)
        score = batch.target["score"]
        loss = torch.zeros(embedded.shape[0], device=cosine.device).index_copy(
            0, torch.arange(0, embedded.shape[0], 2, device=cosine.device), (cosine - score).pow(2)
        )  # a pair's loss on its first row, its second row's 0
        zeros = torch.zeros_like(loss)
        return Scores(loss, zeros, zeros, paired=torch.stack([cosine, score], dim=1))

    def corpus_metric(self, metric_sum: float, metric_count: float, paired: np.ndarray | None) -> float:
        from scipy.stats import spearmanr

        if paired is None or len(paired) < 2 or np.ptp(paired[:, 0]) == 0 or np.ptp(paired[:, 1]) == 0:
            return float("nan")  # no ranking to correlate
        return float(spearmanr(paired[:, 0], paired[:, 1]).statistic)


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and np.isfinite(value) else None


def _scaled(scores: list[float]) -> tuple[list[float], str]:
    """Gold scores on [0, 1], and how: as they are, STS's 0-5 divided by 5, or the file's range stretched to [0, 1]."""
    low, high = min(scores), max(scores)
    if low >= 0 and high <= 1:
        return scores, "on [0, 1], taken as they are"
    if low >= 0 and high <= 5:
        return [score / 5 for score in scores], "on STS's 0-5 scale, divided by 5 (as sentence-transformers' STS examples)"
    if high == low:
        raise InputError(f"every gold score is {low:g}; similarity needs scores that differ", setting="data")
    return [(score - low) / (high - low) for score in scores], f"scaled to [0, 1] by the file's range, {low:g} to {high:g}"


class EmbeddingObjective(PreserveObjective):
    name = "embedding"
    metric = "cosine to the unmasked embedding"
    description = "how far each sentence's pooled embedding turns: 1 − cos(e′, e)"

    def _output(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Tensor:
        """What the distance is measured on: the sentence embeddings `[B, D]`."""
        return _pooled(self.session, batch, gates, ablation)

    def scores(self, batch: Batch, gates: Tensor | None, ablation: Ablation) -> Scores:
        batch = self.reference(batch)
        moved, reference = F.normalize(self._output(batch, gates, ablation).float(), dim=-1), F.normalize(batch.target["reference"], dim=-1)
        cosine = (moved * reference).sum(-1)
        return Scores((moved - reference).pow(2).sum(-1) / 2, cosine, torch.ones_like(cosine))  # ‖ê′ − ê‖²/2 = 1 − cos, never below 0

    def gradient_target(self, batch: Batch, gates: Tensor, ablation: Ablation, generator: torch.Generator) -> tuple[Tensor, bool, Scores]:
        """A random projection (Hutchinson) across the embedding: E[(vᵀ P ∂e/∂ξ)²] / 2‖e‖², the first-order loss.

        1 − cos(e + δ, e) ≈ ‖P δ‖² / 2‖e‖², P the projection off e (moving along e turns nothing);
        its gradient is 0 at the unmasked model, so the movement is estimated as `preserve`'s is.
        """
        embedded = self._output(batch, gates, ablation).float()
        ids, present = batch.inputs["input_ids"].cpu().numpy(), batch.inputs["attention_mask"].bool().cpu().numpy()
        draws = torch.stack(
            [
                torch.randn(embedded.shape[-1], generator=sentence_generator(generator.initial_seed(), row[real]))
                for row, real in zip(ids, present)
            ]
        ).to(embedded.device)
        unit = F.normalize(embedded.detach(), dim=-1)
        across = draws - (draws * unit).sum(-1, keepdim=True) * unit
        size = embedded.detach().norm(dim=-1)
        ones = torch.ones_like(size)
        unmoved = Scores(torch.zeros_like(size), ones, ones)  # the pass at gates 1 is its own reference
        return ((across * embedded).sum(-1) / (size * 2**0.5)).sum(), True, unmoved


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
