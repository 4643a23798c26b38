"""What a fine-tuned model predicts for one input, under a head mask: the explorer's prediction pane.

Each prediction runs the model's own head (`Session.run`, so a mask, its ablation and an erasure
hooked into the pass apply as in every other pass) and returns plain values (model.task_results):
a token classifier's label per word at the word's first piece, an extractive QA model's best span
in the context (run_qa's search: start + end logits, start ≤ end, at most 30 tokens, inside the
context), a sentence-embedding model's cosine between its two segments, each embedded alone and
pooled as its sentence-transformers files say (model.pooling). Other models predict nothing here.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from bertscope.model.labels import CONTINUATION, token_labels
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding
from bertscope.model.session import Session
from bertscope.model.task_results import MAX_ANSWER_TOKENS, AnswerSpan, SegmentSimilarity, TaskPrediction, WordLabels


def task_prediction(
    session: Session, encoding: Encoding, mask: HeadMask | None = None, ablation: Ablation = "zero"
) -> TaskPrediction | None:
    """The model's prediction for `encoding` under `mask`; None for a model without such a task (or a QA model or an
    embedding model given no second segment)."""
    if session.is_token_classifier:
        return _word_labels(session, encoding, mask, ablation)
    if session.is_question_answerer:
        return _answer(session, encoding, mask, ablation) if encoding.pair is not None else None
    if session.is_sentence_embedder and encoding.pair is not None:
        return _similarity(session, encoding, mask, ablation)
    return None


def _logits(session: Session, encoding: Encoding, mask: HeadMask | None, ablation: Ablation) -> object:
    with torch.inference_mode():
        return session.run(session.tensors(encoding), gates=session.gate_tensor(mask), ablation=ablation, hidden_states=False)


def _word_labels(session: Session, encoding: Encoding, mask: HeadMask | None, ablation: Ablation) -> WordLabels:
    outputs = _logits(session, encoding, mask, ablation)
    probabilities = torch.softmax(outputs.logits[0].float(), dim=-1).cpu().numpy()  # type: ignore[attr-defined]
    names = session.label_names
    pieces = token_labels(encoding.tokens, encoding.special)
    firsts: dict[tuple[int | None, int], int] = {}  # (segment, word) -> its first piece
    texts: dict[tuple[int | None, int], str] = {}
    for position, (segment, word) in enumerate(zip(encoding.segment_ids, encoding.word_ids)):
        if word is None:
            continue
        key = (segment, word)
        piece = pieces[position]
        if key not in firsts:
            firsts[key], texts[key] = position, piece
        else:
            texts[key] += piece.removeprefix(CONTINUATION)
    positions = tuple(firsts.values())
    chosen = [int(np.argmax(probabilities[position])) for position in positions]
    return WordLabels(
        words=tuple(texts.values()),
        labels=tuple(names[index] for index in chosen),
        probabilities=tuple(float(probabilities[position, index]) for position, index in zip(positions, chosen)),
        positions=positions,
    )


def span_scores(start: torch.Tensor, end: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """Start + end logit of every span, `[..., T, T]` (row the start, column the end) from logits `[..., T]`: −inf
    unless start ≤ end, both `inside` the context and the span at most MAX_ANSWER_TOKENS long, as run_qa scores them.
    The prediction pane, attribute's answer target and the qa objective's metric all choose answers by it."""
    spans = start.masked_fill(~inside, float("-inf"))[..., :, None] + end.masked_fill(~inside, float("-inf"))[..., None, :]
    places = torch.arange(start.shape[-1], device=start.device)
    width = places[None, :] - places[:, None]  # end − start
    return spans.masked_fill((width < 0) | (width >= MAX_ANSWER_TOKENS), float("-inf"))


def _answer(session: Session, encoding: Encoding, mask: HeadMask | None, ablation: Ablation) -> AnswerSpan:
    outputs = _logits(session, encoding, mask, ablation)
    start = outputs.start_logits[0].double().cpu()  # type: ignore[attr-defined]
    end = outputs.end_logits[0].double().cpu()  # type: ignore[attr-defined]
    context = torch.tensor([segment == 1 and not special for segment, special in zip(encoding.segment_ids, encoding.special)])
    spans = span_scores(start, end, context).numpy()
    start, end = start.numpy(), end.numpy()
    first, last = np.unravel_index(int(np.argmax(spans)), spans.shape)
    finite = spans[np.isfinite(spans)]
    share = float(np.exp(spans[first, last] - finite.max()) / np.exp(finite - finite.max()).sum()) if finite.size else 0.0
    text = session.tokenizer.convert_tokens_to_string(list(encoding.tokens[first : last + 1])).strip()
    return AnswerSpan(
        start=int(first),
        end=int(last),
        text=text,
        score=float(spans[first, last]),
        null_score=float(start[0] + end[0]),
        probability=share,
    )


def _similarity(session: Session, encoding: Encoding, mask: HeadMask | None, ablation: Ablation) -> SegmentSimilarity:
    assert encoding.pair is not None  # asked for with a pair only
    sides = session.encode_many([encoding.text, encoding.pair], [None, None])
    inputs = session.padded_tensors(sides)
    with torch.inference_mode():
        hidden = session.run(
            inputs, gates=session.gate_tensor(mask), ablation=ablation, hidden_states=False, encoder_only=True
        ).last_hidden_state
        embedded = session.pooling(hidden, inputs["attention_mask"])
        cosine = float(F.cosine_similarity(embedded[0:1], embedded[1:2], dim=-1)[0])
    return SegmentSimilarity(cosine=cosine, pooling=session.pooling.source)


def own_word_labels(session: Session, sentences: list[list[str]]) -> list[tuple[str, ...]]:
    """The token classifier's own label for each word of each sentence (words pre-split, read at each word's first
    piece, the model as it is): the reference where no gold labels in its label set exist (the explorer's agreement)."""
    names = session.label_names
    labelled = []
    for words in sentences:
        encoded = session.tokenizer(words, is_split_into_words=True, truncation=True, max_length=session.max_length, return_tensors="pt")
        word_ids = encoded.word_ids(0)
        firsts = {word: position for position, word in reversed(list(enumerate(word_ids))) if word is not None}
        inputs = {name: tensor.to(session.device) for name, tensor in encoded.items() if name != "attention_mask"}
        with torch.inference_mode():
            guesses = session.run(inputs, hidden_states=False).logits[0].argmax(-1).tolist()
        labelled.append(tuple(names[guesses[firsts[word]]] if word in firsts else names[0] for word in range(len(words))))
    return labelled
