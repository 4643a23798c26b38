"""Sparse autoencoders: the trainer finds planted features, the files are SAELens's, the splice is the model's pass,
the labels are counted as by hand, and bad input is one line before torch."""

from __future__ import annotations

import json
import math
import threading
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import bertscope
from bertscope.analyses.sae.activations import numbered, token_batches
from bertscope.analyses.sae.autoencoder import TopKSAE
from bertscope.analyses.sae.features import LabelCounts
from bertscope.analyses.sae.results import SAESettings
from bertscope.analyses.sae.train import ShuffledBlock, evaluate, fit, in_blocks, token_keys
from bertscope.base.errors import InputError
from bertscope.cli import main
from bertscope.data.corpus import Sentence
from bertscope.model.session import Session
from tests.family_models import FAMILIES, save_tiny_family
from tests.helpers.cli import assert_a_refusal, refusals

TEXTS = [
    "The keys to the cabinet are on the table.",
    "A dog barked loudly at the cat.",
    "She said that the report was finished.",
    "Rain fell all night over the quiet town.",
    "The committee approved the plan on Monday.",
    "Children were playing in the park after school.",
] * 4


def planted(seed: int = 0, rows: int = 4096, d_in: int = 16, features: int = 16, active: int = 3):
    """Activations made of known sparse unit directions: each row `active` of them with positive weights, plus noise."""
    rng = np.random.default_rng(seed)
    directions = rng.normal(size=(features, d_in))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    chosen = np.argsort(rng.random((rows, features)), axis=1)[:, :active]
    weights = np.zeros((rows, features))
    np.put_along_axis(weights, chosen, rng.uniform(0.5, 2.0, size=(rows, active)), axis=1)
    x = weights @ directions + 0.01 * rng.normal(size=(rows, d_in))
    return torch.as_tensor(x, dtype=torch.float32), directions


def test_the_trainer_recovers_planted_features():
    """Every planted direction has a decoder row within cosine 0.9, trained on a stream of activation batches."""
    x, directions = planted()
    settings = SAESettings(width=32, k=3, epochs=6, lr=2e-2, batch_tokens=128)
    steps = list(fit(in_blocks(x, 2048), x.shape[1], settings, seed=0))
    trainer = steps[-1].result
    decoder = trainer.sae.W_dec.detach().numpy()
    assert np.allclose(np.linalg.norm(decoder, axis=1), 1, atol=1e-5)  # unit rows
    best = (directions @ decoder.T).max(axis=1)
    assert best.min() >= 0.9, np.sort(best)[:5]
    assert len(trainer.history) == 6 and trainer.history[-1]["fvu"] < trainer.history[0]["fvu"]
    # the progress records say the running figures as training goes
    assert any("FVU" in step.stage and "L0" in step.stage and "dead" in step.stage for step in steps[:-1])


def test_a_blocks_steps_are_its_rows_shuffled_by_key_whatever_order_they_came_in():
    """Every row once, in batches of about the batch size, shuffled; the same batches when the rows arrive in another
    order (another batching, or another rank holding them: the batches depend on the keys alone)."""
    rows = torch.arange(1000.0)[:, None]
    keys = token_keys(0, 0, np.arange(1000), np.zeros(1000, dtype=np.int64))
    block = ShuffledBlock.of(rows, keys, 128)
    assert block.sizes == [125] * 8 and block.tokens == 1000
    taken = torch.cat(block.parts)[:, 0]
    assert sorted(taken.tolist()) == rows[:, 0].tolist() and not torch.equal(taken, rows[:, 0])
    first = block.parts[0][:, 0]
    assert block.variance[0] == pytest.approx(float(((first - first.mean()) ** 2).sum()))
    order = torch.randperm(1000, generator=torch.Generator().manual_seed(1))
    again = ShuffledBlock.of(rows[order], keys[order.numpy()], 128)
    assert all(torch.equal(one, other) for one, other in zip(block.parts, again.parts, strict=True))
    assert not torch.equal(
        block.parts[0], ShuffledBlock.of(rows, token_keys(0, 1, np.arange(1000), np.zeros(1000, dtype=np.int64)), 128).parts[0]
    )


def exact_sae(d_in: int) -> TopKSAE:
    """An SAE that reconstructs every input exactly: features ±e_i, k = d_in (each |x_i| fires on its sign's feature)."""
    sae = TopKSAE(d_in, 2 * d_in, d_in)
    eye = torch.eye(d_in)
    with torch.no_grad():
        sae.W_enc.copy_(torch.cat([eye, -eye], 1))
        sae.W_dec.copy_(torch.cat([eye, -eye], 0))
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae


@pytest.mark.parametrize("family", ["bert", *FAMILIES])
def test_an_exact_reconstruction_spliced_in_is_the_models_own_pass(family, tmp_path, tiny_mlm_dir):
    """On every family: the states the SAE reads are the hidden states the model reports, and splicing an exact
    reconstruction in leaves the last hidden state as it was (preserve 1) and recovers all of the MLM loss."""
    directory = tiny_mlm_dir if family == "bert" else save_tiny_family(tmp_path / family, family, "ForMaskedLM", seed=3)
    session = Session.open(str(directory), device="cpu")  # torch's own linear kernels: no timing of them

    sentences = [Sentence(text) for text in TEXTS[:3]]
    plain = session.forward(sentences[0].text, attentions=False, mlm_logits=False)
    for layer in sorted({1, session.num_layers}):  # DeBERTa-v2's convolution gives hidden state 1; pre-LN's norm the last
        (batch,) = token_batches(session, numbered(sentences, 0, 0.0, held=None), layer, include_special=True)
        first = batch.sentences == 0
        order = np.argsort(batch.positions[first])
        assert np.allclose(batch.states[first].numpy()[order], plain.hidden_states[layer], atol=1e-5), layer
        without = next(token_batches(session, numbered(sentences, 0, 0.0, held=None), layer))
        assert len(without.states) == len(batch.states) - 2 * len(sentences)  # [CLS] and [SEP] (<s>, </s>) left out
        steps = list(evaluate(session, exact_sae(session.hidden_size), numbered(sentences, 0, 0.0, held=None), layer))
        figures = steps[-1].result
        assert figures.fvu < 1e-6 and figures.preserve > 1 - 1e-6 and figures.l0 <= session.hidden_size
        losses = figures.mlm_losses
        assert losses["spliced"] == pytest.approx(losses["clean"], rel=1e-6)
        assert losses["zero"] != pytest.approx(losses["clean"], rel=1e-6)
        # (zero − spliced) / (zero − clean): all of it, where zeroing costs anything (a random model may gain)
        assert (
            figures.mlm_recovered == pytest.approx(1, abs=1e-3) if losses["zero"] > losses["clean"] else math.isnan(figures.mlm_recovered)
        )


def test_training_writes_saelens_files_that_read_back(tiny_session, tmp_path):
    """cfg.json's keys and the four tensors' shapes; the result's figures are the held-out ones, in cfg.json too."""
    from safetensors.numpy import load_file

    out = tmp_path / "sae"
    result = bertscope.train_sae(tiny_session, TEXTS, layer=2, out=out, k=8, epochs=2, held_out=0.3, seed=1)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sae"]  # no temporary left beside it
    tensors = load_file(str(out / "sae_weights.safetensors"))
    d_in, d_sae = tiny_session.hidden_size, 4 * tiny_session.hidden_size
    assert {name: tensor.shape for name, tensor in tensors.items()} == {
        "W_enc": (d_in, d_sae),
        "b_enc": (d_sae,),
        "W_dec": (d_sae, d_in),
        "b_dec": (d_in,),
    }
    config = json.loads((out / "cfg.json").read_text())
    assert config["architecture"] == "topk" and (config["d_in"], config["d_sae"], config["k"]) == (d_in, d_sae, 8)
    assert config["hook_name"] == "blocks.1.hook_resid_post" and config["model_name"] == tiny_session.source
    assert config["dtype"] == "float32" and config["normalize_activations"] == "none" and config["apply_b_dec_to_input"]
    own = config["bertscope"]
    assert own["hidden_state"] == 2 and own["fingerprint"] == tiny_session.fingerprint and own["include_special"] is False
    assert own["seed"] == 1 and own["sentences"] == result.sentences and own["held_out_sentences"] == result.held_out_sentences
    assert result.sentences + result.held_out_sentences == len(TEXTS) and 0 < result.held_out_sentences < len(TEXTS)
    assert own["held_out"]["fvu"] == pytest.approx(result.fvu, abs=1e-6)
    # read back: the same reconstruction
    sae, read = TopKSAE.load(out)
    assert read.layer == 2 and read.k == 8
    expected = torch.as_tensor(tensors["W_enc"]).T
    assert torch.allclose(sae.W_enc.detach().T, expected)
    features = bertscope.sae_features(tiny_session, TEXTS[:6], sae=out, top=2)
    assert features.d_sae == d_sae and features.tokens > 0 and features.labels is None
    assert all(len(top) <= 2 for top in features.top) and all(top[0].activation >= top[-1].activation for top in features.top if top)
    assert features.histogram.sum() == round(features.l0 * features.tokens)  # every firing in one bin


def test_a_cancelled_training_leaves_no_directory(tiny_session, tmp_path):
    cancel = threading.Event()
    out = tmp_path / "sae"
    for step in bertscope.steps(bertscope.train_sae, tiny_session, TEXTS, layer=1, out=out, epochs=3, cancel=cancel):
        cancel.set()
        assert step.result is None
    assert list(tmp_path.iterdir()) == []


def test_label_counts_give_precision_and_recall_as_by_hand():
    """Two sentences (one word split in two pieces); feature 0 fires on cat, do, ##g, ran; feature 1 on the, a and a
    special token: precision and recall per scheme as counted by hand."""
    first = Sentence("the cat sat", words=("the", "cat", "sat"), upos=("DET", "NOUN", "VERB"), deprels=("det", "nsubj", "root"))
    second = Sentence(
        "a dog ran fast",
        words=("a", "dog", "ran", "fast"),
        upos=("DET", "NOUN", "VERB", "ADV"),
        deprels=("det", "nsubj", "root", "advmod"),
    )
    # tokens: [CLS] the cat sat | a do ##g ran fast
    batch = SimpleNamespace(
        items=[(0, first), (1, second)],
        rows=np.array([0, 0, 0, 0, 1, 1, 1, 1, 1]),
        words=np.array([-1, 0, 1, 2, 0, 1, 1, 2, 3]),
        first=np.array([False, True, True, True, True, True, False, True, True]),
    )
    counts = LabelCounts(3, torch.device("cpu"))
    tokens = torch.tensor([2, 5, 6, 7, 0, 1, 4])
    features = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    counts.add(batch, tokens, features)
    labels, best = counts.matches()
    noun = labels[0]["upos"]
    assert (noun.label, noun.precision, noun.recall, noun.share) == ("NOUN", 3 / 4, 1.0, 3 / 8)
    piece = labels[0]["piece"]  # first: precision 3/4, recall 3/7 (F1 0.55) beats inner: 1/4, 1/1 (F1 0.4)
    assert (piece.label, piece.precision, piece.recall) == ("first", 3 / 4, 3 / 7)
    det = labels[1]["upos"]
    assert (det.label, det.precision, det.recall) == ("DET", 1.0, 1.0)  # the special token's firing is no word's
    assert best[1].label in ("DET", "det") and best[2] is None and labels[2] == {}
    assert det.pure(10) and not det.pure(9) and not replace(piece, precision=0.95).pure(100)  # first pieces: 7 of 8 tokens


def test_features_on_a_treebank_name_labels(tiny_session, tmp_path):
    from bertscope.data.corpus import sample_corpus

    out = tmp_path / "sae"
    bertscope.train_sae(tiny_session, layer=1, out=out, data=sample_corpus("conllu"), limit=40, epochs=1)
    result = bertscope.sae_features(tiny_session, sae=out, data=sample_corpus("conllu"), limit=20, top=3)
    assert result.labels is not None and result.best is not None and isinstance(result.pure, int)
    named = [match for match in result.best if match is not None]
    assert named and all(0 < match.precision <= 1 and 0 < match.recall <= 1 for match in named)
    assert {match.scheme for match in named} <= {"upos", "deprel", "piece"}


def test_the_commands_end_to_end(tiny_bert_dir, tmp_path):
    out = tmp_path / "sae"
    runner = CliRunner()
    arguments = ["-m", str(tiny_bert_dir), "-l", "3", "-o", str(out), "--epochs", "1", "--width", "64", "-k", "4", "--json"]
    trained = runner.invoke(main, ["sae", "train", *arguments, "--figure", str(tmp_path / "training.svg")])
    assert trained.exit_code == 0, trained.output
    report = json.loads(trained.stdout)
    assert report["d_sae"] == 64 and report["k"] == 4 and report["layer"] == 3 and 0 <= report["held_out"]["dead_share"] <= 1
    assert report["held_out"]["preserve"] > 0 and report["held_out"]["mlm_loss_recovered"] is None  # no MLM head
    read = runner.invoke(
        main, ["sae", "features", "--sae", str(out), "-m", str(tiny_bert_dir), "--top", "2", "--json", "--figure", str(tmp_path / "f.png")]
    )
    assert read.exit_code == 0, read.output
    assert "<svg" in (tmp_path / "training.svg").read_text() and (tmp_path / "f.png").read_bytes().startswith(b"\x89PNG")
    features = json.loads(read.stdout)
    assert len(features["features"]) == 64 and features["fvu"] >= 0 and len(features["bin_edges"]) == 31
    csv = runner.invoke(main, ["sae", "features", "--sae", str(out), "-m", str(tiny_bert_dir), "--csv"])
    assert csv.exit_code == 0 and csv.stdout.splitlines()[0].startswith("feature,density") and len(csv.stdout.splitlines()) == 65


def test_the_figures_draw_the_results_numbers():
    """Training: the running FVU, L0 and dead share per epoch, the held-out figures starred; features: the spread of
    the densities over the features that fired, and the chosen feature's histogram bar for bar."""
    from bertscope.analyses.sae.results import LabelMatch, SAEFeatures, SAETraining

    history = tuple({"epoch": epoch, "fvu": 0.5 / epoch, "l0": 32.0, "dead": 0.01 * epoch} for epoch in (1, 2, 3))
    shape = dict(directory="d", model="m", layer=3, d_in=8, d_sae=32, k=4, epochs=3, steps=9, tokens_trained=900, sentences=30)
    training = SAETraining(
        **shape, tokens=300, held_out_sentences=3, held_out_tokens=30, fvu=0.2, l0=4.0, dead_share=0.05, preserve=0.9, history=history
    )
    fvu, l0, dead = training.figure().axes
    assert list(fvu.lines[0].get_ydata()) == [0.5, 0.25, 0.5 / 3] and list(dead.lines[0].get_ydata()) == [0.01, 0.02, 0.03]
    assert list(fvu.lines[1].get_ydata()) == [0.2] and list(l0.lines[1].get_ydata()) == [4.0]  # held out, starred
    density = np.array([0.0, 0.1, 0.01, 0.001] * 8)
    edges = np.logspace(-3, 3, 31)
    histogram = np.zeros((32, 30), dtype=np.int64)
    histogram[1, 10:13] = [5, 7, 2]
    best = tuple(LabelMatch("upos", "NOUN", 0.95, 0.4) if feature == 1 else None for feature in range(32))
    features = SAEFeatures("d", "m", 3, 32, 4, 10, 100, 0.2, 4.0, 0.25, density, ((),) * 32, edges, histogram, best=best)
    spread, one = features.figure().axes  # the default: the feature firing most often, feature 1
    assert [patch.get_height() for patch in one.patches] == histogram[1].tolist() and "NOUN" in one.get_title()
    assert sum(patch.get_height() for patch in spread.patches) == 24  # the 24 that fired; 8 never did
    with pytest.raises(InputError, match="feature 40 is out of range"):
        features.figure(40)


def test_bad_input_is_one_line_before_torch(tiny_bert_dir, tmp_path):
    """A layer out of range, a directory that is no SAE, an SAE of another width, an empty corpus, a taken directory."""
    not_sae = tmp_path / "not-sae"
    not_sae.mkdir()
    (not_sae / "notes.txt").write_text("x")
    wider = tmp_path / "wider"
    wider.mkdir()
    (wider / "cfg.json").write_text(
        json.dumps({"architecture": "topk", "d_in": 999, "d_sae": 4, "k": 2, "hook_name": "blocks.0.hook_resid_post"})
    )
    (wider / "sae_weights.safetensors").write_bytes(b"")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    model = ["-m", str(tiny_bert_dir)]
    cases = {
        ("sae", "train", *model, "-l", "9", "-o", str(tmp_path / "a")): "--layer 9 is out of range",
        ("sae", "train", *model, "-l", "1", "-o", str(not_sae)): "already exists",
        ("sae", "train", *model, "-l", "1", "-o", str(tmp_path / "b"), "--data", str(empty)): "no sentences",
        ("sae", "train", *model, "-l", "1", "-o", str(tmp_path / "c"), "--width", "8", "-k", "9"): "k must be between 1 and the width",
        ("sae", "features", *model, "--sae", str(not_sae)): "is not an SAE directory",
        ("sae", "features", *model, "--sae", str(tmp_path / "missing")): "does not exist",
        ("sae", "features", *model, "--sae", str(wider)): "reads 999-wide hidden states and this model's are 32",
    }
    reports = refusals([list(case) for case in cases])
    for case, message in cases.items():
        assert_a_refusal(reports[case], message)
