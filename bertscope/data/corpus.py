"""Sentences from corpus files: plain text, CoNLL-U and SentEval probing TSV, streamed.

Plain Python (no torch), so the CLI and the UI can both read corpora. Files are read a
line at a time and sentences come out of a generator, so a corpus of any size costs the
memory of one sentence (plus the list of skipped items). The policy for bad input:

- what stops reading (a `CorpusError`, one line): a file that is missing, a directory,
  unreadable or not UTF-8, an unknown format name, and a corpus with no sentence at all;
- what is skipped and counted (in a `ReadReport`): single lines or sentence blocks that
  are malformed. Reading goes on, and the report says what was left out and where.

Line numbers count from 1. Windows line endings and a UTF-8 byte order mark are fine.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import conllu
from conllu.exceptions import ParseException
from conllu.parser import parse_id_value, parse_int_value

from bertscope.base.errors import InputError

FORMATS = ("text", "conllu", "senteval")
SPLITS = ("tr", "va", "te")

_CONLLU_SUFFIXES = (".conllu", ".conll")
_SENTEVAL_SUFFIXES = (".tsv", ".txt")
_CONLLU_COLUMNS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
_SNIFF_LINES = 100
T = TypeVar("T")


def _as_written(fields: list[str], index: int) -> str:
    return fields[index]


def _whole_number(library_parser: Callable[[str], Any]) -> Callable[[list[str], int], Any]:
    """`library_parser` for ID or HEAD, with the plain case first: digits without a leading zero (or `0`), the
    strings its regular expression accepts as an integer, are read with `int`; anything else is left to it."""

    def parse(fields: list[str], index: int) -> Any:
        value = fields[index]
        if value.isascii() and value.isdigit() and (value[0] != "0" or value == "0"):
            return int(value)
        return library_parser(value)

    return parse


# Columns bertscope never reads are kept as written instead of parsed into dictionaries and lists:
# their parsers were a third of reading a treebank (EWT dev + test, 4,078 sentences: 1.0 s -> 0.74 s).
# IDs and heads that are plain numbers skip the library's regular expressions (0.68 s -> 0.60 s).
_FIELD_PARSERS = {column: _as_written for column in ("lemma", "feats", "deps", "misc")} | {
    "id": _whole_number(parse_id_value),
    "head": _whole_number(parse_int_value),
}


@dataclass(frozen=True, slots=True)  # no __dict__: a corpus job may hold many thousands of them
class Sentence:
    """One sentence of a corpus, with whatever annotation its format carries.

    `text` is what the model reads. For CoNLL-U it is the `# text =` comment, or else the
    word forms joined by spaces honouring `SpaceAfter=No`; `words` and the tag tuples hold
    the syntactic words (multi-word token ranges and empty nodes left out), and `heads`
    counts from 1 into `words`, with 0 for the root.
    """

    text: str
    pair: str | None = None
    location: str = ""
    label: str | None = None
    split: str | None = None
    words: tuple[str, ...] | None = None
    upos: tuple[str, ...] | None = None
    xpos: tuple[str, ...] | None = None
    heads: tuple[int, ...] | None = None
    deprels: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None  # a label per word for token classification (data.task_files)
    # An extractive question (data.task_files.read_squad): `text` the question, `pair` its context, `label` its id, and
    # its gold answers as (text, character start in the context); () for SQuAD 2.0's unanswerable questions.
    answers: tuple[tuple[str, int], ...] | None = None


class CorpusError(InputError):
    """A corpus file that cannot be read: `<path>[:<line>]: <what is wrong>; <what to do>`."""


@dataclass
class ReadReport:
    """What one reading of a corpus yielded and what it skipped, filled in as it goes."""

    sentences: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """`(location, reason)` for every skipped line or block, `location` being `path:line`."""

    def skip(self, location: str, reason: str) -> None:
        self.skipped.append((location, reason))

    def summary(self) -> str:
        """One line for the user, e.g. `read 1,998 sentences; skipped 2 (first: a.tsv:17: ...)`."""
        read = f"read {self.sentences:,} sentence{'' if self.sentences == 1 else 's'}"
        if not self.skipped:
            return read
        location, reason = self.skipped[0]
        return f"{read}; skipped {len(self.skipped):,} (first: {location}: {reason})"


def sample_corpus(format: str = "text") -> Path:
    """The sample corpus shipped inside the package, in `format` (text by default).

    - `sample.txt`: about 300 varied English sentences, one a line;
    - `sample.conllu`: 164 sentences (3 to 32 words) annotated by hand in UD v2: UPOS,
      Penn XPOS, lemmas and dependencies, every UPOS tag at least 5 times;
    - `sample.tsv`: 60 lines of a toy SentEval task, the label being the sentence's length
      bin in whitespace-separated words: 0 up to 6, 1 for 7-11, 2 for 12-17, 3 for 18 on.
    All written for bertscope: original text, free to use.
    """
    names = {"text": "sample.txt", "conllu": "sample.conllu", "senteval": "sample.tsv"}
    if format not in names:
        raise InputError(f"no sample corpus in format {format!r}; use one of {', '.join(FORMATS)}")
    return packaged_data(names[format])


def packaged_data(name: str) -> Path:
    """A data file shipped inside the package (`bertscope/data/`)."""
    return Path(__file__).resolve().parent / name


def detect_format(path: str | os.PathLike[str]) -> str:
    """Guess a file's format from its name and first lines.

    `.conllu`/`.conll` is CoNLL-U; a `.tsv`/`.txt` whose first non-empty line is
    `tr|va|te<TAB>label<TAB>sentence` is SentEval; any other file whose first line that
    is not a comment looks like a CoNLL-U word line (10 tab-separated columns, a numeric
    ID) is CoNLL-U too, so a treebank under another name is not read as plain text;
    anything else is plain text.
    """
    target, name = readable_file(path)
    if target.suffix.lower() in _CONLLU_SUFFIXES:
        return "conllu"
    return _sniffed_format(target, name)


def has_conllu_lines(path: str | os.PathLike[str]) -> bool:
    """Whether a file's first word line is a CoNLL-U one (10 tab-separated columns, a numeric ID), whatever its name:
    a `.conll` file may hold CoNLL-2003's space-separated lines instead."""
    target, name = readable_file(path)
    return _sniffed_format(target, name) == "conllu"


def _sniffed_format(target: Path, name: str) -> str:
    """The format a file's first lines show: senteval, conllu or text."""
    first_line = True
    for number, line in _lines(target, name):
        if not line.strip():
            continue
        if first_line and target.suffix.lower() in _SENTEVAL_SUFFIXES and _is_senteval(line):
            return "senteval"
        first_line = False
        if not line.lstrip().startswith("#"):
            fields = line.split("\t")
            return "conllu" if len(fields) == 10 and fields[0].strip().isdigit() else "text"
        if number >= _SNIFF_LINES:
            break
    return "text"


def read_sentences(
    path: str | os.PathLike[str],
    format: str = "auto",
    *,
    limit: int | None = None,
    report: ReadReport | None = None,
) -> Iterator[Sentence]:
    """Stream the sentences of a corpus file, stopping after `limit` of them.

    `format` is `auto` (see `detect_format`) or one of FORMATS. The file is checked at
    once (a missing file fails here, not at the first `next`); malformed lines or blocks
    are skipped and recorded in `report`. A file that yields no sentence at all raises a
    `CorpusError` when reading reaches its end.
    """
    target, name = readable_file(path)
    if format != "auto" and format not in FORMATS:
        raise CorpusError(f"{name}: unknown format {format!r}; use auto, {', '.join(FORMATS)}")
    if limit is not None and limit < 1:
        raise InputError(f"the sentence limit must be 1 or more, not {limit}; leave it out to read everything")
    if format == "auto":
        format = detect_format(target)
    report = report if report is not None else ReadReport()
    readers = {"text": _read_text, "conllu": _read_conllu, "senteval": _read_senteval}
    return _stream(readers[format](target, name, report), report, format, name, limit)


# --- reading lines ---------------------------------------------------------------------------


def readable_file(path: str | os.PathLike[str]) -> tuple[Path, str]:
    """The path, checked to be a readable file, and its name as the user wrote it."""
    name = os.fspath(path)
    target = Path(name).expanduser()
    if target.is_dir():
        raise CorpusError(f"{name}: is a directory; give a corpus file (plain text, CoNLL-U or SentEval TSV)")
    try:
        with open(target, "rb"):
            pass
    except OSError as error:
        raise _open_error(name, error) from None
    return target, name


def _open_error(name: str, error: OSError) -> CorpusError:
    if isinstance(error, FileNotFoundError):
        return CorpusError(f"{name}: no such file; check the path")
    if isinstance(error, PermissionError):
        return CorpusError(f"{name}: permission denied; make the file readable (chmod +r) or copy it")
    return CorpusError(f"{name}: cannot read it ({error.strerror or error}); check the file")


def _lines(target: Path, name: str) -> Generator[tuple[int, str], None, None]:
    """`(line number, text without its line ending)`, decoding UTF-8 one line at a time.

    Decoding line by line (not through a text-mode file, which decodes in chunks) is what
    lets a decoding error name its line.
    """
    try:
        handle = open(target, "rb")
    except OSError as error:
        raise _open_error(name, error) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise CorpusError(
                    f"{name}:{number}: not UTF-8 (byte 0x{raw[error.start]:02x} at column {error.start + 1}); "
                    f"convert it to UTF-8, e.g. iconv -f latin1 -t utf-8 {name} > {target.stem}.utf8{target.suffix}"
                ) from None
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield number, line.rstrip("\r\n")


def counted(
    sentences: Generator[Sentence, None, None], report: ReadReport, limit: int | None, empty: Callable[[], Exception]
) -> Iterator[Sentence]:
    """Count and yield a reader's sentences up to `limit` (the reader closed early); raise `empty()` at the end if
    there were none."""
    with contextlib.closing(sentences):
        for sentence in sentences:
            report.sentences += 1
            yield sentence
            if limit is not None and report.sentences >= limit:
                return
    if report.sentences == 0:
        raise empty()


def _stream(
    sentences: Generator[Sentence, None, None], report: ReadReport, format: str, name: str, limit: int | None
) -> Iterator[Sentence]:
    """Count and yield sentences up to `limit`; fail at the end if there were none."""

    def empty() -> CorpusError:
        if report.skipped:
            location, reason = report.skipped[0]
            why = f"{len(report.skipped):,} skipped, first: {location}: {reason}"
        else:
            why = "only blank lines and comments"
        others = " or ".join(other for other in FORMATS if other != format)
        return CorpusError(
            f"{name}: no sentences found as {format} ({why}); is it the right format? read it as {others}", setting="data_format"
        )

    return counted(sentences, report, limit, empty)


# --- the formats ----------------------------------------------------------------------------


def _read_text(target: Path, name: str, report: ReadReport) -> Generator[Sentence, None, None]:
    """One sentence a line; blank lines and `#` comments are not sentences."""
    for number, line in _lines(target, name):
        text = line.strip()
        if text and not text.startswith("#"):
            yield Sentence(text, location=f"{name}:{number}")


def _is_senteval(line: str) -> bool:
    fields = line.split("\t")
    return len(fields) == 3 and fields[0].strip() in SPLITS and bool(fields[2].strip())


def _read_senteval(target: Path, name: str, report: ReadReport) -> Generator[Sentence, None, None]:
    """`split<TAB>label<TAB>sentence` a line, as in SentEval's probing tasks (Conneau et al. 2018)."""
    for number, line in _lines(target, name):
        if not line.strip():
            continue
        location = f"{name}:{number}"
        fields = line.split("\t")
        if len(fields) != 3:
            report.skip(location, f"expected 3 tab-separated fields (split, label, sentence), found {len(fields)}")
            continue
        split, label, text = (part.strip() for part in fields)
        if split not in SPLITS:
            report.skip(location, f"unknown split {split!r} (expected tr, va or te)")
        elif not label:
            report.skip(location, "empty label")
        elif not text:
            report.skip(location, "empty sentence")
        else:
            yield Sentence(text, location=location, label=label, split=split)


def _read_conllu(target: Path, name: str, report: ReadReport) -> Generator[Sentence, None, None]:
    """Blocks separated by blank lines, each parsed by the `conllu` library on its own.

    Splitting the blocks here rather than in `conllu.parse_incr` keeps their line numbers
    and lets reading go on after a block the library rejects.
    """
    columns: list[str] | None = None  # from a CoNLL-U Plus `# global.columns =` line
    for block in _blocks(_lines(target, name)):
        for _, text in block:
            if text.startswith("# global.columns ="):
                columns = [column.lower() for column in text.split("=", 1)[1].split()]
        sentence = _conllu_sentence(block, columns or list(_CONLLU_COLUMNS), name, report)
        if sentence is not None:
            yield sentence


def _blocks(lines: Generator[tuple[int, str], None, None]) -> Iterator[list[tuple[int, str]]]:
    """Runs of non-blank lines, with their numbers."""
    block: list[tuple[int, str]] = []
    with contextlib.closing(lines):
        for number, line in lines:
            if line.strip():
                block.append((number, line))
            elif block:
                yield block
                block = []
    if block:
        yield block


def _conllu_sentence(block: list[tuple[int, str]], columns: list[str], name: str, report: ReadReport) -> Sentence | None:
    """The sentence of one block, or None (recorded in `report`) if the block is unusable."""
    start = f"{name}:{block[0][0]}"
    word_lines = [number for number, text in block if not text.strip().startswith("#")]
    if not word_lines:
        return None  # comments only, e.g. a `# newdoc` block: not a sentence
    try:
        (tokens,) = conllu.parse("\n".join(text for _, text in block), fields=columns, field_parsers=_FIELD_PARSERS)
    except ParseException as error:
        report.skip(_bad_line(block, columns, name) or start, f"not valid CoNLL-U ({str(error).rstrip('.')})")
        return None

    words: list[dict[str, Any]] = []
    word_numbers: list[int] = []  # the line of each word
    surface: list[str] = []  # the text rebuilt from tokens, for blocks without `# text =`
    covered_until = 0  # the last word id inside a multi-word token already written
    for number, token in zip(word_lines, tokens):
        if len(token) < len(columns):
            report.skip(f"{name}:{number}", f"expected {len(columns)} tab-separated columns, found {len(token)}")
            return None
        ident = token.get("id")
        if isinstance(ident, tuple) and ident[1] == "-":
            surface.append(_with_space(token))
            covered_until = ident[2]
        elif isinstance(ident, int):
            if ident != len(words) + 1:
                report.skip(f"{name}:{number}", f"word ID {ident} out of order (expected {len(words) + 1})")
                return None
            words.append(token)
            word_numbers.append(number)
            if ident > covered_until:
                surface.append(_with_space(token))
        elif not (isinstance(ident, tuple) and ident[1] == "."):  # empty nodes are left out
            report.skip(f"{name}:{number}", "a word line without an ID")
            return None
    if not words:
        report.skip(start, "a sentence with no words")
        return None
    if any(not isinstance(word.get("form"), str) for word in words):
        report.skip(start, "a word without a FORM")
        return None

    written: tuple[int | None, ...] = tuple(word.get("head") for word in words)
    heads: tuple[int, ...] | None = None  # not annotated
    if not all(head is None for head in written):
        problem = _head_problem(written, word_numbers, name)
        if problem:
            report.skip(*problem)
            return None
        heads = cast(tuple[int, ...], written)  # `_head_problem` found every word's HEAD

    text = (tokens.metadata.get("text") or "").strip() or "".join(surface).strip()
    return Sentence(
        text,
        location=start,
        words=tuple(sys.intern(word["form"]) for word in words),
        upos=_column(words, "upos"),
        xpos=_column(words, "xpos"),
        heads=heads,
        deprels=_column(words, "deprel"),
    )


def _bad_line(block: list[tuple[int, str]], columns: list[str], name: str) -> str | None:
    """The location of the first line the library rejects on its own, if there is one."""
    for number, text in block:
        try:
            conllu.parse(text, fields=columns, field_parsers=_FIELD_PARSERS)
        except ParseException:
            return f"{name}:{number}"
    return None


def _with_space(token: dict[str, Any]) -> str:
    misc = token.get("misc") or ""  # as written: `SpaceAfter=No|...`
    form: str = token["form"]  # conllu's tokens hold Any; FORM is read as written
    return form if "SpaceAfter=No" in misc.split("|") else form + " "


def _column(words: list[dict[str, Any]], column: str) -> tuple[str, ...] | None:
    """A column's values for every word (`_` where missing), or None if it is `_` throughout."""
    values = tuple(sys.intern(word.get(column) or "_") for word in words)  # one copy of each tag: a corpus's Sentences stay small
    return None if all(value == "_" for value in values) else values


def _head_problem(heads: tuple[int | None, ...], numbers: list[int], name: str) -> tuple[str, str] | None:
    """`(location, reason)` if the heads do not make a tree (several roots are allowed)."""
    size = len(heads)
    for index, head in enumerate(heads):
        if head is None:
            return f"{name}:{numbers[index]}", "HEAD missing ('_') where other words have one"
        if not 0 <= head <= size:
            return f"{name}:{numbers[index]}", f"HEAD {head} does not fit a sentence of {size} words"
    given = cast(tuple[int, ...], heads)  # the loop above returned at any missing one
    reaches_root = [False] * size
    for start in range(size):
        path: list[int] = []
        seen: set[int] = set()
        index = start
        while index >= 0 and not reaches_root[index]:
            if index in seen:
                return f"{name}:{numbers[start]}", f"HEADs make a cycle through word {start + 1}"
            path.append(index)
            seen.add(index)
            index = given[index] - 1
        for visited in path:
            reaches_root[visited] = True
    return None


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Lists of `size` items (the last may be shorter), read lazily: a corpus streams in
    chunks that are sorted by length within, so memory stays flat in the corpus length."""
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
