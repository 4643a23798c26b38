"""Fill-in-the-blank probes with the masked-LM head (Petroni et al. 2019, LAMA).

`fill` reads the model's guesses at every [MASK] of a sentence, at the output and at every
layer: the MLM head applied to each hidden state (index 0 = embeddings, l+1 = output of
layer l), a "logit lens" that shows where the answer appears. With a head mask it also
gives the unmasked guesses, so the mask's effect reads as before → after.

`cloze_scores` scores a cloze file, one query a line with its gold answer, as LAMA does:
precision at 1 and at 10 of the single-token gold answer among the whole vocabulary, per
layer. Queries whose answer is not one token, or that do not hold exactly one [MASK], are
skipped and counted.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from bertscope import runtime as distributed
from bertscope.analyses.conditions import JobOptions
from bertscope.analyses.mlm_results import PRECISION_AT, Blank, ClozeQuery, ClozeResult, FillResult
from bertscope.analyses.streaming import CorpusBatches, pad_batch
from bertscope.base.errors import InputError, NoMLMHeadError
from bertscope.base.progress import Progress
from bertscope.data.corpus import ReadReport, _lines, packaged_data, readable_file
from bertscope.model.device import upload
from bertscope.model.masks import Ablation, HeadMask
from bertscope.model.results import Encoding, MaskPrediction

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from bertscope.model.session import Session

MASK_TEXT = "[MASK]"  # what users write; replaced by the tokenizer's own mask token (RoBERTa: <mask>)
MAX_SCORES = 1 << 22  # vocabulary scores of one layer's MLM head per cloze batch (16 MB): 137 queries for BERT's 30,522


def require_mlm_head(session: Session) -> None:
    """Raise a one-line NoMLMHeadError unless the model has an MLM head (the CLI and UI add what works instead)."""
    if session.mlm_head is None or session.tokenizer.mask_token_id is None:
        raise NoMLMHeadError(
            f"{session.info.source} ({session.info.architecture}) has no masked-LM head, so it cannot fill in [MASK]; "
            "load a model saved with its MLM head (e.g. a BertForMaskedLM)",
            setting="model",
        )


def with_mask_token(tokenizer: PreTrainedTokenizerBase, text: str) -> str:
    """The text with every `[MASK]` written as this tokenizer's mask token."""
    token = tokenizer.mask_token
    return text if token == MASK_TEXT else text.replace(MASK_TEXT, token)


def mask_positions(tokenizer: PreTrainedTokenizerBase, encoding: Encoding) -> np.ndarray:
    return np.flatnonzero(encoding.input_ids == tokenizer.mask_token_id)


def fill(
    session: Session,
    text: str | Encoding,
    *,
    top: int = 10,
    mask: HeadMask | None = None,
    ablation: Ablation = "zero",
    layers: bool = True,
) -> FillResult:
    """The top-`top` guesses at every [MASK] of `text`, per layer, under `mask` (and without it)."""
    require_mlm_head(session)
    if top < 1:
        raise InputError(f"{top} guesses asked for; give 1 or more", setting="top")
    encoding = text if isinstance(text, Encoding) else session.encode(with_mask_token(session.tokenizer, text))
    positions = mask_positions(session.tokenizer, encoding)
    if not len(positions):
        raise InputError(f'the text has no {MASK_TEXT}; write {MASK_TEXT} where the missing word goes, e.g. "Dante was born in [MASK]."')
    head_mask = mask if mask is not None else session.mask(None)
    plain = session.forward(encoding, attentions=False)
    current = session.forward(encoding, attentions=False, mask=head_mask, ablation=ablation, reuse=plain) if len(head_mask) else plain
    final = session.mask_predictions(current, top=top)
    unmasked = session.mask_predictions(plain, top=top) if len(head_mask) else [None] * len(final)
    per_layer = _layer_predictions(session, current.hidden_states[:, positions], top) if layers else [()] * len(positions)
    blanks = tuple(
        Blank(position=int(position), predictions=prediction, layers=tuple(layer_guesses), unmasked=before)
        for position, prediction, layer_guesses, before in zip(positions, final, per_layer, unmasked, strict=True)
    )
    return FillResult(encoding=encoding, blanks=blanks, mask=head_mask, ablation=ablation)


def _layer_predictions(session: Session, hidden: np.ndarray, top: int) -> list[list[MaskPrediction]]:
    """`hidden` `[L+1, M, D]` at the M mask positions → per mask, per layer, the top guesses."""
    states = torch.as_tensor(hidden)
    logits = torch.stack([session.lens_logits(states[layer], layer) for layer in range(len(states))])
    probabilities = torch.softmax(logits.double(), dim=-1)  # [L+1, M, V]
    best = probabilities.topk(top, dim=-1)
    values, indices = best.values.cpu().numpy(), best.indices.cpu().numpy()
    result = []
    for blank in range(hidden.shape[1]):
        row = []
        for layer in range(hidden.shape[0]):
            tokens = session.tokenizer.convert_ids_to_tokens(indices[layer, blank].tolist())
            row.append(MaskPrediction(position=-1, tokens=tuple(tokens), probabilities=tuple(float(p) for p in values[layer, blank])))
        result.append(row)
    return result


# --- cloze files (LAMA) -------------------------------------------------------------------


def read_cloze(path: str | Path, report: ReadReport | None = None, limit: int | None = None) -> list[ClozeQuery]:
    """Queries from a cloze file (at most `limit`): `query<TAB>answer` lines, or LAMA's JSON lines."""
    target, name = readable_file(path)
    lines = ((f"{name}:{number}", line) for number, line in _lines(target, name))
    return cloze_queries(lines, report, limit=limit, name=name)


def cloze_queries(
    lines: Iterable[tuple[str, str]], report: ReadReport | None = None, limit: int | None = None, name: str = "the queries"
) -> list[ClozeQuery]:
    """Queries from `(location, line)` pairs, each `query<TAB>answer` or a LAMA JSON line.

    A JSON line (LAMA's TREx/Google-RE files) holds `masked_sentences` (the first one is
    used) or `masked_sentence`, and `obj_label`. Blank lines and `#` comments are ignored;
    a malformed line is skipped and recorded in `report`.
    """
    report = report if report is not None else ReadReport()
    queries: list[ClozeQuery] = []
    for location, line in lines:
        if limit is not None and len(queries) >= limit:
            break
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.lstrip().startswith("{"):
            query = _lama_line(line)
        else:
            text, tab, answer = line.rpartition("\t")
            query = (text.strip(), answer.strip()) if tab and text.strip() and answer.strip() else "expected query<TAB>answer"
        if isinstance(query, str):
            report.skip(location, query)
            continue
        if query[0].count(MASK_TEXT) != 1:
            report.skip(location, f"the query must hold exactly one {MASK_TEXT}")
            continue
        queries.append(ClozeQuery(text=query[0], answer=query[1], location=location))
    report.sentences = len(queries)
    if not queries:
        why = f" (first problem: {report.skipped[0][0]}: {report.skipped[0][1]})" if report.skipped else ""
        raise InputError(f"{name}: no cloze queries found{why}; write one query<TAB>answer a line, the query with one {MASK_TEXT}")
    return queries


def _lama_line(line: str) -> tuple[str, str] | str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        return f"not JSON ({error.msg})"
    if not isinstance(record, dict):
        return "expected a JSON object with masked_sentences and obj_label"
    sentences = record.get("masked_sentences") or [record.get("masked_sentence")]
    text, answer = sentences[0] if isinstance(sentences, list) else None, record.get("obj_label")
    if not isinstance(text, str) or not isinstance(answer, str) or not text.strip() or not answer.strip():
        return "expected a JSON object with masked_sentences and obj_label"
    return text.strip(), answer.strip()


def answer_id(tokenizer: PreTrainedTokenizerBase, answer: str) -> int | None:
    """The vocabulary id of a one-token answer, or None when the answer is several tokens."""
    return answer_ids(tokenizer, [answer])[0]


def answer_ids(tokenizer: PreTrainedTokenizerBase, answers: Sequence[str]) -> list[int | None]:
    """`answer_id` of each answer, the answers tokenised together (a call each would cost more than the model)."""
    found: list[int | None] = [None] * len(answers)
    for prefix in (" ", ""):  # byte-level BPE marks a word's leading space
        missing = [index for index, value in enumerate(found) if value is None]
        if not missing:
            break
        rows = tokenizer([prefix + answers[index] for index in missing], add_special_tokens=False)["input_ids"]
        for index, ids in zip(missing, rows, strict=True):
            if len(ids) == 1 and ids[0] != tokenizer.unk_token_id:
                found[index] = int(ids[0])
    return found


def cloze_scores(
    session: Session,
    queries: Sequence[ClozeQuery],
    *,
    mask: HeadMask | None = None,
    ablation: Ablation = "zero",
    batch_size: int | None = None,
    report: ReadReport | None = None,
    cancel: threading.Event | None = None,
) -> Iterator[Progress[ClozeResult]]:
    """P@1 and P@10 of the gold answer per layer; progress per batch, the result on the last item.

    The rank of the answer is the number of vocabulary entries with a larger logit, at the
    [MASK] position, for the MLM head applied to each hidden state. Queries whose answer is
    not one vocabulary token (LAMA keeps only those), or whose [MASK] lies past the model's
    maximum length, are skipped and recorded in `report`.
    """
    require_mlm_head(session)
    tokenizer = session.tokenizer
    kept: list[tuple[ClozeQuery, int]] = []
    kept_rows: list[int] = []  # each kept query's row of `encoded`: tokenised once, padded a batch at a time below
    texts = [with_mask_token(tokenizer, query.text) for query in queries]
    encoded = tokenizer(texts, truncation=True, max_length=session.max_length) if texts else {"input_ids": []}
    answers_at = answer_ids(tokenizer, [query.answer for query in queries])
    for row, (query, gold, ids) in enumerate(zip(queries, answers_at, encoded["input_ids"], strict=True)):
        if gold is None:
            problem = f"the answer {query.answer!r} is not one token of this model's vocabulary"
        elif tokenizer.mask_token_id in ids:
            kept.append((query, gold))
            kept_rows.append(row)
            continue
        else:
            problem = f"the [MASK] lies past the model's maximum of {session.max_length} tokens"
        if report is not None:
            report.skip(query.location, problem)
    if not kept:
        raise InputError("no query has a one-token answer in this model's vocabulary; LAMA scores single-token answers")
    gates = session.gate_tensor(mask)
    hits = {k: np.zeros(session.num_layers + 1) for k in PRECISION_AT}
    answers: list[dict[str, Any] | None] = [None] * len(kept)  # in the file's order
    # Batches capped by tokens (data.batching) and by the head's scores: the MLM head runs on the [MASK]
    # positions only (never B·T·vocabulary floats), a layer at a time, on at most MAX_SCORES // V queries.
    most = max(1, MAX_SCORES // session.info.vocab_size)
    mine = list(distributed.shard(range(len(kept))))  # under torchrun, this rank's queries; all of them in one process
    batches = CorpusBatches(
        mine,
        lambda chunk: chunk,  # tokenised above, to be kept or skipped
        lengths=lambda chunk: [len(encoded["input_ids"][kept_rows[index]]) for index in chunk],
        job=JobOptions(batch_size=most if batch_size is None else min(batch_size, most), cancel=cancel),
        chunk_size=max(len(mine), 1),  # one chunk: every query is held already
    )
    for planned in batches:
        indices = planned.items
        batch = [kept[index] for index in indices]
        padded = pad_batch(tokenizer, encoded, [kept_rows[index] for index in indices])
        inputs = {name: upload(tensor, session.device) for name, tensor in padded.items()}
        golds = upload(np.array([g for _, g in batch], dtype=np.int64), session.device)
        # one per query, found on the host: `nonzero` on a GPU would wait for it
        rows, columns = (
            upload(index, session.device) for index in torch.nonzero(padded["input_ids"] == tokenizer.mask_token_id, as_tuple=True)
        )
        with torch.inference_mode():
            outputs = session.run(inputs, gates=gates, ablation=ablation, encoder_only=True)
            layer_ranks = []
            for layer, states in enumerate(outputs.hidden_states):
                logits = session.lens_logits(states[rows, columns], layer)  # [B, V]
                above = logits > logits.gather(-1, golds[:, None])
                layer_ranks.append(above.sum(-1, dtype=torch.int32))  # counted in int32: half the time of int64 on a CPU
            # one read of the device a batch: every layer's ranks, and the last layer's guesses beside them
            read = torch.cat([*layer_ranks, logits.argmax(-1)]).view(len(layer_ranks) + 1, len(batch)).cpu().numpy()
            ranks, top1 = read[:-1], read[-1].tolist()
        for k in PRECISION_AT:
            hits[k] += (ranks < k).sum(1)
        for index, guess, rank in zip(indices, tokenizer.convert_ids_to_tokens(top1), ranks[-1], strict=True):
            query = kept[index][0]
            answers[index] = {"query": query.text, "answer": query.answer, "prediction": guess, "rank": int(rank)}
        del inputs, golds, rows, columns, outputs, states, logits, above  # nothing of a batch outlives it
        yield Progress("queries", planned.done, len(kept))
    if batches.cancelled:
        return
    if distributed.world().active:  # every rank's hits added, its answers put in their places
        summed = distributed.sum_across({str(k): hits[k] for k in PRECISION_AT})
        hits = {k: summed[str(k)] for k in PRECISION_AT}
        for found in distributed.gather({index: answers[index] for index in mine}):
            for index, answer in found.items():
                answers[index] = answer
    filled = cast(list[dict[str, Any]], answers)  # every query's answer is in its place now
    result = ClozeResult(queries=len(kept), precision={k: hits[k] / len(kept) for k in PRECISION_AT}, answers=filled)
    yield Progress("queries", len(kept), len(kept), result)


def sample_cloze() -> str:
    """A small cloze file shipped with bertscope (world knowledge, one-token answers)."""
    return str(packaged_data("sample_cloze.tsv"))
