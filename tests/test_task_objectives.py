"""The objectives of fine-tuned tasks (token-classification, similarity, embedding), held against the tests' own
computations: first-piece cross-entropy, seqeval's F1, sentence-transformers' pooling, scipy's Spearman, and a head's
ablation delta from a forward with that head's output zeroed by a hook of the test's own."""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr

import bertscope
from bertscope.analyses.importance.objectives import make_objective
from bertscope.analyses.importance.run import ablation_importance, head_importance, measure
from bertscope.analyses.importance.tagging import f1_score, scheme_of
from bertscope.base.errors import InputError
from bertscope.data.corpus import Sentence
from bertscope.model.session import Session
from tests.family_models import FAMILIES, save_tiny_family
from tests.helpers.cli import assert_one_line_error
from tests.helpers.models import NER_LABELS, UPOS_TAGS, save_tiny, save_tiny_ner

NER_FILE = """-DOCSTART- -X- -X- O

Dante NNP B-NP B-PER
was VBD B-VP O
born VBN I-VP O
in IN B-PP O
Florence NNP B-NP B-LOC
. . O O

John NNP B-NP B-PER
Smithers NNP I-NP I-PER
visited VBD B-VP O
New NNP B-NP B-LOC
York NNP I-NP I-LOC
yesterday NN B-NP O

Rain fell all night over Ravenna .
"""
TAGGED = [
    (("Dante", "was", "born", "in", "Florence", "."), ("B-PER", "O", "O", "O", "B-LOC", "O")),
    (("John", "Smithers", "visited", "New", "York", "yesterday"), ("B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O")),
    (("Unbelievably", ",", "Maria", "stayed", "in", "Reykjavik"), ("O", "O", "B-PER", "O", "O", "B-LOC")),
]
PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on the mat.", 4.6),
    ("The cat sat on the mat.", "Interest rates rose again.", 0.2),
    ("Dogs bark loudly.", "Dogs make noise when they bark.", 4.0),
    ("Where did you leave the umbrella?", "It rained all day.", 1.0),
    ("The train leaves at seven.", "At seven the train departs.", 4.8),
    ("The museum is closed on Mondays.", "The museum has many paintings.", 1.6),
]


@pytest.fixture(scope="module")
def ner_dir(tmp_path_factory):
    return save_tiny_ner(tmp_path_factory.mktemp("ner"))


@pytest.fixture(scope="module")
def ner_session(ner_dir):
    return Session.open(str(ner_dir), device="cpu")


@pytest.fixture(scope="module")
def ner_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ner-data") / "ner.txt"
    path.write_text(NER_FILE.replace("Rain fell all night over Ravenna .\n", ""))
    return str(path)


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sts") / "pairs.tsv"
    path.write_text("genre\tsentence1\tsentence2\tscore\n" + "".join(f"news\t{a}\t{b}\t{s}\n" for a, b, s in PAIRS))
    return str(path)


def tagged_sentences():
    return [Sentence(" ".join(words), location=f"s{i}", words=words, tags=tags) for i, (words, tags) in enumerate(TAGGED)]


def pair_sentences():
    return [Sentence(a, pair=b, label=str(score), location=f"p{i}") for i, (a, b, score) in enumerate(PAIRS)]


def zeroed_head(model, layer: int, head: int):
    """A hook of the test's own: the head's slice of the context entering layer `layer`'s attention output projection
    set to zero (what Michel et al.'s head mask does)."""
    dense = model.base_model.encoder.layer[layer].attention.output.dense
    width = model.config.hidden_size // model.config.num_attention_heads

    def hook(module, inputs):
        context = inputs[0].clone()
        context[..., head * width : (head + 1) * width] = 0
        return (context,)

    return dense.register_forward_pre_hook(hook)


def first_piece_reference(session):
    """The corpus's mean cross-entropy over each word's first piece and the first pieces' predicted labels, computed
    with transformers alone."""
    tokenizer, model = session.tokenizer, session.model
    index = {name: i for i, name in enumerate(NER_LABELS)}
    losses, predicted = [], []
    with torch.no_grad():
        for words, tags in TAGGED:
            encoding = tokenizer(list(words), is_split_into_words=True, return_tensors="pt")
            logits = model(**encoding).logits[0]
            word_ids = encoding.word_ids(0)
            firsts = [p for p, w in enumerate(word_ids) if w is not None and (p == 0 or word_ids[p - 1] != w)]
            gold = torch.tensor([index[tags[word_ids[p]]] for p in firsts])
            losses.append(F.cross_entropy(logits[firsts], gold, reduction="none"))
            predicted.append([NER_LABELS[i] for i in logits[firsts].argmax(-1).tolist()])
    return float(torch.cat(losses).mean()), predicted


def test_token_classification_loss_is_first_piece_cross_entropy_and_its_metric_seqeval_f1(ner_session):
    from seqeval.metrics import f1_score as seqeval_f1

    objective = make_objective(ner_session, "token-classification", tagged_sentences(), batch_size=2)
    loss, predicted = first_piece_reference(ner_session)
    measured = measure(objective)
    assert measured.loss == pytest.approx(loss, rel=1e-5)
    assert measured.metric == pytest.approx(seqeval_f1([list(tags) for _, tags in TAGGED], predicted))
    assert objective.metric == "entity F1 (IOB2)"


@pytest.mark.parametrize(
    "labels",
    [["O", "B-A", "I-A", "B-B", "I-B"], ["O", "B-A", "I-A", "E-A", "S-A", "B-B", "I-B", "E-B", "S-B"], ["O", "I-A", "I-B", "B-A"]],
    ids=["IOB2", "BIOES", "IOB1"],
)
def test_entity_f1_is_seqeval_s(labels):
    from seqeval.metrics import f1_score as seqeval_f1

    draw = random.Random(len(labels))
    for _ in range(200):
        gold = [[draw.choice(labels) for _ in range(draw.randint(0, 9))] for _ in range(draw.randint(1, 4))]
        guessed = [[draw.choice(labels) for _ in sentence] for sentence in gold]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seqeval warns where there is no entity at all (its F1 is then 0, as ours)
            expected = seqeval_f1(gold, guessed)
        assert f1_score(gold, guessed) == pytest.approx(expected, abs=1e-12)


def test_the_scheme_is_named_from_the_labels_and_the_data():
    assert scheme_of(["O", "B-PER", "I-PER"], [["B-PER", "I-PER", "O"]]) == "IOB2"
    assert scheme_of(["O", "B-PER", "I-PER"], [["I-PER", "I-PER", "O"]]) == "IOB1"
    assert scheme_of(["O", "B-PER", "I-PER", "E-PER", "S-PER"], []) == "BIOES"
    assert scheme_of(["NOUN", "VERB", "DET"], [["NOUN"]]) is None


def test_pooling_is_sentence_transformers_own(bundled_session):
    from sentence_transformers import SentenceTransformer

    from bertscope.model.model_files import bundled_model_dir

    texts = ["The cat sat on the warm windowsill.", "Dogs bark.", "Where did you leave the umbrella you borrowed yesterday?"]
    reference = SentenceTransformer(str(bundled_model_dir()), device="cpu").encode(texts, convert_to_numpy=True)
    inputs = bundled_session.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = bundled_session.run(dict(inputs), hidden_states=False, encoder_only=True).last_hidden_state
        ours = bundled_session.pooling(hidden, inputs["attention_mask"]).numpy()
    assert "mean" in bundled_session.pooling.source and bundled_session.pooling.normalize
    np.testing.assert_allclose(ours, reference, atol=2e-5)


@pytest.mark.parametrize("modes", [("cls",), ("max",), ("mean_sqrt_len_tokens",), ("weightedmean",), ("lasttoken",), ("cls", "mean")])
def test_every_pooling_mode_is_sentence_transformers_pooling_s(modes):
    from sentence_transformers.sentence_transformer.modules import Pooling

    from bertscope.model.pooling import SentencePooling

    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 7, 8, generator=generator)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5])
    theirs = Pooling(8, pooling_mode=modes if len(modes) > 1 else modes[0])({"token_embeddings": hidden, "attention_mask": mask})
    np.testing.assert_allclose(SentencePooling(modes)(hidden, mask).numpy(), theirs["sentence_embedding"].numpy(), atol=1e-6)


def test_similarity_is_the_cosine_error_and_spearman_of_mean_pooled_sentences(tiny_session):
    objective = make_objective(tiny_session, "similarity", pair_sentences(), batch_size=4)
    with torch.no_grad():
        pooled = [tiny_session.model(**tiny_session.tokenizer([a, b], padding=True, return_tensors="pt")) for a, b, _ in PAIRS]
    masks = [tiny_session.tokenizer([a, b], padding=True, return_tensors="pt")["attention_mask"] for a, b, _ in PAIRS]
    cosines = []
    for output, mask in zip(pooled, masks):
        mean = (output.last_hidden_state * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        cosines.append(float(F.cosine_similarity(mean[0], mean[1], dim=0)))
    gold = np.array([score for _, _, score in PAIRS])
    measured = measure(objective)
    assert measured.loss == pytest.approx(float(np.mean((np.array(cosines) - gold / 5) ** 2)), rel=1e-5)
    assert measured.metric == pytest.approx(spearmanr(cosines, gold).statistic)
    assert "divided by 5" in objective.notes[0] and "mean pooling" in objective.notes[0]


def own_loss(session, name: str, hook_head: tuple[int, int] | None) -> float:
    """The objective's loss from transformers' forward alone, with `hook_head` zeroed by the test's hook."""
    handle = zeroed_head(session.model, *hook_head) if hook_head else None
    try:
        if name == "token-classification":
            return first_piece_reference(session)[0]
        with torch.no_grad():
            values = []
            for a, b, score in PAIRS:
                inputs = session.tokenizer([a, b], padding=True, return_tensors="pt")
                hidden = session.model(**inputs).last_hidden_state
                mask = inputs["attention_mask"][..., None]
                mean = (hidden * mask).sum(1) / mask.sum(1)
                values.append((float(F.cosine_similarity(mean[0], mean[1], dim=0)) - score / 5) ** 2)
            return float(np.mean(values))
    finally:
        if handle is not None:
            handle.remove()


@pytest.mark.parametrize("name", ["token-classification", "similarity"])
def test_one_head_s_ablation_delta_is_a_hooked_forward_s(name, ner_session, tiny_session):
    session = ner_session if name == "token-classification" else tiny_session
    sentences = tagged_sentences() if name == "token-classification" else pair_sentences()
    objective = make_objective(session, name, sentences, batch_size=2)
    result = list(ablation_importance(objective, normalize=False, layers=False))[-1].result
    expected = own_loss(session, name, (1, 2)) - own_loss(session, name, None)
    assert result.raw[1, 2] == pytest.approx(expected, rel=1e-4, abs=1e-7)


def test_embedding_delta_is_the_turn_of_a_hooked_forward_s_embedding(tiny_session):
    texts = [a for a, _, _ in PAIRS[::2]]
    objective = make_objective(tiny_session, "embedding", [Sentence(t) for t in texts], batch_size=2)
    result = list(ablation_importance(objective, normalize=False, layers=False))[-1].result

    def embeddings(hooked: bool):
        handle = zeroed_head(tiny_session.model, 0, 1) if hooked else None
        try:
            with torch.no_grad():
                return [tiny_session.model(**tiny_session.tokenizer(t, return_tensors="pt")).last_hidden_state[0].mean(0) for t in texts]
        finally:
            if handle is not None:
                handle.remove()

    turns = [1 - float(F.cosine_similarity(a, b, dim=0)) for a, b in zip(embeddings(True), embeddings(False))]
    assert result.raw[0, 1] == pytest.approx(np.mean(turns), rel=1e-3, abs=1e-7)
    gradient = list(head_importance(objective, "gradient", normalize=False))[-1].result
    assert gradient.baseline_loss == 0 and gradient.baseline_metric == pytest.approx(1)
    # the first-order estimate ranks the heads as their exact turn does, roughly
    assert spearmanr(gradient.raw.ravel(), result.raw.ravel()).statistic > 0.5


def test_an_unknown_label_names_it_and_the_model_s_labels(ner_session):
    sentences = [Sentence("Ada wrote", location="f.txt:3", words=("Ada", "wrote"), tags=("B-PERSON", "O"))]
    with pytest.raises(InputError, match=r"^f.txt:3: label 'B-PERSON' is not one of the model's labels \(O, B-PER, I-PER, B-LOC, I-LOC\)$"):
        make_objective(ner_session, "token-classification", sentences)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_serves_the_task_objectives(family, tmp_path):
    session = Session.open(str(save_tiny_family(tmp_path / family, family, "ForTokenClassification")), device="cpu")
    assert session.is_token_classifier and session.label_names == ["LABEL_0", "LABEL_1", "LABEL_2"]
    tagged = [Sentence(" ".join(w), words=w, tags=tuple(f"LABEL_{len(x) % 3}" for x in w)) for w, _ in TAGGED]
    for name, sentences in (("token-classification", tagged), ("similarity", pair_sentences()), ("embedding", tagged)):
        objective = make_objective(session, name, sentences, batch_size=2)
        for method in ("gradient", "ablation"):
            result = list(head_importance(objective, method, normalize=False))[-1].result
            assert np.isfinite(result.raw).all() and np.isfinite(result.baseline_loss), (name, method)
    assert objective.name == "embedding" and measure(objective, session.mask("0:*,1:1")).loss > 0
    # patching's label metric reads the family's token head on the last hidden state: the model's own logits
    inputs = session.tokenize_batch(["Dante was born in Florence."])
    with torch.inference_mode():
        out = session.run(inputs)
        np.testing.assert_allclose(session.token_logits(out.hidden_states[-1]).numpy(), out.logits.float().numpy(), atol=1e-5)
    explained = bertscope.attribute(session, "Dante was born in Florence.", word=0, method="gradient-x-input")
    assert explained.target["kind"] == "token" and np.isfinite(explained.scores).all()


# --- the command line ------------------------------------------------------------------------------------


def test_importance_of_a_token_classifier_end_to_end(run, ner_dir, ner_file):
    result = run("importance", "-O", "token-classification", "--data", ner_file, "--method", "ablation", "-m", str(ner_dir), "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["objective"] == "token-classification" and payload["sentences"] == 2
    assert payload["metric"] == "entity F1 (IOB2)" and 0 <= payload["baseline"]["metric"] <= 1
    assert len(payload["heads"]) == 12 and len(payload["layers"]) == 3
    assert any("first word piece" in note for note in payload["notes"])


def test_prune_a_token_classifier(run, ner_dir, ner_file):
    curve = json.loads(
        run("prune", "-O", "token-classification", "--data", ner_file, "--curve", "--step", "0.5", "-m", str(ner_dir), "--json").stdout
    )
    assert [point["heads_pruned"] for point in curve["points"]] == [0, 6, 12] and curve["metric"] == "entity F1 (IOB2)"
    pruned = json.loads(
        run("prune", "-O", "token-classification", "--data", ner_file, "--fraction", "0.25", "-m", str(ner_dir), "--json").stdout
    )
    assert pruned["heads_pruned"] == 3 and pruned["before"]["loss"] == pytest.approx(curve["points"][0]["loss"])


def test_similarity_end_to_end(run, tiny_bert_dir, pairs_file):
    result = run("importance", "-O", "similarity", "--data", pairs_file, "-m", str(tiny_bert_dir), "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["metric"] == "Spearman's rho" and payload["sentences"] == len(PAIRS)
    table = run("importance", "-O", "similarity", "--data", pairs_file, "-m", str(tiny_bert_dir)).stdout
    assert f"{len(PAIRS)} sentence pairs · baseline loss" in table  # a pair is one item, named as such


def test_conllu_labels_from_a_column(run, tmp_path):
    from bertscope.data.corpus import sample_corpus

    upos = UPOS_TAGS
    directory = save_tiny(tmp_path / "pos", "BertForTokenClassification", num_labels=len(upos), id2label=dict(enumerate(upos)))
    arguments = ["importance", "-O", "token-classification", "--data", str(sample_corpus("conllu")), "--limit", "6", "-m", str(directory)]
    payload = json.loads(run(*arguments, "--label-column", "upos", "--json").stdout)
    assert payload["metric"] == "token accuracy" and payload["sentences"] == 6
    assert_one_line_error(run(*arguments, "--label-column", "deprel"), "is not one of the model's labels (ADJ, ADP")


def test_bad_inputs_are_one_line(run, ner_dir, ner_file, tiny_bert_dir, tmp_path):
    unknown = tmp_path / "unknown.txt"
    unknown.write_text("Ada B-PER\nLovelace I-PER\nwrote O\n\nin O\nLondon B-GPE\n")
    assert_one_line_error(
        run("importance", "-O", "token-classification", "--data", str(unknown), "-m", str(ner_dir)),
        "unknown.txt:5: label 'B-GPE' is not one of the model's labels (O, B-PER, I-PER, B-LOC, I-LOC)",
    )
    headless = tmp_path / "pairs.tsv"
    headless.write_text("first\tsecond\tgold\nA cat.\tA dog.\t2\n")
    assert_one_line_error(
        run("importance", "-O", "similarity", "--data", str(headless), "-m", str(tiny_bert_dir)), "no columns named sentence1"
    )
    assert_one_line_error(
        run("importance", "-O", "token-classification", "--data", ner_file, "-m", str(tiny_bert_dir)),
        "needs a token-classification model; BertModel is not one; objectives that work for this model: probe, preserve, similarity, embedding",
    )
    assert_one_line_error(
        run("importance", "-O", "token-classification", "--data", ner_file, "--label-column", "upos", "-m", str(ner_dir)),
        "a CoNLL-2003 file's labels are its last column",
    )
    assert_one_line_error(run("importance", "-O", "token-classification", "-m", str(ner_dir)), "needs tagged words")


def test_a_pair_s_gradient_is_through_one_gate_for_both_its_sentences(tiny_session):
    """Michel's |dL/dgate| of a pair: both sentences run under the same gate, so the gradient is the loss's change when
    that one gate moves (a central difference here), not one sentence's share of it."""
    objective = make_objective(tiny_session, "similarity", pair_sentences()[:1])
    result = list(head_importance(objective, "gradient", normalize=False))[-1].result
    (batch,) = list(objective.batches)
    layer, head = np.unravel_index(np.argmax(result.raw), result.raw.shape)
    step = 0.05

    def loss_at(gate: float) -> float:
        gates = torch.ones(tiny_session.num_layers, tiny_session.num_heads)
        gates[layer, head] = gate
        with torch.inference_mode():
            return float(objective.scores(batch, gates, "zero").loss.sum())

    assert result.raw[layer, head] == pytest.approx(abs(loss_at(1 + step) - loss_at(1 - step)) / (2 * step), rel=0.03)


def test_patching_measures_the_embedding_objective_s_cosine(tiny_session):
    from bertscope import api

    clean, corrupt = "The cat sat on the mat.", "The dog sat on the mat."
    result = api.patch(tiny_session, clean, corrupt, metric="embedding", sweep=("layers",))
    with torch.no_grad():
        clean_mean, corrupt_mean = (
            tiny_session.model(**tiny_session.tokenizer(t, return_tensors="pt")).last_hidden_state[0].mean(0) for t in (clean, corrupt)
        )
    assert result.clean_metric == pytest.approx(1) and result.corrupt_metric == pytest.approx(
        float(F.cosine_similarity(clean_mean, corrupt_mean, dim=0))
    )
    assert result.layers.shape == (tiny_session.num_layers, 2)


def test_a_conll_2003_file_named_conll_is_read_as_conll_2003(tmp_path):
    """CoNLL-2003 ships as `eng.train`, `*.txt` and `*.conll`; only CoNLL-U word lines make a file CoNLL-U."""
    from bertscope.data.corpus import sample_corpus
    from bertscope.data.task_files import read_tagged

    named = tmp_path / "ner.conll"
    named.write_text(NER_FILE)
    sentences = list(read_tagged(named))
    assert [s.tags for s in sentences[:2]] == [("B-PER", "O", "O", "O", "B-LOC", "O"), ("B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O")]
    treebank = tmp_path / "treebank.conll"
    treebank.write_text(sample_corpus("conllu").read_text())
    assert list(read_tagged(treebank, limit=1))[0].tags == list(read_tagged(sample_corpus("conllu"), limit=1))[0].tags
