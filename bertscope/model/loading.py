"""Loading a model found by `model_files`: the bundled default, a local directory, or the HF cache.

Offline by default: nothing is downloaded unless `allow_download` is set. Never runs
remote code; prefers safetensors and reads `.bin` checkpoints only with `weights_only`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from bertscope.base.errors import ModelLoadError
from bertscope.model import ablation, pruning
from bertscope.model.device import resolve_device, resolve_dtype
from bertscope.model.families import SUPPORTED_HEADS, Family
from bertscope.model.model_files import UNLIMITED, find_model, fingerprint, first_line, usable_length

# A transformers model class: a head's (BertForMaskedLM), or AutoModel, which picks the encoder's from the config.
ModelClass = type[PreTrainedModel] | type[AutoModel]


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
    max_length: int  # the most tokens a session feeds the model (model_files.usable_length)
    fingerprint: str
    tokenizer_limit: int | None = None  # what the tokenizer's file states as its limit, shown beside max_length


def load_model(
    model: str | None = None, *, device: str = "auto", dtype: str = "float32", allow_download: bool = False, max_length: int | None = None
) -> LoadedModel:
    """Load a supported encoder and its tokenizer, ready for `Session`; `max_length`: cut inputs there rather than at the
    model's own limit (its positions)."""
    files = find_model(model, allow_download)
    source, directory, family, architecture, weights = files.source, files.directory, files.family, files.architecture, files.weights
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)

    hf_logging.disable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True, trust_remote_code=False)
        longest = usable_length(config.max_position_embeddings, family, max_length)  # a wrong max_length, before the weights
        model_class, architecture = _model_class(architecture)
        loaded, architecture = _load_weights(model_class, architecture, directory, config, weights, torch_dtype, family)
        tokenizer = _load_tokenizer(directory)
        stated = tokenizer.model_max_length if tokenizer.model_max_length < UNLIMITED else None
        tokenizer.model_max_length = longest  # the limit in use, which the tokenizer's own truncation then agrees with
    finally:
        hf_logging.set_verbosity(verbosity)
    # transformers wraps PreTrainedModel.to with functools.wraps, which mypy does not bind to the model
    loaded.to(torch_device).eval()  # type: ignore[arg-type]
    return LoadedModel(
        model=loaded,
        tokenizer=tokenizer,
        family=family,
        source=source,
        directory=directory,
        architecture=architecture,
        device=torch_device,
        dtype=torch_dtype,
        max_length=longest,
        fingerprint=fingerprint(directory, weights),
        tokenizer_limit=stated,
    )


def _model_class(architecture: str) -> tuple[ModelClass, str]:
    """The transformers class for a supported head, else the bare encoder."""
    model_class = getattr(transformers, architecture, None)
    if model_class is not None and architecture.endswith(SUPPORTED_HEADS):
        return model_class, architecture
    return AutoModel, "encoder of " + architecture


def _load_weights(
    model_class: ModelClass,
    architecture: str,
    directory: Path,
    config: PreTrainedConfig,
    weights: Path,
    torch_dtype: torch.dtype,
    family: Family,
) -> tuple[PreTrainedModel, str]:
    """Load weights; a head whose weights are missing from the file is dropped, not left random.

    A physically pruned checkpoint (`pruned_heads` in its config) is built with its heads
    removed before the weights are read (model.pruning), since transformers 5 cannot.
    """
    encoder_class: ModelClass = AutoModel
    if pruning.pruned_heads_of(config):
        # transformers types the mapping's values as pairs of classes: it gives the config's encoder class
        encoder_class = pruning.pruned_class(cast(type[PreTrainedModel], AutoModel._model_mapping[type(config)]), family)
        if model_class is AutoModel:
            model_class = encoder_class
        else:  # a head's class
            model_class = pruning.pruned_class(cast(type[PreTrainedModel], model_class), family)
    options: dict[str, Any] = dict(
        config=config,
        local_files_only=True,
        use_safetensors=weights.name.startswith("model.safetensors"),
        weights_only=True,  # never unpickle arbitrary objects from a .bin checkpoint
        dtype=torch_dtype,
        # "own"-attention families (DeBERTa, MPNet) never call the AttentionInterface: eager, read by hooks instead
        attn_implementation=ablation.ATTENTION_IMPLEMENTATION if family.attention == "interface" else "eager",
    )
    try:
        # with output_loading_info, from_pretrained gives the loading info beside the model (transformers types it as the model alone)
        model, info = cast(
            tuple[PreTrainedModel, dict[str, Any]], model_class.from_pretrained(directory, output_loading_info=True, **options)
        )
        if model_class is not encoder_class and _head_missing(info, model):
            model = encoder_class.from_pretrained(directory, **options)
            architecture = f"encoder of {architecture} (head weights missing)"
    except Exception as error:  # safetensors, torch.load and shape checks all end here
        raise ModelLoadError(
            f"could not read the weights in {weights}: {first_line(error)}; the file may be damaged or "
            "incomplete, save or download the model again"
        ) from None
    family.prepare(model)
    return model, architecture


def _head_missing(info: dict[str, Any], model: PreTrainedModel) -> bool:
    prefix = model.base_model_prefix + "."
    return any(not key.startswith(prefix) for key in info.get("missing_keys", ()))


def _load_tokenizer(directory: Path) -> PreTrainedTokenizerBase:
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True, trust_remote_code=False)
    except Exception as error:
        raise ModelLoadError(
            f"could not load a tokenizer from {directory} ({first_line(error)}); it needs tokenizer.json or vocab.txt"
        ) from None
    if not tokenizer.is_fast:
        raise ModelLoadError(f"the tokenizer in {directory} is not a fast tokenizer; bertscope needs one for word alignment")
    return tokenizer
