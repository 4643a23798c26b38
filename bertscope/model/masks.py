"""Head masks: which attention heads are switched off, and how.

Plain Python and numpy (no torch), so the UI can build and toggle masks itself. Layers
and heads count from 0. The command-line spec is `L:H` items separated by commas, with
`L:*` for a whole layer, e.g. `0:3,2:*`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from bertscope.base.errors import MaskSpecError

Ablation = Literal["zero", "uniform"]
ABLATIONS: tuple[Ablation, ...] = ("zero", "uniform")
"""`zero` removes the head's output (Michel et al. 2019, the old `head_mask`);
`uniform` makes the head attend equally to every real token (Kovaleva et al. 2019)."""


@dataclass(frozen=True)
class HeadMask:
    """A set of switched-off heads in a model of `num_layers` x `num_heads`."""

    num_layers: int
    num_heads: int
    off: frozenset[tuple[int, int]] = frozenset()

    @classmethod
    def none(cls, num_layers: int, num_heads: int) -> HeadMask:
        return cls(num_layers, num_heads)

    @classmethod
    def parse(cls, spec: str | None, num_layers: int, num_heads: int) -> HeadMask:
        """Read a spec like `0:3,2:*`; an empty or missing spec masks nothing."""
        off: set[tuple[int, int]] = set()
        for layer, head in _items(spec, num_layers, num_heads):
            if head is None:
                off.update((layer, every) for every in range(num_heads))
            else:
                off.add((layer, head))
        return cls(num_layers, num_heads, frozenset(off))

    @staticmethod
    def check_spec(spec: str | None) -> None:
        """Raise MaskSpecError for a spec that is malformed whatever the model (before loading one)."""
        for _ in _items(spec, None, None):
            pass

    @classmethod
    def from_gates(cls, gates: np.ndarray) -> HeadMask:
        """The heads whose gate is 0 in a `[L, H]` array of 1s and 0s."""
        layers, heads = np.nonzero(np.asarray(gates) == 0)
        return cls(gates.shape[0], gates.shape[1], frozenset(zip(layers.tolist(), heads.tolist())))

    def __post_init__(self) -> None:
        for layer, head in self.off:
            if not (0 <= layer < self.num_layers and 0 <= head < self.num_heads):
                raise MaskSpecError(f"head {layer}:{head} is outside this model's {self.num_layers} layers x {self.num_heads} heads")

    def __len__(self) -> int:
        return len(self.off)

    def __contains__(self, layer_head: object) -> bool:
        return layer_head in self.off

    def is_masked(self, layer: int, head: int) -> bool:
        return (layer, head) in self.off

    def toggled(self, layer: int, head: int) -> HeadMask:
        """A copy with one head's state flipped."""
        return HeadMask(self.num_layers, self.num_heads, self.off ^ {(layer, head)})

    def layer_toggled(self, layer: int) -> HeadMask:
        """A copy with a whole layer switched off, or back on if it was all off."""
        layer_heads = {(layer, head) for head in range(self.num_heads)}
        off = self.off - layer_heads if layer_heads <= self.off else self.off | layer_heads
        return HeadMask(self.num_layers, self.num_heads, frozenset(off))

    def gates(self) -> np.ndarray:
        """`[L, H]` float32 gates: 1 keeps a head, 0 switches it off."""
        gates = np.ones((self.num_layers, self.num_heads), dtype=np.float32)
        for layer, head in self.off:
            gates[layer, head] = 0.0
        return gates

    def spec(self) -> str:
        """The canonical spec, whole layers written as `L:*`; '' when nothing is masked."""
        items = []
        for layer in range(self.num_layers):
            heads = sorted(head for (masked_layer, head) in self.off if masked_layer == layer)
            if len(heads) == self.num_heads:
                items.append(f"{layer}:*")
            else:
                items.extend(f"{layer}:{head}" for head in heads)
        return ",".join(items)


def _items(spec: str | None, num_layers: int | None, num_heads: int | None) -> Iterator[tuple[int, int | None]]:
    """(layer, head) of each item of a spec, head None for `L:*`; bounds checked where counts are given."""
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        layer_text, sep, head_text = item.partition(":")
        if not sep:
            raise MaskSpecError(f"mask item {item!r} is not LAYER:HEAD; write e.g. 0:3 for one head or 2:* for a layer")
        layer = _index(layer_text, num_layers, "layer", item)
        yield layer, None if head_text.strip() == "*" else _index(head_text, num_heads, "head", item)


def check_ablation(ablation: str) -> Ablation:
    if ablation not in ABLATIONS:
        raise MaskSpecError(f"unknown ablation {ablation!r}; use one of: {', '.join(ABLATIONS)}")
    return ablation


def _index(text: str, count: int | None, what: str, item: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"-?[0-9]+", text):
        raise MaskSpecError(f"{what} {text!r} in mask item {item!r} is not a number; write e.g. 0:3 for one head or 2:* for a layer")
    value = int(text)
    if value < 0:
        bounds = "" if count is None else f" (this model: 0-{count - 1})"
        raise MaskSpecError(f"{what} {value} in mask item {item!r} is negative: layers and heads count from 0{bounds}")
    if count is not None and value >= count:
        raise MaskSpecError(f"{what} {value} in mask item {item!r} is out of range: this model has {count} {what}s (0-{count - 1})")
    return value
