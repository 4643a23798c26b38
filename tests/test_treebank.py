"""The built-in treebank: valid trees, labels right by construction, stable, readable as CoNLL-U."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import subprocess
import sys

import conllu
import pytest
from click.testing import CliRunner

from bertscope.base.errors import InputError
from bertscope.cli import main
from bertscope.data import probing_tasks
from bertscope.data.corpus import Sentence, read_sentences
from bertscope.data.treebank import DEFAULT_SENTENCES, MAX_WORDS, MIN_WORDS, generate_treebank, write_conllu


@pytest.fixture(scope="module")
def treebank() -> list[Sentence]:
    return generate_treebank(DEFAULT_SENTENCES)


def depths(heads: tuple[int, ...]) -> list[int]:
    """Edges from each word up to the root; fails on a cycle or a head out of range."""
    result = []
    for start in range(len(heads)):
        depth, word, seen = 0, start, set()
        while heads[word] != 0:
            assert word not in seen, f"cycle through word {start + 1}"
            assert 1 <= heads[word] <= len(heads), f"head {heads[word]} out of range"
            seen.add(word)
            word, depth = heads[word] - 1, depth + 1
        result.append(depth)
    return result


def test_every_sentence_is_one_valid_projective_tree():
    treebank = generate_treebank(6000, seed=3)
    assert len(treebank) == 6000
    for sentence in treebank:
        n = len(sentence.words)
        assert MIN_WORDS <= n <= MAX_WORDS
        assert len(sentence.upos) == len(sentence.xpos) == len(sentence.heads) == len(sentence.deprels) == n
        assert sentence.heads.count(0) == 1 and sentence.deprels.count("root") == 1
        assert sentence.deprels[sentence.heads.index(0)] == "root"
        depths(sentence.heads)
        for dependent, head in enumerate(sentence.heads, start=1):  # no arc crosses another
            low, high = sorted((dependent, head))
            inside = range(low + 1, high)
            assert all(low <= sentence.heads[word - 1] <= high for word in inside if head), sentence.text


def test_text_is_the_words_as_english_writes_them(treebank):
    for sentence in treebank:
        rebuilt = " ".join(sentence.words)
        for mark in (" .", " ,", " ?"):
            rebuilt = rebuilt.replace(mark, mark[1])
        assert sentence.text == rebuilt
        assert sentence.text[0].isupper() and sentence.words[-1] in (".", "?")
    assert len({sentence.text for sentence in treebank}) == len(treebank)  # no sentence twice
    assert [sentence.location for sentence in treebank[:2]] == ["builtin:treebank:1", "builtin:treebank:2"]


# Hand-checked against the UD v2 guidelines and EWT/GUM practice, one construction each.
HAND_CHECKED = {
    "Our woman who was happy rested.": """
        Our PRON PRP$ 2 nmod:poss | woman NOUN NN 6 nsubj | who PRON WP 5 nsubj | was AUX VBD 5 cop |
        happy ADJ JJ 2 acl:relcl | rested VERB VBD 0 root | . PUNCT . 6 punct""",
    "Those artists that we liked were bakers.": """
        Those DET DT 2 det | artists NOUN NNS 7 nsubj | that PRON WDT 5 obj | we PRON PRP 5 nsubj |
        liked VERB VBD 2 acl:relcl | were AUX VBD 7 cop | bakers NOUN NNS 0 root | . PUNCT . 7 punct""",
    "Although James is happy, Maria rests.": """
        Although SCONJ IN 4 mark | James PROPN NNP 4 nsubj | is AUX VBZ 4 cop | happy ADJ JJ 7 advcl |
        , PUNCT , 4 punct | Maria PROPN NNP 7 nsubj | rests VERB VBZ 0 root | . PUNCT . 7 punct""",
    "She smiles, and the baker was old.": """
        She PRON PRP 2 nsubj | smiles VERB VBZ 0 root | , PUNCT , 8 punct | and CCONJ CC 8 cc |
        the DET DT 6 det | baker NOUN NN 8 nsubj | was AUX VBD 8 cop | old ADJ JJ 2 conj | . PUNCT . 2 punct""",
    "Do they want them?": """
        Do AUX VBP 3 aux | they PRON PRP 3 nsubj | want VERB VB 0 root | them PRON PRP 3 obj | ? PUNCT . 3 punct""",
    "They like to clean her cans.": """
        They PRON PRP 2 nsubj | like VERB VBP 0 root | to PART TO 4 mark | clean VERB VB 2 xcomp |
        her PRON PRP$ 6 nmod:poss | cans NOUN NNS 4 obj | . PUNCT . 2 punct""",
    "Our boy did not know the teacher was young.": """
        Our PRON PRP$ 2 nmod:poss | boy NOUN NN 5 nsubj | did AUX VBD 5 aux | not PART RB 5 advmod |
        know VERB VB 0 root | the DET DT 7 det | teacher NOUN NN 9 nsubj | was AUX VBD 9 cop |
        young ADJ JJ 5 ccomp | . PUNCT . 5 punct""",
}


@pytest.mark.parametrize("text", HAND_CHECKED)
def test_hand_checked_sentences(treebank, text):
    sentence = next(sentence for sentence in treebank if sentence.text == text)
    expected = [row.split() for row in HAND_CHECKED[text].split("|")]
    got = [list(row) for row in zip(sentence.words, sentence.upos, sentence.xpos, sentence.heads, sentence.deprels)]
    assert got == [[form, upos, xpos, int(head), deprel] for form, upos, xpos, head, deprel in expected]


UPOS_OF_XPOS = {
    "DT": {"DET"}, "JJ": {"ADJ"}, "NN": {"NOUN"}, "NNS": {"NOUN"}, "NNP": {"PROPN"}, "PRP": {"PRON"},
    "PRP$": {"PRON"}, "WP": {"PRON"}, "WDT": {"PRON"}, "VB": {"VERB", "AUX"}, "VBD": {"VERB", "AUX"},
    "VBZ": {"VERB", "AUX"}, "VBP": {"VERB", "AUX"}, "MD": {"AUX"}, "IN": {"ADP", "SCONJ"}, "RB": {"ADV", "PART"},
    "CC": {"CCONJ"}, "CD": {"NUM"}, "TO": {"PART"}, ".": {"PUNCT"}, ",": {"PUNCT"},
}  # fmt: skip
UPOS_OF_DEPREL = {
    "det": {"DET"}, "nummod": {"NUM"}, "amod": {"ADJ"}, "case": {"ADP"}, "cop": {"AUX"}, "aux": {"AUX"},
    "cc": {"CCONJ"}, "mark": {"SCONJ", "PART"}, "punct": {"PUNCT"}, "nmod:poss": {"PRON"},
    "nsubj": {"NOUN", "PROPN", "PRON"}, "obj": {"NOUN", "PROPN", "PRON"}, "advmod": {"ADV", "PART"},
    "nmod": {"NOUN", "PROPN", "PRON"}, "obl": {"NOUN", "PROPN", "PRON"},
}  # fmt: skip
BEFORE_HEAD = {"det", "nummod", "amod", "case", "cop", "aux", "cc", "mark", "nmod:poss", "nsubj"}
AFTER_HEAD = {"obj", "nmod", "acl:relcl", "xcomp", "ccomp", "conj"}
LEAVES = {"DET", "ADP", "AUX", "CCONJ", "SCONJ", "PART", "PUNCT", "NUM"}


def test_labels_agree_with_each_other_and_with_the_lexicon(treebank):
    nouns = probing_tasks._NOUNS
    singular, plural = {n.singular for n in nouns}, {n.plural for n in nouns}
    verbs = probing_tasks._VERBS
    forms = {
        "VBZ": {v.present3 for v in verbs} | {"is", "does"}, "VBP": {v.present for v in verbs} | {"am", "are", "do"},
        "VBD": {v.past for v in verbs} | {"was", "were", "did"}, "VB": {v.present for v in verbs} | {"be"},
        "DT": {"the", "a", "an", "this", "that", "these", "those", "some", "every"},
    }  # fmt: skip
    for sentence in treebank:
        words = [word.lower() if i == 0 and word != "I" else word for i, word in enumerate(sentence.words)]
        rows = list(zip(words, sentence.upos, sentence.xpos, sentence.heads, sentence.deprels))
        for position, (word, upos, xpos, head, deprel) in enumerate(rows, start=1):
            where = f"{sentence.text!r} word {position} {word!r}"
            assert upos in UPOS_OF_XPOS[xpos], where
            assert upos in UPOS_OF_DEPREL.get(deprel, {upos}), where
            if deprel in BEFORE_HEAD:
                assert position < head, where
            if deprel in AFTER_HEAD and xpos not in ("WDT", "WP"):  # a relative pronoun comes first
                assert position > head, where
            if upos in LEAVES:
                assert position not in sentence.heads, where
            if deprel == "cop":
                assert word in ("is", "are", "am", "was", "were", "be"), where
            if xpos in ("VBZ", "VBD") or (xpos in ("VBP", "VB") and upos == "VERB"):
                extra = {"says", "thinks", "knows", "hopes", "wants", "tries", "likes", "starts", "needs",
                         "said", "thought", "knew", "hoped", "tried", "started", "needed"}  # fmt: skip
                base = {"say", "think", "know", "hope", "want", "try", "like", "start", "need"}
                assert word in forms[xpos] | extra | base, where
            if xpos == "NN" and upos == "NOUN" and word not in ("morning", "evening", "noon", "night", "lunch", "dinner"):
                assert word in singular | {"watch", "saw", "can", "paint", "light"}, where
            if xpos == "NNS":
                assert word in plural | {"watches", "saws", "cans", "paints", "lights"}, where
            if xpos == "DT":
                assert word in forms["DT"], where


def test_corpus_statistics_are_varied(treebank):
    lengths = [len(sentence.words) for sentence in treebank]
    deepest = [max(depths(sentence.heads)) for sentence in treebank]
    assert 11 <= sum(lengths) / len(lengths) <= 16 and min(lengths) == MIN_WORDS and max(lengths) == MAX_WORDS
    assert sum(length >= 20 for length in lengths) > 0.1 * len(lengths)  # a long tail, as in real text
    assert max(deepest) >= 7 and sum(depth >= 5 for depth in deepest) > 0.05 * len(treebank)
    upos = collections.Counter(tag for sentence in treebank for tag in sentence.upos)
    assert set(upos) == {"DET", "ADJ", "NOUN", "PROPN", "PRON", "VERB", "AUX", "ADP", "ADV", "SCONJ", "CCONJ",
                         "NUM", "PART", "PUNCT"}  # fmt: skip
    assert min(upos.values()) > 500  # every class has enough examples to train a probe on
    deprels = collections.Counter(rel for sentence in treebank for rel in sentence.deprels)
    assert set(UPOS_OF_DEPREL) | AFTER_HEAD | {"root", "advcl"} == set(deprels)
    assert deprels["acl:relcl"] > 300 and deprels["advcl"] > 300 and deprels["conj"] > 300
    assert len({sentence.upos for sentence in treebank}) > 0.8 * len(treebank)  # trees are not all alike


def test_a_word_form_does_not_settle_its_tag(treebank):
    tags: dict[str, set[str]] = collections.defaultdict(set)
    for sentence in treebank:
        for word, upos, xpos in zip(sentence.words, sentence.upos, sentence.xpos):
            tags[word.lower()].add(f"{upos}/{xpos}")
    assert {"DET/DT", "PRON/WDT", "SCONJ/IN"} <= tags["that"]
    assert {"PRON/PRP$", "PRON/PRP"} <= tags["her"]
    assert {"PART/TO", "ADP/IN"} <= tags["to"]
    assert {"VERB/VBD", "NOUN/NN"} <= tags["saw"] and {"AUX/MD", "NOUN/NN"} <= tags["can"]
    assert {"VERB/VBP", "VERB/VB"} <= tags["see"]  # XPOS needs the context: `they see` / `will see`


def test_same_seed_same_treebank_on_any_python():
    first = generate_treebank(300, seed=7)
    assert generate_treebank(300, seed=7) == first
    assert generate_treebank(100, seed=7) == first[:100]  # a smaller treebank starts the larger one
    assert generate_treebank(300, seed=8) != first
    code = (
        "import hashlib, json, random; random.seed(12345)\n"
        "from bertscope.data.treebank import generate_treebank\n"
        "print(hashlib.sha256(json.dumps([[s.words, s.upos, s.xpos, s.heads, s.deprels] "
        "for s in generate_treebank(300, seed=7)]).encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "99"}
    digest = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    local = json.dumps([[list(s.words), list(s.upos), list(s.xpos), list(s.heads), list(s.deprels)] for s in first])
    assert digest.strip() == hashlib.sha256(local.encode()).hexdigest()


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "10"])
def test_bad_sizes(size):
    with pytest.raises(InputError, match="whole number 1 or more"):
        generate_treebank(size)


def test_written_conllu_parses_with_the_library_and_reads_back(tmp_path):
    sentences = generate_treebank(200, seed=1)
    path = tmp_path / "treebank.conllu"
    assert write_conllu(path, sentences) == 200
    parsed = conllu.parse(path.read_text(encoding="utf-8"))
    assert len(parsed) == 200
    assert parsed[0].metadata == {"sent_id": "treebank-1", "text": sentences[0].text}
    for tokens, sentence in zip(parsed, sentences):
        assert [t["form"] for t in tokens] == list(sentence.words)
        assert [t["head"] for t in tokens] == list(sentence.heads)
        assert [t["deprel"] for t in tokens] == list(sentence.deprels)
        spaced = "".join(t["form"] + ("" if (t["misc"] or {}).get("SpaceAfter") == "No" else " ") for t in tokens)
        assert spaced.strip() == sentence.text
    back = list(read_sentences(path))
    assert [(s.text, s.words, s.upos, s.xpos, s.heads, s.deprels) for s in back] == [
        (s.text, s.words, s.upos, s.xpos, s.heads, s.deprels) for s in sentences
    ]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "treebank.conllu"
    path.write_text("old\n")
    broken = [*generate_treebank(5), Sentence("No tags.", words=("No", "tags", "."))]
    with pytest.raises(InputError, match="needs words, UPOS, XPOS, heads and relations"):
        write_conllu(path, broken)
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["treebank.conllu"]


def test_import_loads_neither_torch_nor_textual():
    code = "import bertscope.data.treebank, sys; print(' '.join(sys.modules))"
    modules = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "torch" not in modules and "textual" not in modules


# --- the command line ---------------------------------------------------------------------------


def test_treebank_command_writes_conllu(tmp_path):
    path = tmp_path / "tb.conllu"
    result = CliRunner().invoke(main, ["treebank", "-o", str(path), "-n", "50", "--seed", "2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stderr and "50 sentences" in result.stderr
    back = list(read_sentences(path))
    assert [s.words for s in back] == [s.words for s in generate_treebank(50, seed=2)]
    assert path.read_text().startswith("# sent_id = bertscope-s2-1\n# text = ")


def test_treebank_command_default_size_is_the_probe_default():
    option = next(p for p in main.commands["treebank"].params if p.name == "sentences")
    assert option.default == DEFAULT_SENTENCES


@pytest.mark.parametrize("args, fragment", [(["-o", "DIR"], "is a directory"), (["-o", "DIR/no/x.conllu"], "does not exist")])
def test_treebank_command_bad_output(tmp_path, args, fragment):
    args = [arg.replace("DIR", str(tmp_path)) for arg in args]
    result = CliRunner().invoke(main, ["treebank", *args], catch_exceptions=False)
    assert result.exit_code == 2 and fragment in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("task, metric", [("upos", "accuracy"), ("depth", "spearman")])
def test_probe_without_data_uses_the_treebank(tiny_bert_dir, tmp_path, task, metric):
    result = CliRunner().invoke(
        main,
        [
            "probe",
            "--task",
            task,
            "--limit",
            "60",
            "-m",
            str(tiny_bert_dir),
            "--cache-dir",
            str(tmp_path),
            "--no-random-baseline",
            "--no-control",
            "--json",
        ],
        catch_exceptions=False,  # fmt: skip
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["metric"] == metric and data["data"] == "built-in treebank (60 sentences)"
    assert data["notes"][0].startswith("no data given: probing a generated treebank of 60 sentences")
    words = sum(len(s.words) for s in generate_treebank(60))
    assert data["counts"]["train"] + data["counts"]["dev"] + data["counts"]["test"] == (words if task == "upos" else 60)
