"""`qa`: an extractive question-answering model on SQuAD questions, in run_qa's windows; SQuAD's F1 of the best span."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bertscope import runtime as distributed
from bertscope.analyses.importance.objectives.base import Batch, Batches, Finish, Objective, Scores
from bertscope.analyses.importance.squad import best_scores
from bertscope.analyses.streaming import pad_batch
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence
from bertscope.model.device import upload
from bertscope.model.masks import Ablation
from bertscope.model.task_heads import span_scores
from bertscope.model.task_results import MAX_ANSWER_TOKENS

if TYPE_CHECKING:
    from transformers import BatchEncoding

    from bertscope.model.session import Session


QA_MAX_LENGTH = 384  # transformers' run_qa: max_seq_length and doc_stride (its max_answer_length is model.task_results')
QA_STRIDE = 128


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
            f"metric: SQuAD's F1 of the best span (start ≤ end in the context, at most {MAX_ANSWER_TOKENS} tokens) across "
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
            spans = span_scores(start, end, inside)
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
