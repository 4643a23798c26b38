"""The main view's heatmap pane: the map of the session's layer and head, and how it shows it.

The pane owns its view state: what the cells hold (`n`: attention weights, value-weighted norms, and in the layer view the
context-mixing measures), the colour scale (`s`) and rows a line (`d`), none of which the session saves. It also owns the
maps it computes on demand, each in a worker whose newest request wins: a long input's shown layer (the main screen holds
every layer's maps only up to ui.main_screen.EVERY_LAYER_CELLS) and a context-mixing measure of the sentence under its
mask (one `api.mixing` job, kept on the `Analysis`). The screen hands it each new `Analysis` to draw (`draw`); where the
pane's own keys or a finished computation change what shows, it calls the screen back (`on_changed`), so that the
status line and the token pane follow. Which layer and head it shows, the view (one head or the layer's mean, `v`)
and the cursor are the session's, which the app saves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np

from bertscope import api
from bertscope.analyses.mixing.results import METHOD_NAMES as MIXING_NAMES
from bertscope.analyses.mixing.results import Mixing
from bertscope.base.progress import Progress
from bertscope.render.heatmap import SCALES, beyond_reach, reach_note
from bertscope.ui.backend import Backend
from bertscope.ui.explorer import Explorer
from bertscope.ui.job_run import JobRun
from bertscope.ui.messages import Analysis, LayerMaps
from bertscope.ui.state import VIEWS
from bertscope.ui.widgets.attention_view import AttentionView

NORMS_LABEL = "‖αf‖"  # the heatmap's cells in norms mode: ‖α_ij f_h(x_j)‖ (model.norms)
# What the heatmap's cells hold (`n`): attention weights, value-weighted norms, and in the layer view (`v`) the
# context-mixing measures of the whole layer (analyses.mixing.run), computed on demand in a worker.
CELLS = ("weights", "norms", "value-zeroing", "alti", "rollout", "flow")
MIXING_CELLS = ("value-zeroing", "alti", "rollout", "flow")
CUMULATIVE = ("rollout", "flow")  # only rolled out: the map of layer l is from the input to layer l's output
SHORT_CELLS = {"norms": NORMS_LABEL, "value-zeroing": "VZ", "alti": "ALTI", "rollout": "rollout", "flow": "flow"}
CELL_NOTES = {
    "weights": "heatmap: attention weights α",
    "norms": f"heatmap: value-weighted norms {NORMS_LABEL} (how much each head moves from a token; Kobayashi et al. 2020)",
    "value-zeroing": "heatmap: value zeroing, the layer's output without token j's values (Mohebbi et al. 2023)",
    "alti": "heatmap: ALTI, token j's term of the attention block's output (Ferrando et al. 2022)",
    "rollout": "heatmap: attention rollout from the input to this layer (Abnar & Zuidema 2020)",
    "flow": "heatmap: attention flow from the input to this layer (Abnar & Zuidema 2020)",
}
SCALE_NOTES = {
    "max": "0 to the map's largest weight",
    "row": "each query row to its own largest weight",
    "fixed": "0 to 1, comparable across heads",
    "log": "three decades below the map's largest weight",
}


def layer_maps_of(backend: Backend, analysis: Analysis, layer: int) -> LayerMaps:
    """One layer's maps of a long input (in a worker): under the mask, and before it where a head of the layer is off."""
    current = analysis.current
    weights, norms = backend.layer_maps(current.encoding, layer, mask=current.mask, ablation=current.ablation, start_from=current)
    plain_weights = plain_norms = None
    if any(current.mask.is_masked(layer, head) for head in range(backend.num_heads)):
        plain_weights, plain_norms = backend.layer_maps(current.encoding, layer, start_from=analysis.plain)
    return LayerMaps(weights, norms, plain_weights, plain_norms)


class HeatmapPane(AttentionView):
    """The main view's heatmap: the session's head (or its layer's mean) of the sentence drawn last, as the pane's
    cells, scale and density say."""

    def __init__(self, on_changed: Callable[[], None], *, id: str | None = None) -> None:
        """`on_changed()`: what the pane shows changed on its own (a key, a computed map); the screen repaints."""
        super().__init__(id=id)
        self._on_changed = on_changed
        self.scale = "max"  # the colour scale, one of SCALES (`s`)
        self.cells = "weights"  # what the cells hold, as asked, one of CELLS (`n`); `cells_shown` says what they do
        self.dense: bool | None = None  # two query rows a line; None: where the map would not fit (`d`)
        self.analysis: Analysis | None = None  # the sentence drawn last
        self.layer_loading = JobRun(self, self._layer_loaded, name="layer maps", on_failed=self._layer_failed)
        self._layer_wanted: tuple[Analysis, int] | None = None  # a long input's layer being computed
        self.mixing_run = JobRun(self, self._mixing_step, name="context mixing", on_failed=self._mixing_failed, title="context mixing")
        self._mixing_wanted: tuple[Analysis, str] | None = None  # the measure being computed, and for which analysis

    @property
    def explorer(self) -> Explorer:
        return cast(Explorer, self.app)

    # drawing

    def draw(self, analysis: Analysis) -> np.ndarray | None:
        """Show the session's map of `analysis`; the matrix shown (unmarked by the layer's reach), or None while it is
        being computed (the pane says so, and asks for it)."""
        self.analysis = analysis
        state, explorer = self.explorer.state, self.explorer
        shown = self.displayed(analysis)
        cells = self.cells_shown()
        if shown is None and cells in MIXING_CELLS:  # the measure not computed yet for this sentence and mask
            self._load_mixing(analysis, cells)
            return None
        if shown is None:  # a long input's layer not computed yet
            self.show_message(f"layer {state.layer} of a {len(analysis.current.tokens)}-token input: computing its maps…")
            self._load_layer(state.layer)
            return None
        weights, title, masked = shown
        # Once the pane shows a map it owns the cursor: keys it has handled may not have reached the state yet.
        cursor = self.cursor if self.weights is not None else state.cursor
        window = self.window()
        self.show(
            beyond_reach(weights, window),
            analysis.labels,
            explorer.colormap(),
            title=title + reach_note(window, len(analysis.current.tokens)),
            short_title=self._short_title(analysis, masked, window),
            masked=masked,
            glyphs=explorer.glyphs,
            cursor=cursor,
            scale=self.scale,
            dense=self.dense,
            quantity=SHORT_CELLS.get(cells),
            vmax=self._fixed_top(analysis),
        )
        return weights

    def window(self) -> int | None:
        """The shown layer's attention window (a local layer's reach), or None where it sees every token."""
        backend, layer = self.explorer.backend, self.explorer.state.layer
        windows = backend.info.attention_windows if backend is not None else ()
        return windows[layer] if layer < len(windows) else None

    def cells_shown(self) -> str:
        """What the cells hold now: as asked (`n`) where the view and the backend allow, else the weights.

        The context-mixing measures are a layer's, shown in the layer view; the head view then shows weights."""
        cells = self.cells
        if cells == "norms" and not self._norms_available():
            return "weights"
        if cells in MIXING_CELLS and self.explorer.state.view != "average":
            return "weights"
        return cells

    def norms_shown(self) -> bool:
        """Whether the heatmap shows norms: asked for (`n`) and computed by the backend."""
        return self.cells_shown() == "norms"

    def cells_status(self) -> str | None:
        """What the cells hold, for the status line; None for the weights."""
        cells = self.cells
        if cells == "weights":
            return None
        if cells == "norms":
            return f"{NORMS_LABEL} norms"
        return MIXING_NAMES[cells] + ("" if self.cells_shown() == cells else " (layer view)")

    def _norms_available(self) -> bool:
        analysis = self.analysis
        return analysis is not None and (not analysis.every_layer or analysis.current.norms is not None)

    def _fixed_top(self, analysis: Analysis) -> float:
        """The top of the `fixed` scale: 1 for weights; for norms, the largest of the sentence (of the shown
        layer, for a long input), comparable across heads."""
        if not self.norms_shown():
            return 1.0
        layer = self.explorer.state.layer
        if analysis.every_layer:
            stacks = [analysis.plain.norms, analysis.current.norms]
        else:
            stacks = [analysis.maps(layer, norms=True), analysis.maps(layer, plain=True, norms=True)]
        return max([float(stack.max()) for stack in stacks if stack is not None] + [1e-12])

    def displayed(self, analysis: Analysis) -> tuple[np.ndarray, str, bool] | None:
        """The map of the session's place, its title, and whether it shows a masked head before masking; None while a
        long input's layer or a context-mixing measure is being computed."""
        state = self.explorer.state
        layer, head = state.layer, state.head
        mask = analysis.current.mask
        cells = self.cells_shown()
        if cells in MIXING_CELLS:
            mixing = analysis.mixing.get(cells)
            if mixing is None:
                return None
            if cells in CUMULATIVE:
                return mixing.rolled[layer], f"input → layer {layer} · {MIXING_NAMES[cells]}{self._mask_note(analysis)}", False
            assert mixing.per_layer is not None  # every measure but rollout and flow has its layers' own maps
            return mixing.per_layer[layer], f"layer {layer} · {MIXING_NAMES[cells]}{self._mask_note(analysis)}", False
        norms = cells == "norms"
        what = f" · {NORMS_LABEL}" if norms else ""
        before = state.view != "average" and mask.is_masked(layer, head)
        maps = analysis.maps(layer, plain=before, norms=norms)
        if maps is None:
            return None
        if state.view == "average":
            return maps.mean(0), f"layer {layer} · mean of {len(maps)} heads{what}{self._mask_note(analysis)}", False
        if before:
            return maps[head], f"layer {layer} · head {head}{what} · before masking", True
        return maps[head], f"layer {layer} · head {head}{what}{self._mask_note(analysis)}", False

    def _short_title(self, analysis: Analysis, before: bool, window: int | None) -> str:
        """The title for a narrow pane (80 columns): the head as LAYER:HEAD, the notes in a word each."""
        state = self.explorer.state
        cells = self.cells_shown()
        if cells in CUMULATIVE:
            parts = [f"→{state.layer}"]
        elif cells in MIXING_CELLS:
            parts = [f"layer {state.layer}"]
        else:
            parts = [f"{state.layer}:{'mean' if state.view == 'average' else state.head}"]
        if cells != "weights":
            parts.append(SHORT_CELLS[cells])
        if before:
            parts.append("before masking")
        elif len(analysis.current.mask):
            parts.append(f"{len(analysis.current.mask)} off")
        if analysis.erasure is not None and state.layer >= analysis.erasure.layer:
            parts.append("erased" if analysis.erasure.features is None else "edited")
        if reach_note(window, len(analysis.current.tokens)):
            parts.append(f"local ±{window}")
        return " · ".join(parts)

    def _mask_note(self, analysis: Analysis) -> str:
        """What the shown map is under: heads off (the ablation is in the status line), and a property erased or SAE
        features switched below it."""
        mask, erasure = analysis.current.mask, analysis.erasure
        note = f" · {len(mask)} off" if len(mask) else ""
        if erasure is not None and self.explorer.state.layer >= erasure.layer:  # layer l reads hidden state l
            note += f" · {erasure.short()}"
        return note

    # the pane's keys, which the main screen binds (they act wherever the focus is)

    def next_view(self) -> None:
        """`v`: one head, or the mean of the layer's heads (the view the context-mixing measures show in)."""
        explorer = self.explorer
        explorer.state = explorer.state.with_(view=VIEWS[(VIEWS.index(explorer.state.view) + 1) % len(VIEWS)])
        if self.cells in MIXING_CELLS and explorer.state.view != "average":
            name = MIXING_NAMES[self.cells]
            self.notify(f"{name} is a whole layer's: one head shows its weights (v for the layer's {name})", timeout=4)
        self._on_changed()
        explorer.save_state()

    def next_scale(self) -> None:
        """`s`: the colour scale, max, row, fixed (0–1), log (the legend shows its numbers)."""
        self.scale = SCALES[(SCALES.index(self.scale) + 1) % len(SCALES)]
        note = SCALE_NOTES[self.scale]
        if self.analysis is not None and self.norms_shown():
            whose = "the sentence's" if self.analysis.every_layer else "this layer's"
            note = f"0 to {whose} largest norm, comparable across heads" if self.scale == "fixed" else note.replace("weight", "norm")
        self.notify(f"colour scale: {self.scale} ({note})", timeout=3)
        self._on_changed()

    def next_cells(self) -> None:
        """`n`: attention weights α, the value-weighted norms ‖α f(x)‖ (Kobayashi et al. 2020), and in the layer view
        the context-mixing measures (value zeroing, ALTI, rollout, flow)."""
        view = self.explorer.state.view
        order: tuple[str, ...] = CELLS if view == "average" else CELLS[:2]
        if self.analysis is not None and not self._norms_available():
            if view != "average":
                self.notify("this backend gives no value-weighted norms; showing the weights", severity="warning", timeout=4)
                return
            order = tuple(cells for cells in order if cells != "norms")
        shown = self.cells_shown()
        self.cells = order[(order.index(shown) + 1) % len(order)] if shown in order else order[0]
        self.notify(CELL_NOTES[self.cells], timeout=4 if self.cells != "weights" else 2)
        self._on_changed()

    def toggle_dense(self) -> None:
        """`d`: two query rows a line (half blocks), or one; the first press overrides the automatic choice."""
        self.dense = not self.dense_shown
        if self.dense and self.explorer.glyphs:
            self.notify("shade glyphs have no halves: dense needs colours (--colours)", severity="warning", timeout=4)
        else:
            self.notify(f"heatmap: {'two rows' if self.dense else 'one row'} a line", timeout=2)
        self._on_changed()

    def cancel_mixing(self) -> None:
        """Escape: stop a context-mixing measure under way; the pane goes back to the weights if it was waiting for it."""
        wanted = self._mixing_wanted
        if self.mixing_run.cancel() and wanted is not None:
            self._mixing_wanted = None
            self.notify(f"{MIXING_NAMES[wanted[1]]} cancelled; showing the weights", timeout=3)
            if self.cells == wanted[1]:
                self.cells = "weights"
                self._on_changed()

    # a long input's maps, one layer at a time

    def _load_layer(self, layer: int) -> None:
        """Compute the shown layer's maps of a long input in a worker (unless they are on their way)."""
        analysis, backend = self.analysis, self.explorer.backend
        if analysis is None or backend is None:
            return
        wanted = self._layer_wanted
        if wanted is not None and wanted[0] is analysis and wanted[1] == layer:
            return
        self._layer_wanted = (analysis, layer)
        self.layer_loading.start(
            lambda _cancel: iter([Progress("layer", 1, 1, (analysis, layer, layer_maps_of(backend, analysis, layer)))])
        )

    def _layer_loaded(self, progress: Progress[tuple[Analysis, int, LayerMaps]]) -> None:
        if progress.result is None:
            return
        analysis, layer, maps = progress.result
        self._layer_wanted = None
        if analysis is not self.analysis:
            return  # a newer sentence or mask: its own maps are on their way
        analysis.layers.clear()  # one layer's maps held at a time
        analysis.layers[layer] = maps
        self._on_changed()

    def _layer_failed(self, _reason: str) -> None:
        self._layer_wanted = None
        self.show_message(f"layer {self.explorer.state.layer}'s maps could not be computed")

    # a context-mixing measure of the sentence, every layer's at once (`n` in the layer view)

    def _load_mixing(self, analysis: Analysis, method: str) -> None:
        """Compute `method` for the analysis shown in a worker (unless it is on its way); the pane says how it goes."""
        backend = self.explorer.backend
        if backend is None:
            return
        if self._mixing_wanted != (analysis, method):
            self._mixing_wanted = (analysis, method)
            current = analysis.current
            erasure = analysis.erasure
            self.mixing_run.start(
                lambda cancel: backend.steps(
                    api.mixing, erasure, current.encoding, method=method, mask=current.mask, ablation=current.ablation, cancel=cancel
                )
            )
        self.show_message(f"{MIXING_NAMES[method]} of this sentence: computing… (escape cancels)")

    def _mixing_step(self, progress: Progress[Mixing]) -> None:
        wanted = self._mixing_wanted
        if wanted is None:
            return
        analysis, method = wanted
        if not progress.finished:
            if analysis is self.analysis and self.cells_shown() == method:
                what = f"{progress.stage}: {progress.done}/{progress.total}" if progress.total else progress.stage
                self.show_message(f"{MIXING_NAMES[method]} of this sentence: {what} (escape cancels)")
            return
        self._mixing_wanted = None
        if progress.result is not None:
            analysis.mixing[method] = progress.result
        if analysis is self.analysis:
            self._on_changed()

    def _mixing_failed(self, _reason: str) -> None:
        """The notification says why; the pane goes back to the weights rather than asking again."""
        self._mixing_wanted = None
        self.cells = "weights"
        self._on_changed()
