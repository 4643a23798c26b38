"""Reading corpora: plain text, CoNLL-U and SentEval TSV, streamed, with skip-and-count."""

from __future__ import annotations

import builtins
import subprocess
import sys
from pathlib import Path

import pytest

from bertscope.base.errors import InputError
from bertscope.data import corpus
from bertscope.data.corpus import (
    FORMATS,
    CorpusError,
    ReadReport,
    Sentence,
    detect_format,
    read_sentences,
    sample_corpus,
)


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


def read_all(path, format="auto", **options) -> tuple[list[Sentence], ReadReport]:
    report = ReadReport()
    return list(read_sentences(path, format, report=report, **options)), report


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and message
    return message


CONLLU = """\
# sent_id = 1
# text = The keys are here.
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tkeys\tkey\tNOUN\tNNS\t_\t4\tnsubj\t_\t_
3\tare\tbe\tAUX\tVBP\t_\t4\tcop\t_\t_
4\there\there\tADV\tRB\t_\t0\troot\t_\tSpaceAfter=No
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

# sent_id = 2
1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_
3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_
3.1\tgone\tgo\tVERB\tVBN\t_\t_\t_\t3:conj\t_
4\tthere\tthere\tADV\tRB\t_\t3\tadvmod\t_\tSpaceAfter=No
5\t!\t!\tPUNCT\t.\t_\t3\tpunct\t_\t_
"""


def block(*rows: str) -> str:
    """A CoNLL-U block from rows whose columns are written with single spaces."""
    return "".join(row.replace(" ", "\t") + "\n" for row in rows) + "\n"


GOOD = block("1 Fine fine ADJ JJ _ 0 root _ _")


# --- plain text ------------------------------------------------------------------------------


def test_text_one_sentence_a_line_without_blanks_or_comments(tmp_path):
    path = write(tmp_path / "c.txt", "# a comment\nThe cat sat.\n\n   \n  Dogs bark loudly.  \n#another\nLast one")
    sentences, report = read_all(path)
    assert [s.text for s in sentences] == ["The cat sat.", "Dogs bark loudly.", "Last one"]
    assert [s.location for s in sentences] == [f"{path}:2", f"{path}:5", f"{path}:7"]
    assert sentences[0] == Sentence("The cat sat.", location=f"{path}:2")
    assert report.sentences == 3 and report.skipped == []
    assert report.summary() == "read 3 sentences"


def test_text_keeps_tabs_and_the_path_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "c.txt", "a\tb c\n")
    (sentence,), _ = read_all("c.txt")
    assert sentence.text == "a\tb c" and sentence.location == "c.txt:1"


# --- SentEval --------------------------------------------------------------------------------


def test_senteval_fields(tmp_path):
    path = write(tmp_path / "probe.txt", "tr\t0\tShort one.\nva\tPRES\tIt goes on.\nte\t3\t  Padded sentence .  \n")
    sentences, report = read_all(path)
    assert [(s.split, s.label, s.text) for s in sentences] == [
        ("tr", "0", "Short one."),
        ("va", "PRES", "It goes on."),
        ("te", "3", "Padded sentence ."),
    ]
    assert sentences[1].location == f"{path}:2" and sentences[1].words is None
    assert report.skipped == []


def test_senteval_skips_malformed_lines_with_their_locations(tmp_path):
    path = write(
        tmp_path / "probe.tsv",
        "tr\t0\tFine here.\n"
        "tr\t1\n"  # 2 fields
        "tr\t1\ttoo\tmany\n"  # 4 fields
        "\n"  # blank: neither a sentence nor a skip
        "dev\t1\tWrong split.\n"
        "va\t2\t   \n"  # empty sentence
        "te\t\tNo label.\n"
        "te\t3\tFine again.\n",
    )
    sentences, report = read_all(path)
    assert [s.text for s in sentences] == ["Fine here.", "Fine again."]
    assert [location for location, _ in report.skipped] == [f"{path}:{n}" for n in (2, 3, 5, 6, 7)]
    reasons = [reason for _, reason in report.skipped]
    assert "found 2" in reasons[0] and "found 4" in reasons[1]
    assert "'dev'" in reasons[2] and "empty sentence" in reasons[3] and "label" in reasons[4]
    assert report.summary() == (
        f"read 2 sentences; skipped 5 (first: {path}:2: expected 3 tab-separated fields (split, label, sentence), found 2)"
    )


# --- CoNLL-U ---------------------------------------------------------------------------------


def test_conllu_words_tags_and_tree(tmp_path):
    path = write(tmp_path / "t.conllu", CONLLU)
    (first, second), report = read_all(path)
    assert report.skipped == []
    assert first.text == "The keys are here."  # from `# text =`
    assert first.words == ("The", "keys", "are", "here", ".")
    assert first.upos == ("DET", "NOUN", "AUX", "ADV", "PUNCT")
    assert first.xpos == ("DT", "NNS", "VBP", "RB", ".")
    assert first.heads == (2, 4, 4, 0, 4)
    assert first.deprels == ("det", "nsubj", "cop", "root", "punct")
    assert first.location == f"{path}:1" and first.label is None and first.split is None


def test_conllu_multiword_tokens_empty_nodes_and_space_after(tmp_path):
    path = write(tmp_path / "t.conllu", CONLLU)
    second = list(read_sentences(path))[1]
    assert second.words == ("do", "n't", "go", "there", "!")  # no `don't`, no empty node 3.1
    assert second.heads == (3, 3, 0, 3, 3)
    assert second.text == "don't go there!"  # no `# text`: the surface tokens, SpaceAfter=No honoured
    assert second.location == f"{path}:9"


def test_conllu_text_comment_is_preferred_to_the_forms(tmp_path):
    rows = ("1 Hello _ _ _ _ _ _ _ _", "2 , _ _ _ _ _ _ _ _", "3 world _ _ _ _ _ _ _ _")
    path = write(tmp_path / "t.conllu", block("# text = Hello,world", *rows))
    (sentence,), _ = read_all(path)
    assert sentence.text == "Hello,world" and sentence.words == ("Hello", ",", "world")


def test_conllu_unannotated_columns_are_none(tmp_path):
    path = write(tmp_path / "raw.conllu", block("1 Hello _ _ _ _ _ _ _ SpaceAfter=No", "2 ! _ _ _ _ _ _ _ _"))
    (sentence,), report = read_all(path)
    assert sentence.text == "Hello!" and sentence.words == ("Hello", "!")
    assert sentence.upos is sentence.xpos is sentence.heads is sentence.deprels is None
    assert report.skipped == []


def test_conllu_skips_bad_blocks_with_their_lines_and_goes_on(tmp_path):
    text = (
        GOOD  # lines 1-2
        + block("# sent_id = bad-head-value", "1 A a DET DT _ 2 det _ _", "2 b b NOUN NN _ x root _ _")  # 3-6: 5
        + GOOD  # 7-8
        + block("1 Past past ADJ JJ _ 0 root _ _", "2 it it PRON PRP _ 7 nsubj _ _")  # 9-11: 10
        + block("1 Round a DET DT _ 2 det _ _", "2 round b NOUN NN _ 1 root _ _")  # 12-14: a cycle
        + block("1 Few few ADJ JJ")  # 15-16: 5 columns
        + block("# text = nothing", "1-2 ab _ _ _ _ _ _ _ _")  # 17-19: no words
        + block("1 Gap gap NOUN NN _ 0 root _ _", "3 gap gap NOUN NN _ 1 dep _ _")  # 20-22
        + block("1 Half half NOUN NN _ 0 root _ _", "2 heads head NOUN NN _ _ dep _ _")  # 23-25
        + block("# just a comment block")  # 26-27: not a sentence, not a skip
        + GOOD  # 28-29
    )
    path = write(tmp_path / "bad.conllu", text)
    sentences, report = read_all(path)
    assert [s.location for s in sentences] == [f"{path}:1", f"{path}:7", f"{path}:28"]
    assert [location for location, _ in report.skipped] == [f"{path}:{n}" for n in (5, 10, 12, 15, 17, 21, 24)]
    reasons = [reason for _, reason in report.skipped]
    assert "not valid CoNLL-U" in reasons[0] and "head" in reasons[0]
    assert "HEAD 7" in reasons[1] and "2 words" in reasons[1]
    assert "cycle" in reasons[2]
    assert "expected 10" in reasons[3] and "found 5" in reasons[3]
    assert "no words" in reasons[4]
    assert "out of order" in reasons[5]
    assert "HEAD missing" in reasons[6]
    assert report.sentences == 3


def test_conllu_line_the_library_rejects_is_named(tmp_path):
    path = write(tmp_path / "bad.conllu", GOOD + "1 spaces instead of tabs\n\n" + GOOD)  # line 3
    sentences, report = read_all(path)
    assert len(sentences) == 2
    assert report.skipped[0][0] == f"{path}:3" and "not valid CoNLL-U" in report.skipped[0][1]


def test_conllu_several_roots_are_allowed(tmp_path):
    path = write(tmp_path / "two.conllu", block("1 Yes yes INTJ UH _ 0 root _ _", "2 no no INTJ UH _ 0 root _ _"))
    (sentence,), report = read_all(path)
    assert sentence.heads == (0, 0) and report.skipped == []


def test_conllu_plus_global_columns(tmp_path):
    text = "# global.columns = ID FORM UPOS HEAD DEPREL\n1\tGo\tVERB\t0\troot\n2\tnow\tADV\t1\tadvmod\n"
    (sentence,), report = read_all(write(tmp_path / "plus.conllu", text))
    assert sentence.words == ("Go", "now") and sentence.upos == ("VERB", "ADV")
    assert sentence.heads == (0, 1) and sentence.xpos is None and report.skipped == []


# --- format detection, limits, streaming -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("a.conllu", "anything\n", "conllu"),
        ("a.CONLL", "anything\n", "conllu"),
        ("a.tsv", "\n\ntr\t0\tA sentence.\n", "senteval"),
        ("a.txt", "va\tlabel\tA sentence.\n", "senteval"),
        ("a.tsv", "xx\t0\tA sentence.\n", "text"),
        ("a.txt", "The cat sat.\n", "text"),
        ("a.csv", "tr\t0\tA sentence.\n", "text"),
        ("a", "# sent_id = 1\n1\tGo\tgo\tVERB\tVB\t_\t0\troot\t_\t_\n", "conllu"),
        ("a.txt", "# a comment\nThe cat sat.\n", "text"),
        ("empty.txt", "", "text"),
    ],
)
def test_detect_format(tmp_path, name, content, expected):
    assert detect_format(write(tmp_path / name, content)) == expected


def test_explicit_format_wins_over_detection(tmp_path):
    path = write(tmp_path / "probe.tsv", "tr\t0\tA sentence.\n")
    (sentence,), _ = read_all(path, "text")
    assert sentence.text == "tr\t0\tA sentence." and sentence.label is None
    assert FORMATS == ("text", "conllu", "senteval")


def test_limit_stops_early(tmp_path):
    path = write(tmp_path / "c.txt", "".join(f"Sentence {i}.\n" for i in range(10)))
    sentences, report = read_all(path, limit=3)
    assert [s.text for s in sentences] == ["Sentence 0.", "Sentence 1.", "Sentence 2."]
    assert report.sentences == 3
    with pytest.raises(InputError):
        read_sentences(path, limit=0)


@pytest.mark.parametrize(
    ("name", "line", "format"),
    [
        ("big.txt", "A sentence that repeats many times over.\n", "text"),
        ("big.tsv", "tr\t1\tA sentence that repeats many times over.\n", "senteval"),
        ("big.conllu", "1\tWord\tword\tNOUN\tNN\t_\t0\troot\t_\t_\n\n", "conllu"),
    ],
)
def test_reading_streams_the_file(tmp_path, monkeypatch, name, line, format):
    """The first sentence of a 200,000-line file comes without reading the whole file."""
    path = write(tmp_path / name, line * 200_000)
    opened = []

    def recording_open(*args, **kwargs):
        handle = builtins.open(*args, **kwargs)
        opened.append(handle)
        return handle

    monkeypatch.setattr(corpus, "open", recording_open, raising=False)
    sentences = read_sentences(path)
    first = next(sentences)
    assert first.location == f"{path}:1"
    reading = [handle for handle in opened if not handle.closed]
    assert len(reading) == 1
    assert reading[0].tell() < 100_000 < path.stat().st_size
    sentences.close()
    assert reading[0].closed  # stopping early closes the file


def test_limit_closes_the_file(tmp_path, monkeypatch):
    path = write(tmp_path / "c.txt", "One.\nTwo.\nThree.\n")
    opened = []

    def recording_open(*args, **kwargs):
        opened.append(builtins.open(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(corpus, "open", recording_open, raising=False)
    assert len(list(read_sentences(path, limit=1))) == 1
    assert opened and all(handle.closed for handle in opened)


# --- encodings and line endings --------------------------------------------------------------


def test_crlf_and_bom(tmp_path):
    text = write(tmp_path / "c.txt", "\ufeffFirst line.\r\nSecond line.\r\n")
    assert [s.text for s in read_sentences(text)] == ["First line.", "Second line."]
    probe = write(tmp_path / "p.tsv", "\ufefftr\t0\tFirst one.\r\nte\t1\tSecond one.\r\n")
    assert detect_format(probe) == "senteval"
    assert [(s.split, s.text) for s in read_sentences(probe)] == [("tr", "First one."), ("te", "Second one.")]
    treebank = write(tmp_path / "t.conllu", "\ufeff" + CONLLU.replace("\n", "\r\n"))
    sentences, report = read_all(treebank)
    assert report.skipped == []
    assert sentences[0].text == "The keys are here." and sentences[0].deprels[-1] == "punct"
    assert sentences[1].text == "don't go there!" and sentences[1].location == f"{treebank}:9"


def test_not_utf8_names_the_line(tmp_path):
    path = write(tmp_path / "latin.txt", "Fine.\nStill fine.\nCaf\xe9 au lait.\n", encoding="latin-1")
    sentences = read_sentences(path)
    assert next(sentences).text == "Fine."
    with pytest.raises(CorpusError) as error:
        list(sentences)
    message = one_line(error)
    assert message.startswith(f"{path}:3: not UTF-8")
    assert "iconv -f latin1 -t utf-8" in message


# --- errors that stop ------------------------------------------------------------------------


def test_missing_file_fails_at_once(tmp_path):
    with pytest.raises(CorpusError) as error:
        read_sentences(tmp_path / "nope.txt")  # no next() needed
    assert one_line(error) == f"{tmp_path / 'nope.txt'}: no such file; check the path"
    with pytest.raises(CorpusError):
        detect_format(tmp_path / "nope.txt")


def test_directory(tmp_path):
    with pytest.raises(CorpusError) as error:
        read_sentences(tmp_path)
    assert "is a directory" in one_line(error)


def test_unreadable_file(tmp_path, monkeypatch):
    path = write(tmp_path / "secret.txt", "A sentence.\n")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(corpus, "open", refuse, raising=False)  # chmod does not bind for root
    with pytest.raises(CorpusError) as error:
        read_sentences(path)
    assert one_line(error).startswith(f"{path}: permission denied;")


def test_unknown_format(tmp_path):
    path = write(tmp_path / "c.txt", "A sentence.\n")
    with pytest.raises(CorpusError) as error:
        read_sentences(path, "xml")
    assert "unknown format 'xml'" in one_line(error) and "senteval" in str(error.value)


@pytest.mark.parametrize("content", ["", "\n\n  \n", "# only\n# comments\n"])
def test_no_sentences(tmp_path, content):
    path = write(tmp_path / "c.txt", content)
    with pytest.raises(CorpusError) as error:
        list(read_sentences(path))
    message = one_line(error)
    assert message.startswith(f"{path}: no sentences found") and "read it as conllu or senteval" in message


def test_no_sentences_names_the_first_skip(tmp_path):
    path = write(tmp_path / "d.tsv", "x\ty\nz\n")
    report = ReadReport()
    with pytest.raises(CorpusError) as error:
        list(read_sentences(path, "senteval", report=report))
    message = one_line(error)
    assert message.startswith(f"{path}: no sentences found as senteval (2 skipped, first: {path}:1: expected 3")
    assert message.endswith("read it as text or conllu")
    assert error.value.setting == "data_format"
    assert report.sentences == 0 and len(report.skipped) == 2


def test_report_summary_wording():
    first = ("data.tsv:17", "expected 3 tab-separated fields, found 2")
    report = ReadReport(sentences=1998, skipped=[first, ("data.tsv:40", "unknown split 'x'")])
    assert report.summary() == "read 1,998 sentences; skipped 2 (first: data.tsv:17: expected 3 tab-separated fields, found 2)"
    assert ReadReport(sentences=1).summary() == "read 1 sentence"


# --- the shipped samples ---------------------------------------------------------------------


def test_sample_text():
    path = sample_corpus()
    assert path.name == "sample.txt" and path == sample_corpus("text")
    sentences, report = read_all(path)
    assert report.skipped == [] and detect_format(path) == "text"
    assert len(sentences) >= 250
    lengths = [len(s.text.split()) for s in sentences]
    assert min(lengths) >= 3 and max(lengths) <= 45
    assert len({s.text for s in sentences}) == len(sentences)  # no repeats
    assert any(s.text.endswith("?") for s in sentences) and any('"' in s.text for s in sentences)


def test_sample_treebank_reads_as_164_trees():
    path = sample_corpus("conllu")
    sentences, report = read_all(path)
    assert report.skipped == [] and len(sentences) == 164
    for sentence in sentences:
        size = len(sentence.words)
        assert len(sentence.upos) == len(sentence.xpos) == len(sentence.heads) == len(sentence.deprels) == size
        assert sentence.heads.count(0) == 1
        assert sentence.deprels[sentence.heads.index(0)] == "root"
        assert "_" not in sentence.upos + sentence.xpos + sentence.deprels


def test_sample_senteval_task():
    path = sample_corpus("senteval")
    sentences, report = read_all(path)
    assert report.skipped == [] and detect_format(path) == "senteval" and len(sentences) == 60
    splits = [s.split for s in sentences]
    assert (splits.count("tr"), splits.count("va"), splits.count("te")) == (42, 9, 9)
    for sentence in sentences:
        words = len(sentence.text.split())
        assert sentence.label == str(0 if words <= 6 else 1 if words <= 11 else 2 if words <= 17 else 3)
    assert {s.label for s in sentences if s.split == "te"} == {"0", "1", "2", "3"}


def test_unknown_sample_format():
    with pytest.raises(InputError):
        sample_corpus("xml")


def test_import_loads_neither_torch_nor_textual():
    code = "import bertscope.data.corpus, sys; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert not {"torch", "transformers", "textual", "numpy"} & loaded


@pytest.mark.parametrize("column", ["id", "head"])
def test_ids_and_heads_read_as_the_conllu_library_reads_them(column):
    """The plain-number shortcut gives the library's value, or its error, for every kind of ID and HEAD."""
    from conllu.exceptions import ParseException
    from conllu.parser import DEFAULT_FIELD_PARSERS

    from bertscope.data.corpus import _FIELD_PARSERS

    def outcome(parser, value):
        try:
            return parser([value], 0)
        except ParseException as error:
            return f"ParseException: {error}"

    for value in ("1", "0", "10", "01", "007", "1-2", "3-2", "1.1", "0.1", "_", "", "-1", "-0", "x", "١", "²", "1 "):
        assert outcome(_FIELD_PARSERS[column], value) == outcome(DEFAULT_FIELD_PARSERS[column], value), value
