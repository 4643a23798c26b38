"""Loading models: the bundled default, local directories, other families, and broken inputs."""

from __future__ import annotations

import shutil

import huggingface_hub.constants
import numpy as np
import pytest

from bertscope.base.errors import ModelLoadError
from bertscope.model.loading import load_model
from bertscope.model.session import Session
from tests.helpers.models import save_tiny, write_config


def test_local_directory(tiny_session, tiny_bert_dir):
    info = tiny_session.info
    assert (info.family, info.architecture, info.num_layers, info.num_heads, info.hidden_size) == ("BERT", "BertModel", 3, 4, 32)
    assert info.max_length == 64 and not info.has_mlm_head and info.device == "cpu"
    assert info.parameters == sum(p.numel() for p in tiny_session.model.parameters())
    assert info.source == str(tiny_bert_dir)


def test_model_uses_bertscope_attention(tiny_session):
    assert tiny_session.model.config._attn_implementation == "bertscope"


def test_mlm_model_has_a_head_and_logits(tiny_mlm_session):
    assert tiny_mlm_session.info.has_mlm_head
    result = tiny_mlm_session.forward("Paris is the capital of [MASK].")
    assert result.mlm_logits.shape == (len(result.tokens), 30522)
    assert np.isfinite(result.mlm_logits).all()


def test_head_missing_from_checkpoint_is_dropped(tmp_path, tiny_bert_dir):
    """A checkpoint that claims BertForMaskedLM but holds only the encoder must not get a random head."""
    directory = tmp_path / "claims-mlm"
    shutil.copytree(tiny_bert_dir, directory)
    config = (directory / "config.json").read_text().replace('"BertModel"', '"BertForMaskedLM"')
    (directory / "config.json").write_text(config)
    session = Session.open(str(directory), device="cpu")
    assert not session.info.has_mlm_head
    assert "head weights missing" in session.info.architecture


@pytest.mark.parametrize(
    "model_class, config_class, family",
    [
        ("RobertaForMaskedLM", "RobertaConfig", "RoBERTa"),
        ("ElectraModel", "ElectraConfig", "ELECTRA"),
        ("BertForSequenceClassification", "BertConfig", "BERT"),
    ],
)
def test_other_families_load_and_mask(tmp_path, model_class, config_class, family):
    overrides = {"pad_token_id": 1} if family == "RoBERTa" else {}
    if family == "RoBERTa":
        overrides["max_position_embeddings"] = 66
    directory = save_tiny(tmp_path / model_class, model_class, config_class_name=config_class, **overrides)
    session = Session.open(str(directory), device="cpu")
    assert session.info.family == family
    plain = session.forward("The cat sat on the mat.", attentions=True)
    masked = session.forward("The cat sat on the mat.", attentions=True, mask="1:*")
    assert plain.attentions.shape[:2] == (3, 4)
    assert np.all(masked.attentions[1] == 0)
    assert np.abs(masked.hidden_states[-1] - plain.hidden_states[-1]).max() > 1e-3
    if model_class.endswith("ForSequenceClassification"):
        assert plain.class_logits.shape == (2,) and session.info.num_labels == 2


def test_pytorch_bin_checkpoint_loads(tmp_path, tiny_session):
    import torch

    directory = tmp_path / "bin"
    _save_bin(tiny_session, directory)
    tiny_session.tokenizer.save_pretrained(directory)
    assert (directory / "pytorch_model.bin").exists() and not (directory / "model.safetensors").exists()
    session = Session.open(str(directory), device="cpu")
    for got, want in zip(session.model.state_dict().values(), tiny_session.model.state_dict().values()):
        torch.testing.assert_close(got, want)


def _save_bin(session, directory):
    import torch

    directory.mkdir()
    session.model.config.save_pretrained(directory)
    torch.save(session.model.state_dict(), directory / "pytorch_model.bin")


def test_unknown_path():
    with pytest.raises(ModelLoadError, match="no such directory"):
        load_model("./does/not/exist")


def test_file_instead_of_directory(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="is a file"):
        load_model(str(tmp_path / "weights.bin"))


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path))


def test_non_encoder_names_the_architecture(tmp_path):
    directory = write_config(tmp_path / "gpt2", model_type="gpt2", architectures=["GPT2LMHeadModel"])
    with pytest.raises(ModelLoadError, match=r"unsupported architecture GPT2LMHeadModel \(model_type 'gpt2'\)"):
        load_model(str(directory))


def test_decoder_bert_is_refused(tmp_path):
    directory = write_config(tmp_path / "dec", model_type="bert", architectures=["BertLMHeadModel"], is_decoder=True)
    with pytest.raises(ModelLoadError, match="decoder"):
        load_model(str(directory))


def test_damaged_config(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not readable JSON"):
        load_model(str(tmp_path))


def test_damaged_weights(tmp_path, tiny_bert_dir):
    directory = tmp_path / "damaged"
    shutil.copytree(tiny_bert_dir, directory)
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match="damaged"):
        load_model(str(directory))


def test_missing_weights(tmp_path, tiny_bert_dir):
    directory = tmp_path / "noweights"
    shutil.copytree(tiny_bert_dir, directory)
    (directory / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="has no weights"):
        load_model(str(directory))


def test_name_not_in_cache_offers_download(tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError, match="allow downloads") as refused:
        load_model("bert-base-uncased")
    assert refused.value.setting == "allow_download"


def test_name_in_cache_loads_offline(tmp_path, monkeypatch, tiny_bert_dir):
    """A Hugging Face name resolves to its cached snapshot without any network."""
    cache = tmp_path / "hub"
    snapshot = cache / "models--someone--tiny-bert" / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_bert_dir, snapshot)
    (cache / "models--someone--tiny-bert" / "refs").mkdir()
    (cache / "models--someone--tiny-bert" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    session = Session.open("someone/tiny-bert", device="cpu")
    assert session.info.source == "someone/tiny-bert" and session.info.num_layers == 3


def test_missing_tokenizer(tmp_path, tiny_bert_dir):
    directory = tmp_path / "notok"
    directory.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_bert_dir / name, directory / name)
    with pytest.raises(ModelLoadError, match="tokenizer"):
        load_model(str(directory))


def test_half_precision_is_refused_on_cpu(tiny_bert_dir):
    from bertscope.base.errors import InputError

    with pytest.raises(InputError, match="float16 is for GPUs"):
        load_model(str(tiny_bert_dir), device="cpu", dtype="float16")


def test_cuda_refused_without_gpu(tiny_bert_dir):
    import torch

    from bertscope.base.errors import InputError

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(InputError, match="no CUDA GPU"):
        load_model(str(tiny_bert_dir), device="cuda")


def test_fingerprint_changes_with_weights(tmp_path, tiny_bert_dir):
    other = save_tiny(tmp_path / "other", "BertModel", seed=5)
    assert load_model(str(other)).fingerprint != load_model(str(tiny_bert_dir)).fingerprint
    assert load_model(str(tiny_bert_dir)).fingerprint == load_model(str(tiny_bert_dir)).fingerprint


@pytest.mark.slow
def test_bundled_model(bundled_session):
    info = bundled_session.info
    assert (info.family, info.num_layers, info.num_heads, info.hidden_size, info.vocab_size) == ("BERT", 6, 12, 384, 30522)
    assert not info.has_mlm_head
    result = bundled_session.forward("The keys to the cabinet are on the table.", attentions=True)
    tokens = len(result.tokens)
    assert result.tokens[0] == "[CLS]" and result.tokens[-1] == "[SEP]"
    assert result.attentions.shape == (6, 12, tokens, tokens)
    np.testing.assert_allclose(result.attentions.sum(-1), 1.0, atol=1e-5)
    assert result.hidden_states.shape == (7, tokens, 384)
    assert result.mlm_logits is None


def test_random_copy_has_the_same_shape_and_other_weights(tiny_session):
    copy = tiny_session.random_copy(seed=3)
    assert copy.info.num_layers == tiny_session.info.num_layers and copy.tokenizer is tiny_session.tokenizer
    assert copy.info.fingerprint != tiny_session.info.fingerprint
    plain, random = tiny_session.forward("a test"), copy.forward("a test")
    assert plain.hidden_states.shape == random.hidden_states.shape
    assert not np.allclose(plain.hidden_states[-1], random.hidden_states[-1])
    again = tiny_session.random_copy(seed=3).forward("a test")
    np.testing.assert_allclose(again.hidden_states, random.hidden_states)  # seeded
