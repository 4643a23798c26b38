"""What the main view's passes run under, and every way the person changes it.

The head mask (the grid's toggles, `x`, `P`, the pruning curve's Enter), its ablation (`a`), a property erased in
every pass (`E`, fitted in a worker; ui.erasure) and SAE features switched off or clamped in every pass (`F`, the
features screen; ui.features) are held here and saved with the session; `current()` is them as one `Conditions` value
(ui.conditions), which the other screens and panels take, and `live` the two the backend applies by hooks. Head
importance is the model's objective under those conditions (the objective pane, ui.importance): it shades the grid
(`i`) and chooses what `P` prunes.
Every change calls the screen back (`follow`), which runs the sentence, the objective pane and the syntax figure again
under the new conditions; the grid's figure (`i`) and the status line it leaves to the screen to draw (`show_figure`,
`show_status`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from textual.screen import Screen

from bertscope.analyses.conditions import Conditions, LiveEdits, live_edits
from bertscope.analyses.erasure_results import LiveErasure
from bertscope.analyses.importance.results import HeadImportance
from bertscope.analyses.sae.results import LiveFeatures
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress
from bertscope.model.masks import HeadMask
from bertscope.ui.backend import Backend
from bertscope.ui.erasure import EraseScreen, training_sentences
from bertscope.ui.explorer import Explorer
from bertscope.ui.importance import IMPORTANCE_FIGURE, ObjectivePanel, PruneToScreen
from bertscope.ui.job_run import JobRun
from bertscope.ui.state import erasure_spec, features_spec, saved_erasure
from bertscope.ui.widgets.head_grid import HeadGrid
from bertscope.ui.widgets.panels import StatusLine


class ConditionsController:
    """The main screen's mask, ablation, erasure and switched SAE features, and head importance under them."""

    def __init__(
        self, screen: Screen, *, follow: Callable[[], None], show_figure: Callable[[], None], show_status: Callable[[], None]
    ) -> None:
        """`follow()`: the conditions changed, run again under them; `show_figure()`: the grid's figure changed;
        `show_status()`: the status line has something to say again (a fit ended)."""
        self._screen = screen
        self._follow, self._show_figure, self._show_status = follow, show_figure, show_status
        self.mask: HeadMask | None = None  # None until the model has loaded
        self.erasure: LiveErasure | None = None  # a property erased in every pass (`E`)
        self.features: LiveFeatures | None = None  # SAE features switched off or clamped in every pass (`F`)
        self.erasure_fitting = JobRun(screen, self._erasure_step, name="erasure", on_failed=self._erasure_failed, title="erasure")
        self._figure_before_importance = "entropy"  # the grid's figure to go back to from the importance overlay (`i`)

    @property
    def explorer(self) -> Explorer:
        return cast(Explorer, self._screen.app)

    def current(self) -> Conditions:
        """What every pass runs under now (the model is loaded, so there is a mask)."""
        assert self.mask is not None  # asked for once the model is loaded
        return Conditions(self.mask, self.explorer.state.ablation, self.erasure, self.features)

    @property
    def live(self) -> LiveEdits | None:
        """The erasure and the switched features, as the backend's passes take them (None: neither)."""
        return live_edits(self.erasure, self.features)

    def loaded(self) -> tuple[Backend, Conditions] | None:
        """The model and the conditions once the model has loaded; if not, say so."""
        backend = self.explorer.backend
        if backend is None or self.mask is None:
            self._screen.notify("the model is still loading", severity="warning")
            return None
        return backend, self.current()

    # the session's conditions, once the model is there

    def take_mask(self, backend: Backend) -> None:
        """The session's mask, on the loaded model's heads (the state is fitted to the model first), and its switched
        SAE features, before the first pass runs."""
        self.mask = HeadMask.parse(self.explorer.state.mask, backend.num_layers, backend.num_heads)
        self._restore_features(backend)

    def _restore_features(self, backend: Backend) -> None:
        """The last session's switched SAE features, on their SAE opened again; where it cannot be (moved, another
        model), a notification, and nothing is switched (the rest of the session stays)."""
        state = self.explorer.state
        if not state.switched:
            return
        try:
            opened, notes = backend.open_sae(state.sae)
            features = LiveFeatures(opened.directory, opened.layer, opened.d_sae, LiveFeatures.parse_spec(state.switched))
        except InputError as error:
            self._screen.notify(f"the session's SAE features are not switched: {error}", severity="warning", timeout=10)
            self.explorer.state = state.with_(switched="")
            return
        for note in notes:
            self._screen.notify(note, severity="warning", timeout=8)
        self._screen.notify(f"{features.describe()}, as the session left it: F opens the features screen", timeout=6)
        self.features = features

    def set_features(self, features: LiveFeatures | None) -> None:
        """From now on every pass runs with `features` switched (None, or nothing switched: as the model is); the
        session remembers them."""
        features = features if features is not None and features.switched else None
        if features == self.features:
            return
        self.features = features
        self.explorer.state = self.explorer.state.with_(**features_spec(features))
        self._show_status()
        self._follow()

    def restore_erasure(self, backend: Backend) -> None:
        """The last session's erasure: fitted again, as `E` fits it."""
        erased = self.explorer.state.erased
        restored = saved_erasure(erased, backend.num_layers) if erased else None
        if restored is not None:
            self._screen.notify(
                f"erasing {restored[0]} at hidden state {restored[1]} again, as the session left it: E takes it away", timeout=6
            )
            self._fit_erasure(backend, *restored)

    # the mask and its ablation

    def set_mask(self, mask: HeadMask) -> None:
        if self.mask is None:
            return
        self.mask = mask
        self.explorer.state = self.explorer.state.with_(mask=mask.spec())
        self._screen.query_one(HeadGrid).show_mask(mask)
        self._show_status()
        self._follow()

    def toggle_head(self, layer: int, head: int) -> None:
        if self.mask is not None:
            self.set_mask(self.mask.toggled(layer, head))

    def toggle_layer(self, layer: int) -> None:
        if self.mask is not None:
            self.set_mask(self.mask.layer_toggled(layer))

    def clear_mask(self) -> None:
        """`x`: every head on again."""
        if self.mask is not None and len(self.mask):
            self.set_mask(HeadMask.none(self.mask.num_layers, self.mask.num_heads))

    def apply_spec(self, spec: str | None) -> None:
        """A mask chosen on another screen (the pruning curve), as its spec; None: nothing chosen."""
        if spec is not None and self.mask is not None:
            self.set_mask(HeadMask.parse(spec, self.mask.num_layers, self.mask.num_heads))

    def toggle_ablation(self) -> None:
        """`a`: masked heads zeroed (Michel et al.) or attending uniformly (Kovaleva et al.)."""
        explorer = self.explorer
        explorer.state = explorer.state.with_(ablation="uniform" if explorer.state.ablation == "zero" else "zero")
        self._screen.notify(f"ablation: {explorer.state.ablation}", timeout=2)
        self._show_status()
        if self.mask is not None and len(self.mask):
            self._follow()
        else:
            explorer.save_state()

    # a property erased in every pass (ui.erasure)

    def erase(self) -> None:
        """`E`: erase a property (LEACE, fitted once) from a hidden state of every pass, or take the erasure away."""
        if (loaded := self.loaded()) is None:
            return
        if self.erasure is not None:
            self._screen.notify(f"{self.erasure.task} is no longer erased: E erases a property again", timeout=4)
            self._set_erasure(None)
            return
        backend, _conditions = loaded

        def chosen(choice: tuple[str, int] | None) -> None:
            if choice is not None:
                self._fit_erasure(backend, *choice)

        self._screen.app.push_screen(EraseScreen(self.explorer.state.layer, backend.num_layers), chosen)

    def cancel_erasure(self) -> None:
        """Escape: stop a fit under way; what was erased before it stays."""
        if self.erasure_fitting.cancel():
            self._set_busy(False)
            self._show_status()
            self._screen.notify("erasure cancelled: nothing is erased", timeout=3)
            self._forget_erasure()

    def _fit_erasure(self, backend: Backend, task: str, layer: int) -> None:
        self._screen.query_one(StatusLine).set_facts(f"erasing {task} at hidden state {layer}: fitting LEACE…")
        self._set_busy(True)
        self.erasure_fitting.start(lambda cancel: backend.fit_erasure(task, layer, training_sentences(task), cancel=cancel))

    def _set_erasure(self, erasure: LiveErasure | None) -> None:
        """From now on every pass runs with `erasure` (None: as the model is); the session remembers it."""
        self.erasure = erasure
        self.explorer.state = self.explorer.state.with_(erased=erasure_spec(erasure))
        self._follow()

    def _erasure_step(self, progress: Progress[LiveErasure]) -> None:
        if not progress.finished:
            self._screen.query_one(StatusLine).set_facts(
                f"fitting the eraser: {progress.stage} {progress.done}/{progress.total} (escape cancels)"
            )
            return
        self._set_busy(False)
        erasure = progress.result
        if erasure is None:
            return
        self._screen.notify(
            f"{erasure.describe()}, fitted on {erasure.sentences:,} sentences: the heatmap from layer {erasure.layer} up, the effect "
            "pane, mixing, attribution, the overview, syntax, geometry, the objective and the probing pane's m now run with it; "
            "E takes it away",
            timeout=8,
        )
        self._set_erasure(erasure)

    def _erasure_failed(self, _reason: str) -> None:
        self._set_busy(False)
        self._show_status()
        self._forget_erasure()

    def _forget_erasure(self) -> None:
        """A fit that did not finish (failed, cancelled): the session remembers the erasure in force, if any."""
        explorer = self.explorer
        if explorer.state.erased != erasure_spec(self.erasure):
            explorer.state = explorer.state.with_(erased=erasure_spec(self.erasure))
            explorer.save_state()

    def _set_busy(self, busy: bool) -> None:
        self._screen.query_one(StatusLine).set_busy(busy)

    # head importance under the conditions (ui.importance)

    def with_importance(self, then: Callable[[HeadImportance], None]) -> None:
        """Call `then(importance)` once head importance is known, estimating it first if needed."""
        if self.loaded() is None:
            return
        self._screen.query_one(ObjectivePanel).with_importance(then, self.current())

    def toggle_importance(self) -> None:
        """`i`: shade the grid by head importance (estimated on first use), or back to the previous figure."""
        explorer = self.explorer
        if explorer.state.figure == IMPORTANCE_FIGURE and self._screen.query_one(ObjectivePanel).importance is not None:
            explorer.state = explorer.state.with_(figure=self._figure_before_importance)
            self._show_figure()
            return

        def show(_importance: HeadImportance) -> None:
            if explorer.state.figure != IMPORTANCE_FIGURE:
                self._figure_before_importance = explorer.state.figure
            explorer.state = explorer.state.with_(figure=IMPORTANCE_FIGURE)
            self._show_figure()

        self.with_importance(show)

    def prune_to(self) -> None:
        """`P`: switch off the least important X% of the heads."""
        if self.loaded() is None:
            return

        def chosen(fraction: float | None) -> None:
            if fraction is not None:
                self.with_importance(lambda importance: self._prune_to(importance, fraction))

        self._screen.app.push_screen(PruneToScreen(), chosen)

    def _prune_to(self, importance: HeadImportance, fraction: float) -> None:
        if self.mask is None:
            return
        layers, heads_per_layer = self.mask.num_layers, self.mask.num_heads
        heads = importance.least_important(round(fraction * layers * heads_per_layer))
        self._screen.notify(f"masked the {len(heads)} least important heads ({fraction:.0%}) for {importance.objective}", timeout=4)
        self.set_mask(HeadMask(layers, heads_per_layer, frozenset(heads)))
