"""An SAE directory in SAELens's layout, torch-free: `cfg.json` written and read, and judged before a model loads.

`DIR/cfg.json` and `DIR/sae_weights.safetensors` (`W_enc` [d_in, d_sae], `b_enc` [d_sae], `W_dec` [d_sae, d_in],
`b_dec` [d_in]), as SAELens saves a TopK SAE. The config is written in SAELens's flat form (the form before its
version 6, which version 6 still reads and converts): `architecture` "topk", `d_in`, `d_sae`, `k` (and
`activation_fn_kwargs` {"k": k}, where older readers look), `dtype`, `device`, `apply_b_dec_to_input` (true: the
encoder reads x − b_dec), `normalize_activations` "none", `model_name`, `hook_name`, `hook_layer`,
`context_size`, `prepend_bos`, `dataset_path`, `exclude_special_tokens`. No SAELens version is claimed. What
bertscope itself needs to open the SAE again (the hidden state, the model's fingerprint, the tokens chosen, the
training data and its counts, the seed, the figures on held-out data) is under the key `bertscope`, which SAELens
leaves alone.

Hook names follow TransformerLens's residual stream: hidden state L ≥ 1 (the output of layer L − 1) is
`blocks.{L-1}.hook_resid_post`, hidden state 0 (the embeddings) `blocks.0.hook_resid_pre`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bertscope.base.errors import InputError

CONFIG_FILE = "cfg.json"
ADVICE = "give the directory `bertscope sae train` wrote"
WEIGHTS_FILE = "sae_weights.safetensors"
WEIGHT_SHAPES = {"W_enc": ("d_in", "d_sae"), "b_enc": ("d_sae",), "W_dec": ("d_sae", "d_in"), "b_dec": ("d_in",)}


def hook_name(layer: int) -> str:
    """TransformerLens's name of hidden state `layer` (0 = the embeddings)."""
    return "blocks.0.hook_resid_pre" if layer == 0 else f"blocks.{layer - 1}.hook_resid_post"


@dataclass(frozen=True)
class SAEConfig:
    """What an SAE is: its shape and sparsity, and where in which model it reads (bertscope's part of cfg.json)."""

    d_in: int
    d_sae: int
    k: int
    layer: int  # the hidden state: 0 = the embeddings, l + 1 the output of layer l
    model_name: str
    fingerprint: str  # the model's, as the feature cache computes it (model_files.fingerprint)
    include_special: bool = False
    dtype: str = "float32"
    context_size: int = 512  # the model's maximum length the activations were taken at
    training: dict[str, Any] = field(default_factory=dict)  # data, counts, seed, settings, held-out figures

    def cfg_json(self) -> dict[str, Any]:
        """cfg.json's content: SAELens's keys, then bertscope's own."""
        return {
            "architecture": "topk",
            "d_in": self.d_in,
            "d_sae": self.d_sae,
            "k": self.k,
            "activation_fn": "topk",
            "activation_fn_kwargs": {"k": self.k},
            "dtype": self.dtype,
            "device": "cpu",
            "apply_b_dec_to_input": True,
            "normalize_activations": "none",
            "reshape_activations": "none",
            "finetuning_scaling_factor": False,
            "model_name": self.model_name,
            "hook_name": hook_name(self.layer),
            "hook_layer": max(self.layer - 1, 0),
            "hook_head_index": None,
            "context_size": self.context_size,
            "prepend_bos": True,
            "dataset_path": str(self.training.get("data", "")),
            "exclude_special_tokens": not self.include_special,
            "bertscope": {
                "hidden_state": self.layer,
                "fingerprint": self.fingerprint,
                "include_special": self.include_special,
                **self.training,
            },
        }

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def read_config(directory: str | Path) -> SAEConfig:
    """The SAE directory's config, judged without torch: one line when it is no SAE bertscope can read."""
    path = Path(directory).expanduser()
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is a file"
        raise InputError(f"{path} {what}; {ADVICE}", setting="sae")
    config_file, weights_file = path / CONFIG_FILE, path / WEIGHTS_FILE
    if not config_file.is_file() or not weights_file.is_file():
        missing = CONFIG_FILE if not config_file.is_file() else WEIGHTS_FILE
        raise InputError(f"{path} is not an SAE directory: it has no {missing}; {ADVICE}", setting="sae")
    try:
        raw = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{config_file} cannot be read as JSON ({error}); {ADVICE}", setting="sae") from None
    if not isinstance(raw, dict):
        raise InputError(f"{config_file} is not an SAE config (not a JSON object)", setting="sae")
    architecture = raw.get("architecture")
    if architecture != "topk":
        raise InputError(f"{path} holds a {architecture or 'standard'} SAE; bertscope reads TopK SAEs (architecture topk)", setting="sae")
    own: dict[str, Any] = raw["bertscope"] if isinstance(raw.get("bertscope"), dict) else {}
    kwargs = raw.get("activation_fn_kwargs")
    k = raw.get("k", kwargs.get("k") if isinstance(kwargs, dict) else None)
    numbers: dict[str, int] = {}
    for name, value in (("d_in", raw.get("d_in")), ("d_sae", raw.get("d_sae")), ("k", k)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{config_file} has no valid {name}; it is not an SAE bertscope can read", setting="sae")
        numbers[name] = value
    layer = own.get("hidden_state", _layer_of_hook(raw.get("hook_name")))
    if not isinstance(layer, int) or layer < 0:
        raise InputError(
            f"{config_file} does not say which hidden state the SAE reads (hook_name, or bertscope.hidden_state)",
            setting="sae",
        )
    training = {key: value for key, value in own.items() if key not in ("hidden_state", "fingerprint", "include_special")}
    return SAEConfig(
        d_in=numbers["d_in"],
        d_sae=numbers["d_sae"],
        k=numbers["k"],
        layer=layer,
        model_name=str(raw.get("model_name", "")),
        fingerprint=str(own.get("fingerprint", "")),
        include_special=bool(own.get("include_special", not raw.get("exclude_special_tokens", True))),
        dtype=str(raw.get("dtype", "float32")),
        context_size=int(raw.get("context_size") or 512),
        training=training,
    )


def _layer_of_hook(name: object) -> int | None:
    """The hidden state a TransformerLens residual hook name reads (None for any other name)."""
    if name == "blocks.0.hook_resid_pre":
        return 0
    parts = str(name).split(".")
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit() and parts[2] == "hook_resid_post":
        return int(parts[1]) + 1
    return None


def check_fits(config: SAEConfig, hidden_size: int, num_layers: int, *, directory: str | Path = "") -> None:
    """Refuse an SAE whose input is another width than the model's hidden states, or whose layer the model lacks."""
    where = f"the SAE in {directory}" if directory else "the SAE"
    if config.d_in != hidden_size:
        raise InputError(
            f"{where} reads {config.d_in}-wide hidden states and this model's are {hidden_size}; "
            f"give the model it was trained on{f' ({config.model_name})' if config.model_name else ''}",
            setting="sae",
        )
    if config.layer > num_layers:
        raise InputError(f"{where} reads hidden state {config.layer} and this model has 0 to {num_layers}", setting="sae")
