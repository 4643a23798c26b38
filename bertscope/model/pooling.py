"""A sentence embedding as the model's sentence-transformers files say to pool it.

A sentence-transformers model directory lists its modules in `modules.json`: the encoder
(`Transformer`), then `Pooling` (`1_Pooling/config.json`: cls, max, mean, mean_sqrt_len_tokens,
weightedmean, lasttoken, several concatenated in that order) and often `Normalize`. The
embedding here follows them as sentence-transformers 5 does (`models.Pooling.forward`); a
model without those files is mean-pooled over its non-padding tokens, the convention of
sentence-transformers for a plain encoder. Modules that change the vector further (`Dense`)
are refused rather than skipped: an embedding without them is not the model's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from bertscope.base.errors import InputError

# Legacy `pooling_mode_*` keys of 1_Pooling/config.json in sentence-transformers' concatenation order.
LEGACY_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
MODES = tuple(LEGACY_MODES.values())
PASSED_OVER = {"Transformer", "Dropout"}  # the encoder itself, and what is the identity at inference


@dataclass(frozen=True)
class SentencePooling:
    """How token states `[B, T, D]` become one vector a sentence, and where that was read."""

    modes: tuple[str, ...] = ("mean",)
    normalize: bool = False
    source: str = "mean pooling over the non-padding tokens (no sentence-transformers files)"

    @classmethod
    def of(cls, directory: Path) -> SentencePooling:
        """The pooling `directory`'s sentence-transformers files describe (mean pooling where there are none)."""
        listed = directory / "modules.json"
        if not listed.is_file():
            return cls()
        modules = _json(listed)
        if not isinstance(modules, list):
            raise InputError(f"{listed}: not a list of modules; the sentence-transformers files of this model are damaged")
        modes: tuple[str, ...] | None = None
        normalize = False
        for module in modules:
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            if kind == "Pooling":
                modes = _modes(directory / str(module.get("path", "")) / "config.json")
            elif kind == "Normalize":
                normalize = True
            elif kind not in PASSED_OVER:
                raise InputError(
                    f"{listed} lists a {kind} module, which bertscope does not run; the similarity and embedding objectives "
                    "need a model pooled by Pooling (and Normalize) alone"
                )
        if modes is None:
            return cls(normalize=normalize)
        described = " + ".join(modes) + (", normalised" if normalize else "")
        return cls(modes, normalize, f"{described} pooling (sentence-transformers' modules.json and Pooling config)")

    def __call__(self, hidden: Tensor, attention_mask: Tensor) -> Tensor:
        """`[B, D·modes]` sentence embeddings of `hidden` `[B, T, D]`, the padding (`attention_mask` 0) left out."""
        hidden = hidden.float()
        mask = attention_mask.to(hidden.dtype)[..., None]  # [B, T, 1]
        vectors = []
        for mode in self.modes:
            if mode == "cls":  # the first real token (left padding: after the pads)
                first = attention_mask.to(torch.int).argmax(1)
                vectors.append(hidden[torch.arange(hidden.shape[0], device=hidden.device), first])
            elif mode == "max":
                vectors.append(hidden.masked_fill(mask == 0, float("-inf")).max(1).values)
            elif mode in ("mean", "mean_sqrt_len_tokens"):
                count = mask.sum(1).clamp(min=1e-9)
                vectors.append((hidden * mask).sum(1) / (count if mode == "mean" else count.sqrt()))
            elif mode == "weightedmean":  # position i of the real tokens weighs i + 1
                pads = attention_mask.to(torch.int32).argmax(1)[:, None, None]
                weights = mask * (torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=hidden.dtype)[None, :, None] - pads)
                vectors.append((hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9))
            else:  # lasttoken: the last real token
                last = hidden.shape[1] - 1 - attention_mask.flip(1).to(torch.int).argmax(1)
                vectors.append(hidden[torch.arange(hidden.shape[0], device=hidden.device), last])
        pooled = torch.cat(vectors, dim=-1)
        return F.normalize(pooled, p=2, dim=1) if self.normalize else pooled


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: cannot read it ({error}); the sentence-transformers files of this model are damaged") from None


def _modes(config_path: Path) -> tuple[str, ...]:
    """The pooling modes of a Pooling module's config: `pooling_mode` (a name or a list) or the legacy flags."""
    if not config_path.is_file():
        return ("mean",)  # sentence-transformers' own default
    config = _json(config_path)
    given = config.get("pooling_mode")
    if given is not None:
        modes = (given,) if isinstance(given, str) else tuple(given)
    else:
        modes = tuple(mode for key, mode in LEGACY_MODES.items() if config.get(key)) or ("mean",)
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        raise InputError(f"{config_path}: unknown pooling mode {unknown[0]!r}; sentence-transformers' modes are {', '.join(MODES)}")
    return modes
