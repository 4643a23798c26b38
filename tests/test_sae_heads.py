"""What an SAE feature is read against: the parts of the model that write it add up to its pre-activation on every
family, a head switched off writes nothing, and a decoder row planted on a probe's class direction has cosine 1."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import bertscope
from bertscope.analyses.sae.autoencoder import TopKSAE
from bertscope.analyses.sae.files import SAEConfig
from bertscope.analyses.sae.heads import sae_heads
from bertscope.analyses.sae.reading_results import READ_COSINE
from bertscope.data.corpus import Sentence
from bertscope.model.session import Session
from tests.family_models import FAMILIES, save_tiny_family
from tests.helpers.cli import assert_a_refusal, refusals

TEXTS = [
    "The keys to the cabinet are on the table.",
    "A dog barked loudly at the cat.",
    "She said that the report was finished.",
]


def planted_sae(session: Session, directory, layer: int, *, d_sae: int = 8, seed: int = 0, decoder=None) -> TopKSAE:
    """A random SAE at hidden state `layer` with k = d_sae (each feature fires wherever its pre-activation is positive),
    saved to `directory`."""
    generator = torch.Generator().manual_seed(seed)
    sae = TopKSAE(session.hidden_size, d_sae, d_sae, generator=generator)
    with torch.no_grad():
        sae.b_enc.copy_(0.1 * torch.randn(d_sae, generator=generator))
        sae.b_dec.copy_(0.1 * torch.randn(session.hidden_size, generator=generator))
        if decoder is not None:
            sae.W_dec.copy_(torch.as_tensor(decoder, dtype=torch.float32))
    config = SAEConfig(session.hidden_size, d_sae, d_sae, layer, session.source, session.fingerprint)
    sae.save(directory, config)
    return sae


def loud_blocks(session: Session) -> Session:
    """The session with every attention and feed-forward output projection scaled up 30 times: a random tiny model's
    blocks write little, and their share must count in the sum."""
    family = session.family
    weights = {
        id(w): w
        for layer in family.layers(session.model)
        for w in (family.attention_output(layer).weight, family.feed_forward_output(layer).weight)
    }
    with torch.no_grad():  # each once: ALBERT's layers share theirs
        for weight in weights.values():
            weight.mul_(30)
    return session


@pytest.mark.parametrize("family", ["bert", *FAMILIES])
def test_the_parts_add_up_to_the_pre_activation(family, tmp_path, tiny_bert_dir):
    """Embeddings + heads + attention biases + feed-forward + LayerNorm shifts + SAE bias = the mean pre-activation
    over the tokens where the feature fires, on every family at its last hidden state (post-LN norms folded at each
    token's σ; ModernBERT's through its final norm), with every kind of part counting."""
    directory = tiny_bert_dir if family == "bert" else save_tiny_family(tmp_path / family, family, seed=2)
    session = loud_blocks(Session.open(str(directory), device="cpu"))
    layer = session.num_layers
    planted_sae(session, tmp_path / "sae", layer)
    result = list(sae_heads(session, tmp_path / "sae", [Sentence(text) for text in TEXTS], feature=0))[-1].result
    parts = result.parts()
    assert 0 < result.firing <= result.tokens and result.heads.shape == (layer, session.num_heads)
    # the parts miss nothing beyond float noise, far below what any kind of part writes
    smallest = min(float(np.abs(result.heads).sum()), float(np.abs(result.feed_forward).sum()), abs(parts["embeddings"]))
    assert abs(result.residual) < 1e-4 * smallest and abs(result.residual) < 1e-5 * (1 + abs(result.preactivation)), (
        result.residual,
        parts,
    )
    assert result.activation == pytest.approx(result.preactivation, rel=1e-5)  # where it fires, the value is the input
    kind = "pre-LN" if family == "modernbert" else "post-LN"
    assert result.linearisation.startswith(kind)


def test_a_head_switched_off_writes_nothing(tiny_session, tmp_path):
    """Head 1 of layer 0 and every head of layer 1 masked: their contributions are zero, the rest still add up; a
    pruned copy without those heads gives the same."""
    out = tmp_path / "sae"
    planted_sae(tiny_session, out, 3)
    plain = bertscope.sae_heads(tiny_session, TEXTS, sae=out, feature=0)
    masked = bertscope.sae_heads(tiny_session, TEXTS, sae=out, feature=0, mask="0:1,1:*")
    assert plain.heads[0, 1] != 0 and np.all(plain.heads[1] != 0)
    assert masked.heads[0, 1] == 0 and np.all(masked.heads[1] == 0) and masked.heads[0, 0] != 0
    assert abs(masked.residual) < 1e-5 * (1 + abs(masked.preactivation)) and masked.mask == "0:1,1:*"
    assert masked.preactivation != pytest.approx(plain.preactivation)
    # a copy with those heads sliced out of its weights (layer 1 left with none) reads the same
    from bertscope.analyses.importance.pruned_export import write_pruned_model

    removed = [(0, 1), *((1, head) for head in range(tiny_session.num_heads))]
    write_pruned_model(tiny_session, removed, tmp_path / "sliced", timing_texts=TEXTS[:1], extra={}, weights="sliced")
    sliced = bertscope.sae_heads(Session.open(str(tmp_path / "sliced"), device="cpu"), TEXTS, sae=out, feature=0)
    assert np.allclose(sliced.heads, masked.heads, atol=1e-6) and sliced.preactivation == pytest.approx(masked.preactivation, abs=1e-5)


def test_a_planted_decoder_row_on_a_probe_direction_has_cosine_one(tiny_session, tmp_path):
    """Rows planted on a UPOS class direction of the probe (and on its opposite) get |cos| 1 and that class; a row in
    the eraser's removed directions is erased whole, one orthogonal to them not at all; the counts include them."""
    from bertscope.analyses.sae.directions import fit_readers
    from bertscope.data.corpus import sample_corpus
    from bertscope.data.splits import make_splits

    data = sample_corpus("conllu")
    chosen = bertscope.probe_sentences("upos", data=data, limit=40)
    splits = make_splits(chosen.train, chosen.dev, chosen.test, seed=0)
    readers = list(fit_readers(tiny_session, splits, "upos", 2))[-1].result
    basis = np.linalg.qr(readers.eraser.left.double().numpy())[0][:, : readers.eraser.rank]
    rng = np.random.default_rng(0)
    outside = rng.normal(size=tiny_session.hidden_size)
    outside -= basis @ (basis.T @ outside)
    decoder = rng.normal(size=(8, tiny_session.hidden_size))
    decoder[:4] = [readers.directions[3], -readers.directions[5], basis[:, 0], outside]
    decoder /= np.linalg.norm(decoder, axis=1, keepdims=True)
    planted_sae(tiny_session, tmp_path / "sae", 2, decoder=decoder)

    with pytest.warns(bertscope.BertscopeNote) as noted:
        result = bertscope.sae_directions(tiny_session, "upos", sae=tmp_path / "sae", data=data, limit=40)
    assert any("no test split" in str(note.message) for note in noted)  # the splits are made as `probe` makes them
    assert result.classes == readers.classes and result.rank == readers.eraser.rank > 0
    assert result.cosine[:2] == pytest.approx([1, 1], abs=1e-6)
    assert [result.classes[c] for c in result.best_class[:2]] == [readers.classes[3], readers.classes[5]]
    assert result.signs[:2].tolist() == [1, -1]
    assert result.erased[2] == pytest.approx(1, abs=1e-6) and result.erased[3] == pytest.approx(0, abs=1e-6)
    assert np.all(result.cosine[4:] < 1 - 1e-3) and result.chance_cosine < 1
    fired = result.alive
    assert result.read == int(((result.cosine >= READ_COSINE) & fired).sum()) and result.removed <= result.counted
    report = result.as_json()
    assert report["features"][0]["class"] == readers.classes[3] and report["features"][1]["sign"] == -1
    assert report["rule"]["read"].endswith(str(READ_COSINE))


def test_the_commands_end_to_end(tiny_bert_dir, tmp_path, run):
    from bertscope.data.corpus import sample_corpus

    session = Session.open(str(tiny_bert_dir), device="cpu")
    planted_sae(session, tmp_path / "sae", 2)
    model = ["-m", str(tiny_bert_dir), "--limit", "20"]
    heads = run("sae", "heads", "--sae", str(tmp_path / "sae"), "--feature", "0", *model, "--json")
    assert heads.exit_code == 0, heads.output
    report = json.loads(heads.stdout)
    assert report["feature"] == 0 and len(report["heads"]) == 2 and report["linearisation"].startswith("post-LN")
    assert abs(report["residual"]) < 1e-5 and report["firing"] > 0 and report["data"] == "the sample corpus"
    table = run("sae", "heads", "--sae", str(tmp_path / "sae"), "-f", "0", *model, "--top", "3", "--mask", "1:0")
    shown = " ".join(table.stdout.split())  # as a reader sees it, whatever the terminal's width
    assert table.exit_code == 0 and "top 3 of 8 heads" in shown and "mask 1:0" in shown and "pre-activation" in shown
    treebank = ["--data", str(sample_corpus("conllu")), "--task", "deprel"]
    directions = run("sae", "directions", "--sae", str(tmp_path / "sae"), *treebank, *model, "--json")
    assert directions.exit_code == 0, directions.output
    read = json.loads(directions.stdout)
    assert read["task"] == "deprel" and len(read["features"]) == 8 and 0 < read["eraser"]["rank"] <= len(read["classes"]) - 1
    assert {"feature", "cosine", "class", "sign", "erased", "edit", "fired"} == set(read["features"][0])
    csv = run("sae", "heads", "--sae", str(tmp_path / "sae"), "-f", "0", *model, "--csv")
    assert csv.stdout.splitlines()[0] == "part,layer,head,contribution,share" and len(csv.stdout.splitlines()) == 1 + 8 + 2 * 2 + 3


def test_bad_input_is_one_line_before_torch(tiny_bert_dir, tmp_path):
    """A feature out of range, an SAE at hidden state 0 (nothing but the embeddings writes it), a task the data cannot
    give."""
    for name, layer in (("embeddings", 0), ("layer2", 2)):
        directory = tmp_path / name
        directory.mkdir()
        hook = "blocks.0.hook_resid_pre" if layer == 0 else f"blocks.{layer - 1}.hook_resid_post"
        (directory / "cfg.json").write_text(json.dumps({"architecture": "topk", "d_in": 32, "d_sae": 16, "k": 2, "hook_name": hook}))
        (directory / "sae_weights.safetensors").write_bytes(b"")
    model = ["-m", str(tiny_bert_dir)]
    text = str(tmp_path / "plain.txt")
    (tmp_path / "plain.txt").write_text("A plain sentence.\n")
    cases = {
        (
            "sae",
            "heads",
            *model,
            "--sae",
            str(tmp_path / "layer2"),
            "--feature",
            "16",
        ): "feature 16 is out of range: the SAE has features 0 to 15",
        ("sae", "heads", *model, "--sae", str(tmp_path / "embeddings"), "--feature", "1"): "no head writes it",
        ("sae", "directions", *model, "--sae", str(tmp_path / "layer2"), "--task", "upos", "--data", text): "needs a CoNLL-U file",
    }
    reports = refusals([list(case) for case in cases])
    for case, message in cases.items():
        assert_a_refusal(reports[case], message)
