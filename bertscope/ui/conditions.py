"""What the explorer's passes run under: the head mask, its ablation and an erased property (`E`).

The main screen holds them; each screen whose analysis a mask changes (the overview, geometry, probing's `m`) takes them
as one value, runs with them, and ends its lines with what they are (`note`), so that a new condition is one edit here
and at the backend, not one in every screen's arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertscope.core.analyses.erasure_results import LiveErasure
from bertscope.core.model.masks import Ablation, HeadMask


def conditions_note(mask: str, ablation: str, erasure: LiveErasure | None = None) -> str:
    """What a run's passes were changed by, as its lines end: " · mask 0:3 (zero) · upos erased @4", or ""."""
    return (f" · mask {mask} ({ablation})" if mask else "") + (f" · {erasure.short()}" if erasure is not None else "")


@dataclass(frozen=True)
class Conditions:
    """The explorer's mask, ablation and erasure at one moment (equal values: the same passes)."""

    mask: HeadMask
    ablation: Ablation = "zero"
    erasure: LiveErasure | None = None

    @property
    def masked(self) -> HeadMask | None:
        """The mask where it switches a head off, else None."""
        return self.mask if len(self.mask) else None

    @property
    def changed(self) -> bool:
        """Whether the passes differ from the model as it is."""
        return bool(len(self.mask)) or self.erasure is not None

    def note(self) -> str:
        return conditions_note(self.mask.spec(), self.ablation, self.erasure)
