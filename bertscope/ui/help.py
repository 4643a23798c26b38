"""The `?` screen: every key, what it does, and where to read more."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

HELP = """\
# bertscope explorer

Type a sentence (and, if you like, a second segment) and press **Enter**. Pick a head in
the grid; its attention shows on the right, rows attending to columns. Switch heads off
and every pane shows the effect.

| key | what it does |
| --- | --- |
| `tab` / `shift+tab` | move between the sentence, the pair, the grid, the effect pane (arrows scroll it) and the heatmap |
| `/` | type a new sentence; **Enter** runs it and gives the keys back to the grid, `escape` leaves the box |
| arrows (grid) | choose a layer and head; the heatmap repaints from memory |
| arrows (heatmap) | move the cursor cell: from-token → to-token and its weight (the line above the map); `pageup`/`pagedown` a screenful, `home`/`end` the first/last column; a click picks a cell |
| `z` | zoom: the heatmap alone on the screen, and back |
| `s` | the heatmap's colour scale: `max` (0 to the map's largest weight), `row` (each query row to its own largest), `fixed` (0–1, to compare heads), `log` (three decades below the largest); the legend gives its numbers |
| `d` | dense heatmap: two query rows a line (half blocks), or one; by itself it goes dense only where the map would not fit |
| `space` / double click | switch the selected head off, or back on |
| `l` | switch the selected head's whole layer off, or back on |
| `x` | switch every head back on |
| `a` | ablation: `zero` (remove the head's output, Michel et al.) or `uniform` (attend evenly, Kovaleva et al.) |
| `f` | the figure that shades the grid: entropy, attention to [CLS], [SEP], punctuation, self, previous, next token, distance, tracks a dependency relation (`y`) |
| `v` | view: one head, or the average over the layer's heads |
| `n` | the heatmap's cells: attention weights α, or value-weighted norms ‖αf‖ = ‖α_ij f_h(x_j)‖, f_h(x) = (x W_V + b_V) W_O of the head without W_O's bias (Kobayashi et al. 2020: how much a head moves from a token, not only where it looks; heavy attention to [CLS], [SEP] or punctuation often moves little). The legend, title and status line say which is shown; `fixed` scale then runs from 0 to the sentence's largest norm. In the layer view (`v`) `n` goes on to the context-mixing measures of the whole layer (computed once for the sentence and mask; `escape` cancels): value zeroing (Mohebbi et al. 2023), ALTI (Ferrando et al. 2022), and attention rollout and flow from the input to the layer (Abnar & Zuidema 2020); see `bertscope mixing` |
| `t` | next theme (the heatmap colours follow it) |
| `e` | export, on every screen: the screen as SVG and its data (here the heatmap's matrix as CSV), never overwriting |
| `p` | probing: what each layer knows, several tasks side by side; `m` there re-scores under this mask (and erasure); `d` adds each layer's description length (Voita & Titov 2020's online code: compression over a uniform code, a word task's control task beside it), also for the curves drawn before |
| `E` | erase a property: LEACE (Belrose et al. 2023) for a task at a hidden state, fitted once on the task's built-in training sentences; from then on every pass here runs with it, as with a mask (the heatmap from that layer up, the effect pane, mixing, attribution, the syntax figure, the overview, geometry, the objective pane, the probing pane's `m`): amnesic probing live (Elazar et al. 2021). `E` again takes it away; a session file keeps it (fitted again on reopening); `bertscope erase` measures it over a test set |
| `F` | SAE features: open a sparse autoencoder's directory (`bertscope sae train -o DIR`); each token's most active features on the sentence with their labels on the sample treebank (Enter: a feature's top contexts there); `o` switches the selected one off in every pass (the state replaced by the reconstruction without it plus the SAE's error), `c` clamps it, `x` switches all back; every pane follows as it follows a mask; a session file keeps them |
| `b` | attribution: shade the sentence's tokens by gradient, gradient × input, integrated gradients, attention rollout or flow, or value-weighted norms, value zeroing or ALTI rolled out from the input (the row the decision reads), or switch it off |
| `B` | what attribution explains: the MLM guess at the first `[MASK]`, the predicted class, or a probe's decision (trained once per task, then cached) |
| `i` | head importance (Michel et al.'s gradient) for the model's own task on shipped data (`token-classification` on the sample treebank, `similarity` on the sample pairs for a sentence-embedding model, `mlm` with an MLM head, else `preserve`): shades the grid, and the objective pane then follows every mask (and erasure); each head is then switched off alone, and those whose removal raises the metric are marked `+` (Kovaleva et al. §6); `i` again goes back |
| `I` | head importance for another objective, where more than one applies (a list; Enter chooses), or for the model's task on a file of yours (qa: SQuAD JSON; token-classification: CoNLL-2003 or CoNLL-U; similarity: an STS TSV; classification: a SentEval TSV): its path asked for, its first 64 items measured |
| `y` / `Y` | heads that track syntax (Clark et al.): the grid shaded by how often each head's most-attended other word is the dependency head (`Y`: the dependent) for a relation, over the sample treebank under the mask; `y` again: the next relation (the overview has them too, over its CoNLL-U corpus) |
| `P` | prune to X%: switch off the least important X% of the heads |
| `C` | pruning curve: the objective as ever more of the least important heads go; Enter masks the prunable ones |
| `g` | geometry: each layer's PCA scatter over a corpus coloured by label (arrows move through the layers, `f` changes the label), CKA layer × layer, TwoNN intrinsic dimension |
| `c` | compare with a model B of the same tokenizer (a fine-tuned checkpoint, say): the grid shaded by each head's attention cosine A·B, CKA per layer; Enter opens a head here |
| `X` | activation patching: type a corrupted copy of the sentence (a word changed, same token count); `m` chooses what is measured (`preserve` the final hidden states, a `probe`'s decision for a task, an `mlm` answer, a `class`), `d` denoise (clean into corrupted: what restores) or noise (what breaks); the grid shows each head's effect (red: carries the difference, blue: works against), beside each layer's attention and feed-forward writes and the residual stream token × hidden state; Enter opens a head here |
| `o` | overview: every head's pattern class and statistics over a corpus (Enter opens a head here; `n` there: the shares of value-weighted norms ‖αf‖ instead of the weights; `tab`, then the arrows, scroll its tables) |
| `escape` | leave a box; cancel the computation in progress; on another screen, go back |
| `ctrl+p` | command palette: every action by name |
| `?` | this help |
| `ctrl+q` | quit |

Keys are commands unless you chose a box on purpose (`/`, a click, `tab`); Enter and
`escape` give them back. Every screen opens on its main part: the grid, the curves, the
scatter. What the overview, probing, geometry, compare, patching and pruning-curve screens computed
stays while you move between screens: coming back shows it again (`r` runs again), and `m`
re-scores the kept probes under the current mask. `e` there saves the screen as SVG and
its data: the per-head table (CSV, with the mask and the erasure it ran under), the probe
curves (JSON), the scatter coordinates and CKA matrices (JSON), the per-head cosines and
CKA (JSON), the patching effects (JSON), the pruning curve (CSV).

The grid shades each head by the chosen figure for this sentence (the line under it gives
the selected head's value and the range of the shades); `×` marks a head that is
switched off. A switched-off head's heatmap shows its pattern before it was switched off,
dimmed. The effect pane shows, per layer, the cosine similarity between the hidden states
with and without the mask; with a masked-LM model and a `[MASK]` in the sentence, the top
guesses before → after. With attribution on, the row under the sentence says what is
explained and shades each token: orange raises the explained score, purple lowers it.

Themes are TOML files: copy one from the `themes/` folder of bertscope into
`~/.config/bertscope/themes/` (or `$BERTSCOPE_THEMES_DIR`), change the colours, and pick it
with `--theme NAME` or `t`.
"""


# Second in every screen's keys, after escape: the footer lists a screen's keys before the app's, so at 80
# columns the app's own `? help` was cut off on every screen but the main one.
HELP_KEY = Binding("question_mark", "app.help", "help")

# The keys that mean the same on every screen that has them, said the same way.
BACK_KEY = Binding("escape", "back", "back / cancel")  # cancels the run under way, else leaves (corpus_screen.RunScreen)
EXPORT_KEY = Binding("e", "export", "export")
OPEN_HEAD_KEY = Binding("enter", "open_head", "open head")  # back to the main view, on the head chosen here
RUN_AGAIN_KEY = Binding("r", "run", "run again")
FOCUS_CORPUS_KEY = Binding("slash", "focus_corpus", "corpus", show=False)


class HelpScreen(ModalScreen[None]):
    AUTO_FOCUS = "VerticalScroll"  # arrows and page keys scroll the help at once
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: 90%; border: round $primary; background: $surface; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            from textual.widgets import Markdown  # markdown-it and its rules: imported when help is first opened, not at start

            yield Markdown(HELP)

    def on_screen_resume(self) -> None:
        """Kept between openings (ui.app): each opens at the top."""
        self.query_one(VerticalScroll).scroll_home(animate=False)
