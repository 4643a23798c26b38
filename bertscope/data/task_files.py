"""The files of fine-tuning tasks, streamed: tagged words (CoNLL-2003, or a CoNLL-U column) and scored sentence pairs.

Plain Python (no torch), read before a model loads, under the corpus policy of data.corpus:
what stops reading is one line (`CorpusError`), a malformed line or block is skipped and
counted in the `ReadReport`.

- Tagged words, for the token-classification objective. CoNLL-2003 style: one token a line,
  its label in the LAST whitespace-separated column (the columns between, POS and chunk tags,
  are not read), blank lines between sentences, `-DOCSTART-` lines skipped; or CoNLL-U, the
  labels taken from its `upos`, `xpos` or `deprel` column.
- Scored pairs, for the similarity objective: a TSV whose header names `sentence1`,
  `sentence2` and `score` (GLUE's STS-B, sentence-transformers' STS files: other columns are
  ignored), or three unnamed columns in that order.
- Questions with their contexts and answers, for the qa objective: SQuAD-1.1 JSON (`data` →
  `paragraphs` → `context` and `qas`, each with `question`, `id` and `answers`, a list of
  `text` and `answer_start`), and SQuAD 2.0's questions marked `is_impossible` (no answer).
  An answer whose text is not at its `answer_start` stops reading, naming the question.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Generator, Iterator
from dataclasses import replace
from pathlib import Path

from bertscope.base.errors import InputError
from bertscope.data.corpus import (
    CorpusError,
    ReadReport,
    Sentence,
    _lines,
    counted,
    has_conllu_lines,
    packaged_data,
    read_sentences,
    readable_file,
)

LABEL_COLUMNS = {"upos": "upos", "xpos": "xpos", "deprel": "deprels"}  # a CoNLL-U column -> its Sentence attribute
PAIR_COLUMNS = ("sentence1", "sentence2", "score")
DOCUMENT_START = "-DOCSTART-"


def sample_pairs() -> Path:
    """The sample sentence pairs shipped inside the package: 48 pairs of the sample corpus's kind of English, each
    with a similarity score from 0 (unrelated) to 5 (the same meaning) in STS's manner, a header naming the columns.
    Written and scored for bertscope: original text, free to use."""
    return packaged_data("sample_pairs.tsv")


def read_tagged(
    path: str | os.PathLike[str], *, label_column: str | None = None, limit: int | None = None, report: ReadReport | None = None
) -> Iterator[Sentence]:
    """The sentences of a CoNLL-2003-style file or a CoNLL-U file, each with its `words` and a label a word (`tags`).

    A `.conllu` file, or any whose word lines are CoNLL-U's, takes its labels from `label_column`
    (upos, xpos or deprel; default upos); any other is read as CoNLL-2003, which has no named
    columns.
    """
    target, name = readable_file(path)
    if label_column is not None and label_column not in LABEL_COLUMNS:
        raise InputError(f"unknown label column {label_column!r}; a CoNLL-U file's labels are one of: {', '.join(LABEL_COLUMNS)}")
    report = report if report is not None else ReadReport()
    if target.suffix.lower() == ".conllu" or has_conllu_lines(target):  # a `.conll` file may be CoNLL-2003
        return _conllu_tags(read_sentences(path, "conllu", limit=limit, report=report), LABEL_COLUMNS[label_column or "upos"], name)
    if label_column is not None:
        raise InputError(
            f"{name}: a CoNLL-2003 file's labels are its last column; --label-column chooses a CoNLL-U column (upos, xpos, deprel)",
            setting="label_column",
        )
    return _counted(_read_conll2003(target, name, report), report, name, limit, "CoNLL-2003 (a token and its label a line)")


def _conllu_tags(sentences: Iterator[Sentence], column: str, name: str) -> Iterator[Sentence]:
    for sentence in sentences:
        tags = getattr(sentence, column)
        if tags is None:
            raise CorpusError(
                f"{sentence.location}: no {column.rstrip('s').upper()} column to take labels from; choose another --label-column"
            )
        yield replace(sentence, tags=tags)


def _read_conll2003(target: Path, name: str, report: ReadReport) -> Generator[Sentence, None, None]:
    words: list[str] = []
    tags: list[str] = []
    start = 0
    broken = ""  # why the sentence being read is skipped, if it is
    for number, line in _lines(target, name):
        fields = line.split()
        if fields and fields[0] == DOCUMENT_START:
            fields = []  # a document boundary ends a sentence as a blank line does
        if not fields:
            if words and not broken:
                yield Sentence(" ".join(words), location=f"{name}:{start}", words=tuple(words), tags=tuple(tags))
            words, tags, broken = [], [], ""
            continue
        if not words and not broken:
            start = number
        if len(fields) < 2 and not broken:
            broken = f"{name}:{number}"
            report.skip(broken, "a token without a label (expected the token first and its label last)")
        words.append(fields[0])
        tags.append(fields[-1])
    if words and not broken:
        yield Sentence(" ".join(words), location=f"{name}:{start}", words=tuple(words), tags=tuple(tags))


def read_scored_pairs(path: str | os.PathLike[str], *, limit: int | None = None, report: ReadReport | None = None) -> Iterator[Sentence]:
    """The pairs of an STS-style TSV: a Sentence each, its `text` and `pair` the two sentences and its `label` the
    score as written. A header that names neither of the columns and a first row that is not three columns ending
    in a number are refused at once."""
    target, name = readable_file(path)
    report = report if report is not None else ReadReport()
    columns = _pair_columns(target, name)
    return _counted(_read_pairs(target, name, columns, report), report, name, limit, "sentence pairs with a score")


def _pair_columns(target: Path, name: str) -> tuple[tuple[int, int, int], bool]:
    """Where sentence1, sentence2 and score are, and whether the first line is a header naming them."""
    for number, line in _lines(target, name):
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split("\t")]
        named = [field.lower() for field in fields]
        if all(column in named for column in PAIR_COLUMNS):
            first, second, score = (named.index(column) for column in PAIR_COLUMNS)
            return (first, second, score), True
        if len(fields) == 3 and _number(fields[2]) is not None:
            return (0, 1, 2), False
        found = ", ".join(fields[:6]) + (", ..." if len(fields) > 6 else "")
        raise CorpusError(
            f"{name}:{number}: no columns named sentence1, sentence2 and score (found: {found}); name them so in a "
            "tab-separated header, or give three columns: sentence1, sentence2, score",
            setting="data",
        )
    raise CorpusError(f"{name}: no sentence pairs found (the file is empty); give a TSV of sentence1, sentence2, score")


def _read_pairs(target: Path, name: str, layout: tuple[tuple[int, int, int], bool], report: ReadReport) -> Generator[Sentence, None, None]:
    (first, second, score), header = layout
    width = max(first, second, score) + 1
    for number, line in _lines(target, name):
        if not line.strip():
            continue
        if header:
            header = False
            continue
        location = f"{name}:{number}"
        fields = [field.strip() for field in line.split("\t")]
        if len(fields) < width:
            report.skip(location, f"expected at least {width} tab-separated fields, found {len(fields)}")
        elif not fields[first] or not fields[second]:
            report.skip(location, "an empty sentence")
        elif _number(fields[score]) is None:
            report.skip(location, f"score {fields[score]!r} is not a number")
        else:
            yield Sentence(fields[first], pair=fields[second], location=location, label=fields[score])


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _counted(sentences: Generator[Sentence, None, None], report: ReadReport, name: str, limit: int | None, what: str) -> Iterator[Sentence]:
    """Count and yield up to `limit`; fail at the end if there were none."""
    if limit is not None and limit < 1:
        raise InputError(f"the sentence limit must be 1 or more, not {limit}; leave it out to read everything")

    def empty() -> CorpusError:
        why = f"; {len(report.skipped):,} skipped, first: {report.skipped[0][0]}: {report.skipped[0][1]}" if report.skipped else ""
        return CorpusError(f"{name}: no sentences found as {what}{why}; check the file's format", setting="data")

    yield from counted(sentences, report, limit, empty)


def read_squad(path: str | os.PathLike[str], *, limit: int | None = None, report: ReadReport | None = None) -> Iterator[Sentence]:
    """The questions of a SQuAD-1.1 or 2.0 JSON file, a Sentence each: `text` the question, `pair` its paragraph's
    context, `label` its id, `answers` its gold (text, answer_start) pairs, () where it `is_impossible`. A question
    without a question, an id or (being possible) answers is skipped and counted; an answer that is not at its
    `answer_start` stops reading (the file and its offsets disagree: every span from it would be wrong)."""
    target, name = readable_file(path)
    report = report if report is not None else ReadReport()
    try:
        with open(target, encoding="utf-8") as handle:
            document = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CorpusError(
            f"{name}: not JSON ({error}); the qa objective reads SQuAD JSON (data, paragraphs, qas)", setting="data"
        ) from None
    articles = document.get("data") if isinstance(document, dict) else None
    if not isinstance(articles, list):
        raise CorpusError(f"{name}: no 'data' list of articles; the qa objective reads SQuAD JSON (data, paragraphs, qas)", setting="data")
    return _counted(_read_questions(articles, name, report), report, name, limit, "SQuAD JSON (data, paragraphs, qas)")


def _read_questions(articles: list[object], name: str, report: ReadReport) -> Generator[Sentence, None, None]:
    for article_number, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        for paragraph_number, paragraph in enumerate(paragraphs if isinstance(paragraphs, list) else []):
            where = f"{name}: article {article_number}, paragraph {paragraph_number}"
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            questions = paragraph.get("qas") if isinstance(paragraph, dict) else None
            if not isinstance(context, str) or not context.strip() or not isinstance(questions, list):
                report.skip(where, "no context or no qas")
                continue
            for question in questions:
                sentence = _question(question, context, name, where, report)
                if sentence is not None:
                    yield sentence


def _question(question: object, context: str, name: str, where: str, report: ReadReport) -> Sentence | None:
    """One entry of `qas` as a Sentence, or None (skipped and counted) where it lacks what a question needs."""
    if not isinstance(question, dict) or not isinstance(question.get("question"), str) or not question["question"].strip():
        report.skip(where, "a question without its text")
        return None
    identifier = str(question.get("id", "")).strip()
    if not identifier:
        report.skip(where, "a question without an id")
        return None
    answers: list[tuple[str, int]] = []
    if not question.get("is_impossible", False):
        for answer in question.get("answers") or []:
            text, start = (answer.get("text"), answer.get("answer_start")) if isinstance(answer, dict) else (None, None)
            if not isinstance(text, str) or not isinstance(start, int) or isinstance(start, bool):
                raise CorpusError(f"{name}: question {identifier}: an answer without a text and an integer answer_start", setting="data")
            if context[start : start + len(text)] != text:
                raise CorpusError(
                    f"{name}: question {identifier}: answer {text!r} is not at answer_start {start} in its context "
                    f"(found {context[start : start + len(text)]!r}); fix the offset or the answer's text",
                    setting="data",
                )
            answers.append((text, start))
        if not answers:
            report.skip(f"{name}: question {identifier}", "no answers and not marked is_impossible")
            return None
    return Sentence(
        question["question"].lstrip(), pair=context, location=f"{name}: question {identifier}", label=identifier, answers=tuple(answers)
    )
