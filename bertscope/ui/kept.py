"""Results of the corpus screens, kept on the app so that leaving a screen loses nothing.

A screen is made anew each time it opens; what it computed lives here, keyed by the screen,
and comes back when it opens again. A finished run replaces the one before it (new data,
another model B); a cancelled or failed run keeps the last finished one. The model never
changes while the app runs, so nothing here needs to be thrown away for that.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bertscope.analyses.conditions import Conditions, LiveEdits, conditions_note
from bertscope.analyses.erasure_results import LiveErasure
from bertscope.analyses.probing.results import ProbeReport
from bertscope.model.masks import Ablation, HeadMask


def erasure_json(live: LiveErasure | LiveEdits | None) -> dict[str, Any]:
    """What an export adds of the property erased in its passes, `{"erased": {task, layer, rank, sentences}}`, and of
    the SAE features switched there, `{"switched": {directory, layer, d_sae, switched: [[feature, null | value]]}}`."""
    edits = live if isinstance(live, LiveEdits) else LiveEdits(erasure=live)
    return ({"erased": asdict(edits.erasure)} if edits.erasure is not None else {}) | (
        {"switched": asdict(edits.features)} if edits.features is not None else {}
    )


@dataclass(frozen=True)
class KeptRun:
    """A finished run: what it ran on, under which mask and erasure, and what it found."""

    data: str  # the corpus path ("" for the built-in one); for compare, model B and the corpus
    mask: str  # the head mask spec it ran under ("" for none)
    ablation: str
    result: object
    view: dict = field(default_factory=dict)  # how the screen showed it (layer, label, ...)
    erasure: LiveEdits | None = None  # the property erased (`E`) and the SAE features switched (`F`) in its passes, if any

    @classmethod
    def of(cls, data: str, conditions: Conditions | None, result: object, view: dict | None = None) -> KeptRun:
        """A run on `data` under the explorer's `conditions` (None: a run no mask changes)."""
        if conditions is None:
            return cls(data, "", "", result, view or {})
        return cls(data, conditions.mask.spec(), conditions.ablation, result, view or {}, conditions.live)

    def mask_note(self) -> str:
        return conditions_note(self.mask, self.ablation, self.erasure)


@dataclass(frozen=True)
class ProbeRun:
    """What a probing curve ran on, to run it again: `d` fits the description length of a curve run without it."""

    task: str
    data: str  # the file ("" for the built-in sentences)
    mask: HeadMask | None = None
    ablation: Ablation = "zero"
    erasure: LiveEdits | None = None


@dataclass
class KeptResults:
    runs: dict[str, KeptRun] = field(default_factory=dict)  # screen name -> its last finished run
    probes: dict[str, ProbeReport] = field(default_factory=dict)  # probing: column title -> report, in run order
    last_probe: tuple[str, str] | None = None  # probing: (task, data) of the last run, for `m`
    probe_runs: dict[str, ProbeRun] = field(default_factory=dict)  # probing: column title -> what it ran on
    probe_codes: bool = False  # probing: runs fit the online code too, and the curves show its compression (`d`)
