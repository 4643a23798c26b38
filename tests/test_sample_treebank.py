"""The shipped sample treebank is well-formed UD English and big enough to probe with.

Checked with the `conllu` library directly (not bertscope's reader), so a mistake in the
file cannot hide behind a lenient reader.
"""

from collections import Counter

import conllu
import pytest

from bertscope.data.corpus import sample_corpus

UPOS = set("ADJ ADP ADV AUX CCONJ DET INTJ NOUN NUM PART PRON PROPN PUNCT SCONJ SYM VERB X".split())
PENN = set(
    "CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB RBR RBS RP SYM TO UH "
    "VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB , . : `` '' -LRB- -RRB- HYPH NFP ADD AFX GW XX $ #".split()
)
DEPRELS = set(
    "acl advcl advmod amod appos aux case cc ccomp clf compound conj cop csubj dep det discourse dislocated "
    "expl fixed flat goeswith iobj list mark nmod nsubj nummod obj obl orphan parataxis punct reparandum "
    "root vocative xcomp "
    # the subtypes UD English uses
    "acl:relcl aux:pass cc:preconj compound:prt csubj:pass det:predet flat:foreign nmod:poss nmod:tmod "
    "nmod:npmod nsubj:pass obl:agent obl:npmod obl:tmod".split()
)
# relations a probe of English syntax should see more than once or twice
COMMON_DEPRELS = (
    "nsubj obj iobj obl nmod amod advmod det case mark cc conj aux cop compound acl acl:relcl advcl xcomp "
    "ccomp nummod appos punct root nsubj:pass aux:pass expl fixed flat parataxis discourse csubj".split()
)


@pytest.fixture(scope="module")
def sentences():
    return conllu.parse(sample_corpus("conllu").read_text(encoding="utf-8"))


def words_of(sentence):
    return [token for token in sentence if isinstance(token["id"], int)]


def test_every_sentence_is_one_tree(sentences):
    for sentence in sentences:
        words = words_of(sentence)
        heads = {word["id"]: word["head"] for word in words}
        assert [word["id"] for word in words] == list(range(1, len(words) + 1))
        roots = [word for word in words if word["head"] == 0]
        assert len(roots) == 1 and roots[0]["deprel"] == "root", sentence.metadata["sent_id"]
        assert all(word["deprel"] != "root" for word in words if word["head"] != 0)
        for ident in heads:  # every word reaches the root without a cycle
            seen = set()
            while ident:
                assert ident not in seen and 0 <= heads[ident] <= len(words), sentence.metadata["sent_id"]
                seen.add(ident)
                ident = heads[ident]


def test_text_comment_is_the_words_joined_by_space_after(sentences):
    for sentence in sentences:
        joined = "".join(word["form"] + ("" if (word["misc"] or {}).get("SpaceAfter") == "No" else " ") for word in words_of(sentence))
        assert joined.strip() == sentence.metadata["text"]


def test_labels_are_ud_v2_and_penn(sentences):
    words = [word for sentence in sentences for word in words_of(sentence)]
    assert {word["upos"] for word in words} <= UPOS
    assert {word["xpos"] for word in words} <= PENN
    assert {word["deprel"] for word in words} <= DEPRELS
    assert all(word["lemma"] not in (None, "_") for word in words)


def test_big_and_varied_enough_to_probe(sentences):
    assert len(sentences) >= 150
    ids = [sentence.metadata["sent_id"] for sentence in sentences]
    texts = [sentence.metadata["text"] for sentence in sentences]
    assert len(set(ids)) == len(ids) and len(set(texts)) == len(texts)
    lengths = [sum(word["upos"] != "PUNCT" for word in words_of(sentence)) for sentence in sentences]
    assert min(lengths) <= 4 and max(lengths) >= 30
    words = [word for sentence in sentences for word in words_of(sentence)]
    upos = Counter(word["upos"] for word in words)
    assert {tag: upos[tag] for tag in UPOS if upos[tag] < 5} == {}  # every UD tag English uses, 5 times or more
    deprels = Counter(word["deprel"] for word in words)
    assert {rel: deprels[rel] for rel in COMMON_DEPRELS if deprels[rel] < 4} == {}
    assert sum(text.endswith("?") for text in texts) >= 10 and any("(" in text for text in texts)
