"""The main view's ways out: the screens it opens over itself, the export of its heatmap (`e`) and its palette entries.

Each screen opens with what it needs of the main view (the model, the conditions its passes run under, the look, the
corpus screens' kept results) and hands back what the person chose there: a head to show (overview, comparison,
patching) or a mask (the pruning curve). The command palette lists the main screen's keys by the actions they name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, cast

from textual.app import SystemCommand
from textual.screen import Screen

from bertscope.analyses.importance.results import HeadImportance
from bertscope.base.errors import InputError
from bertscope.model.labels import token_labels
from bertscope.render.heatmap import beyond_reach, reach_note
from bertscope.ui.comparison import ComparisonScreen
from bertscope.ui.conditions_controller import ConditionsController
from bertscope.ui.explorer import Explorer
from bertscope.ui.export import export_view, save_in_worker
from bertscope.ui.features import FeaturesScreen
from bertscope.ui.geometry import GeometryScreen
from bertscope.ui.heatmap_pane import CUMULATIVE, HeatmapPane
from bertscope.ui.importance import ObjectivePanel, PruningCurveScreen
from bertscope.ui.overview import OverviewScreen
from bertscope.ui.patching import PatchingScreen
from bertscope.ui.probing import ProbingScreen
from bertscope.ui.widgets.head_grid import HeadGrid

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# The command palette's entries (title, what it does, the action): the main screen's actions as its bindings name them,
# "grid." ones the head grid's.
PALETTE = (
    ("Toggle head", "Switch the selected head off or on", "grid.toggle_head"),
    ("Toggle layer", "Switch the selected head's layer off or on", "grid.toggle_layer"),
    ("Unmask all", "Switch every head back on", "clear_mask"),
    ("Switch ablation", "zero (Michel et al.) or uniform (Kovaleva et al.)", "toggle_ablation"),
    ("Next figure", "Shade the grid by another per-head figure", "next_figure"),
    ("Switch view", "One head, or the average over the layer's heads", "next_view"),
    ("Zoom heatmap", "The heatmap alone on the screen, and back", "zoom"),
    ("Colour scale", "Heatmap colours: max, row, fixed 0–1, log", "next_scale"),
    (
        "Heatmap cells",
        "Attention weights, value-weighted norms ‖α f(x)‖; in the layer view value zeroing, ALTI, rollout, flow",
        "next_cells",
    ),
    ("Dense heatmap", "Two query rows a line (half blocks), or one", "toggle_dense"),
    ("Export view", "Save the screen as SVG and the matrix as CSV", "export"),
    ("Overview", "Patterns and statistics of every head over a corpus", "overview"),
    ("Probing", "What each layer knows: probes per layer, several tasks side by side", "probing"),
    ("Attribution method", "Shade the tokens by gradient, gradient × input, integrated gradients, rollout, or off", "next_attribution"),
    ("Attribution target", "Explain the MLM guess, the class, or a probe's decision", "next_attribution_target"),
    ("Head importance", "Shade the grid by each head's importance for the model's objective", "importance"),
    ("Prune to X%", "Switch off the least important X% of the heads", "prune_to"),
    ("Pruning curve", "The objective as ever more of the least important heads are removed", "pruning_curve"),
    ("Geometry", "PCA scatter per layer, CKA layer × layer, intrinsic dimension over a corpus", "geometry"),
    ("Compare models", "Attention cosine per head and CKA per layer against a model B", "compare"),
    ("Erase a property", "LEACE-erase a task's property from a hidden state of every pass (amnesic probing), or stop", "erase"),
    ("SAE features", "A sparse autoencoder's features on the sentence; switch them off or clamp them in every pass", "features"),
    ("Cancel", "Cancel the computation in progress", "cancel"),
)


def palette_commands(screen: Screen) -> Iterator[SystemCommand]:
    """The command palette's entries for the main screen's actions."""
    grid = screen.query_one(HeadGrid)
    for title, help_text, action in PALETTE:
        owner, name = (grid, action.removeprefix("grid.")) if action.startswith("grid.") else (screen, action)
        yield SystemCommand(title, help_text, getattr(owner, f"action_{name}"))


class Launchers:
    """Opens the other screens over the main one, and exports its heatmap."""

    def __init__(self, screen: Screen, conditions: ConditionsController, open_head: Callable[[tuple[int, int] | None], None]) -> None:
        """`open_head(chosen)`: a head chosen on a screen opened from here (None: none), to show on the main one."""
        self._screen, self._conditions, self._open_head = screen, conditions, open_head

    @property
    def explorer(self) -> Explorer:
        return cast(Explorer, self._screen.app)

    def _place(self) -> tuple[int, int]:
        state = self.explorer.state
        return state.layer, state.head

    def overview(self) -> None:
        """`o`: all heads over a corpus; the head chosen there opens here."""
        if (loaded := self._conditions.loaded()) is None:
            return
        explorer = self.explorer
        screen = OverviewScreen(*loaded, explorer.colormap(), explorer.glyphs, self._place(), explorer.kept)
        self._screen.app.push_screen(screen, self._open_head)

    def probing(self) -> None:
        """`p`: what each layer knows; `m` there re-scores under the main view's conditions."""
        if (loaded := self._conditions.loaded()) is None:
            return
        self._screen.app.push_screen(ProbingScreen(*loaded, self.explorer.kept))

    def geometry(self) -> None:
        """`g`: representation geometry per layer over a corpus: PCA scatter, CKA, intrinsic dimension."""
        if (loaded := self._conditions.loaded()) is None:
            return
        explorer = self.explorer
        self._screen.app.push_screen(GeometryScreen(*loaded, explorer.colormap(), explorer.glyphs, explorer.kept))

    def compare(self) -> None:
        """`c`: this model against a model B with the same tokenizer; the head chosen there opens here."""
        if (loaded := self._conditions.loaded()) is None:
            return
        backend, _conditions = loaded
        explorer = self.explorer
        screen = ComparisonScreen(backend, explorer.colormap(), explorer.glyphs, self._place(), explorer.kept)
        self._screen.app.push_screen(screen, self._open_head)

    def patching(self) -> None:
        """`X`: activation patching between this sentence and a corrupted one; the head chosen there opens here."""
        if (loaded := self._conditions.loaded()) is None:
            return
        backend, conditions = loaded
        if len(mask := conditions.mask):
            self._screen.notify(f"patching runs the whole model: the mask here ({mask.spec()}) does not apply there", timeout=5)
        explorer, state = self.explorer, self.explorer.state
        screen = PatchingScreen(backend, state.text, state.pair or None, explorer.colormap(), explorer.glyphs, self._place(), explorer.kept)
        self._screen.app.push_screen(screen, self._open_head)

    def features(self) -> None:
        """`F`: an SAE's features on the sentence, switched off or clamped in every pass (the conditions keep them)."""
        if (loaded := self._conditions.loaded()) is None:
            return
        backend, conditions = loaded
        state = self.explorer.state
        try:
            encoding = backend.encode(state.text, state.pair or None)
        except InputError as error:
            self._screen.notify(str(error), severity="warning")
            return
        directory = conditions.features.directory if conditions.features is not None else state.sae
        self._screen.app.push_screen(FeaturesScreen(backend, encoding, directory, conditions.features, self._conditions.set_features))

    def pruning_curve(self) -> None:
        """`C`: the objective as ever more of the least important heads are removed; Enter there masks the prunable set."""

        def open_screen(importance: HeadImportance) -> None:
            if (loaded := self._conditions.loaded()) is None:
                return
            backend, conditions = loaded
            sample = self._screen.query_one(ObjectivePanel).sample
            screen = PruningCurveScreen(backend, importance.objective, sample, importance, conditions.ablation, self.explorer.kept)
            self._screen.app.push_screen(screen, self._conditions.apply_spec)

        self._conditions.with_importance(open_screen)

    def export(self) -> None:
        """`e`: the heatmap as a figure (as `bertscope attention --figure` draws it) and its matrix as CSV, in a worker."""
        pane = self._screen.query_one(HeatmapPane)
        analysis = pane.analysis
        if analysis is None:
            self._screen.notify("nothing to export yet", severity="warning")
            return
        explorer, state = self.explorer, self.explorer.state
        shown = pane.displayed(analysis)
        if shown is None:
            self._screen.notify(f"layer {state.layer}'s maps are still being computed; export once they show", severity="warning")
            return
        weights, _, before = shown
        mask, layer, view = analysis.current.mask, state.layer, state.view
        tokens, special = list(analysis.current.tokens), analysis.current.encoding.special
        head = None if view == "average" else state.head
        window = pane.window()
        notes = [reach_note(window, len(tokens)).removeprefix(" · ")]
        if before:
            notes.append(f"as before masking: head {layer}:{head} is switched off ({state.ablation} ablation)")
        elif len(mask):
            notes.append(f"{len(mask)} of {mask.num_layers * mask.num_heads} heads switched off ({state.ablation} ablation)")
        erasure = analysis.erasure
        if erasure is not None and layer >= erasure.layer:
            notes.append(erasure.describe())
        quantity, scale = "norm" if pane.norms_shown() else "weight", pane.scale
        cells = pane.cells_shown()
        mixing = analysis.mixing.get(cells)

        def draw() -> Figure:
            from bertscope.figures.heatmaps import attention_heatmap

            if mixing is not None:  # a context-mixing measure: drawn as `bertscope mixing --figure` draws it
                return mixing.figure(layer, rolled=cells in CUMULATIVE)
            note = "; ".join(note for note in notes if note) or None
            matrix = beyond_reach(weights, window)
            labels = token_labels(tokens, special)  # RoBERTa's `Ġte` as `te`, as on screen; the CSV keeps the tokens
            return attention_heatmap(
                matrix, labels, layer=layer, head=head, heads=mask.num_heads, quantity=quantity, scale=scale, note=note
            )

        save_in_worker(
            self._screen.app,
            lambda: export_view(
                explorer.export_dir,
                figure=draw(),
                matrix=weights,
                row_labels=tokens,
                col_labels=tokens,
                layer=layer,
                head=head,
                view=view,
                cells=cells,
                figure_format=explorer.figure_format,
            ),
        )
