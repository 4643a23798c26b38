"""Figures for papers: each kind shows its result's numbers, labelled as the papers label them, and is written whole.

The figures are checked by what they hold (the image's array, tick labels, colour bar and
legend labels, line data, marker positions), not by pixels. The results come from the UI's
fake backend (known arrays, no torch); one command runs end to end on the bundled model.
"""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from bertscope.analyses.attention.patterns_results import PATTERNS
from bertscope.api import built_in_treebank
from bertscope.base.errors import BertscopeError, InputError
from bertscope.figures.curves import ProbeCurve, probe_curves
from bertscope.figures.grids import head_grid
from bertscope.figures.heatmaps import attention_heatmap, residual_map
from bertscope.figures.layout import MAX_TOKENS
from bertscope.figures.save import check_figure_path, save_figure
from bertscope.figures.scatter import MAX_LABELS, pca_scatter
from bertscope.figures.strips import attribution_strip
from bertscope.model.masks import HeadMask
from tests.fake_backend import HEADS, LAYERS, FakeBackend
from tests.helpers.models import command_in_a_new_process

SENTENCES = ["The keys to the cabinet are on the table.", "A dog barked.", "It rained all day."]


def last(stream):
    return list(stream)[-1].result


@pytest.fixture(scope="module")
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture(scope="module")
def importance(backend):
    return last(backend.importance("preserve", SENTENCES))


def title_of(figure: Figure) -> str:
    """The figure's title: over its one plot, or over the whole figure."""
    suptitle = figure._suptitle  # noqa: SLF001 (matplotlib keeps no public getter)
    return suptitle.get_text() if suptitle is not None else figure.axes[0].get_title()


def note_of(figure: Figure) -> str:
    return figure._supxlabel.get_text() if figure._supxlabel is not None else ""  # noqa: SLF001


def colour_bar_label(figure: Figure) -> str:
    """The label of the figure's colour bar (the axes beside the plot that carry one)."""
    labels = [ax.get_ylabel() or ax.get_xlabel() for ax in figure.axes if getattr(ax, "_colorbar", None) is not None]
    assert len(labels) == 1, labels
    return labels[0]


def ticks(ax, axis: str) -> list[str]:
    return [label.get_text() for label in (ax.get_xticklabels() if axis == "x" else ax.get_yticklabels())]


# --- attention heatmaps --------------------------------------------------------------------------


def test_the_heatmap_shows_the_whole_map_with_the_tokens_on_both_axes(backend):
    result = backend.forward("the cat sat on the mat", attentions=True)
    figure = result.figure(layer=1, head=2)
    ax = figure.axes[0]
    assert np.array_equal(ax.images[0].get_array(), result.attentions[1, 2])
    assert ticks(ax, "y") == list(result.tokens) and ticks(ax, "x") == list(result.tokens)
    assert all(label.get_rotation() == 90 for label in ax.get_xticklabels())  # the key tokens, written upwards
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("from (query token)", "to (key token)")
    assert colour_bar_label(figure) == "attention weight α"
    assert title_of(figure) == "layer 1 · head 2"


def test_the_mean_of_a_layer_the_norms_and_a_masked_head_are_said(backend):
    mask = HeadMask.parse("0:1", LAYERS, HEADS)
    result = backend.forward("the cat sat", attentions=True, norms=True, mask=mask)
    mean = result.figure(layer=0)
    assert np.allclose(mean.axes[0].images[0].get_array(), result.attentions[0].mean(0))
    assert title_of(mean) == f"layer 0 · mean of {HEADS} heads" and "switched off" in note_of(mean)
    masked = result.figure(layer=0, head=1)
    assert note_of(masked) == "head 0:1 switched off (zero ablation: its weights read 0)"
    norms = result.figure(layer=2, head=0, norms=True)
    assert np.array_equal(norms.axes[0].images[0].get_array(), result.norms[2, 0])
    assert colour_bar_label(norms) == "value-weighted norm ‖α f(x)‖"
    with pytest.raises(BertscopeError, match="kept no attentions to draw: run it with attentions=True"):
        backend.forward("the cat sat").figure()


def drawn_labels(figure: Figure, axis: str) -> list:
    """The tick labels of the figure's map along `axis` as drawn (Agg), with where each lies."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    ax = figure.axes[0]
    return [label.get_window_extent(canvas.get_renderer()) for label in (ax.get_xticklabels() if axis == "x" else ax.get_yticklabels())]


def test_every_token_of_a_long_input_is_labelled_on_both_axes_without_overlap():
    """Issue 54: a 62-token input labelled 31 tokens an axis; every row and column is named, the figure grows to fit."""
    tokens = ["[CLS]", *(f"word{i}" for i in range(60)), "[SEP]"]
    figure = attention_heatmap(np.full((62, 62), 1 / 62), tokens, layer=0, head=0)
    ax = figure.axes[0]
    assert ticks(ax, "y") == tokens and ticks(ax, "x") == tokens
    assert list(ax.get_yticks()) == list(range(62))  # each label at its own cell
    assert min(label.get_fontsize() for label in ax.get_yticklabels()) >= 5
    for axis in ("x", "y"):
        boxes = drawn_labels(figure, axis)
        assert not any(one.overlaps(two) for one, two in zip(boxes, boxes[1:])), axis
    short = attention_heatmap(np.full((8, 8), 1 / 8), tokens[:8], layer=0, head=0)
    assert figure.get_size_inches()[1] > short.get_size_inches()[1] + 5  # the figure grows with the input
    assert note_of(figure) == ""  # nothing left out, nothing to say


def test_past_what_prints_legibly_the_figure_shows_the_first_tokens_and_says_where_the_rest_are():
    tokens = [f"t{i}" for i in range(150)]
    matrix = np.tile(np.linspace(0.0, 1.0, 150), (150, 1))  # the largest values lie in the columns left out
    figure = attention_heatmap(matrix, tokens, layer=0, head=0, rest="--csv writes every token")
    ax = figure.axes[0]
    assert ticks(ax, "y") == tokens[:MAX_TOKENS] and ticks(ax, "x") == tokens[:MAX_TOKENS]
    assert ax.images[0].get_array().shape == (MAX_TOKENS, MAX_TOKENS)
    assert ax.images[0].norm.vmax == 1.0  # the colours of the whole map, not of the part shown
    assert note_of(figure) == f"the first {MAX_TOKENS} of 150 tokens shown (the most a figure labels legibly); --csv writes every token"
    assert min(label.get_fontsize() for label in ax.get_xticklabels()) >= 5


def test_a_forward_pass_figure_says_its_arrays_hold_the_tokens_it_leaves_out():
    backend = FakeBackend()
    backend.max_length = 200
    result = backend.forward(" ".join(["word"] * 120), attentions=True)
    figure = result.figure(layer=0, head=0)
    assert len(result.tokens) > MAX_TOKENS and len(ticks(figure.axes[0], "y")) == MAX_TOKENS
    assert note_of(figure).endswith(
        f"of {len(result.tokens)} tokens shown (the most a figure labels legibly); result.attentions has every token"
    )


def test_the_residual_stream_map_labels_every_token():
    tokens = [f"t{i}" for i in range(70)]
    figure = residual_map(np.zeros((4, 70)), tokens, differing={3})
    assert ticks(figure.axes[0], "y") == [f"{t}*" if i == 3 else t for i, t in enumerate(tokens)]
    boxes = drawn_labels(figure, "y")
    assert not any(one.overlaps(two) for one, two in zip(boxes, boxes[1:]))


def test_a_dollar_in_a_token_is_text_not_mathematics(tmp_path):
    figure = attention_heatmap(np.eye(3), ["$", "5", "$"], layer=0, head=0)
    svg = save_figure(figure, tmp_path / "dollars.svg").read_text()
    assert svg.count(">$</text>") == 4  # two tokens on each axis, written as they are


# --- layer × head grids --------------------------------------------------------------------------


def test_a_grid_shows_a_metric_per_head_with_masked_heads_marked():
    values = np.arange(12, dtype=float).reshape(3, 4) / 12
    figure = head_grid(values, "share of attention to [CLS]", masked={(1, 2)})
    ax = figure.axes[0]
    assert np.array_equal(ax.images[0].get_array(), values)
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("layer", "head")
    assert colour_bar_label(figure) == "share of attention to [CLS]"
    marks = [(text.get_position(), text.get_text()) for text in ax.texts if text.get_text() == "×"]
    assert marks == [((2, 1), "×")]  # x = head, y = layer
    assert "0.92" in [text.get_text() for text in ax.texts]  # small grids write each value


def test_signed_effects_use_a_diverging_scale_centred_on_zero(backend):
    result = last(backend.patch("the cat sat", "the dog sat", sweep=("heads",)))
    figure = result.figure()
    image = figure.axes[0].images[0]
    assert np.array_equal(image.get_array(), result.heads)
    assert image.norm.vmin == -image.norm.vmax == -np.abs(result.heads).max()
    assert image.get_cmap().name.startswith("RdBu_r")
    assert colour_bar_label(figure) == "effect (share of m(clean) − m(corrupt))"


def test_the_pattern_classes_have_a_legend_of_distinct_colours(backend):
    result = last(backend.patterns(SENTENCES))
    figure = result.figure()
    ax = figure.axes[0]
    assert np.array_equal(ax.images[0].get_array(), result.dominant)
    legend = figure.legends[0]
    assert [text.get_text() for text in legend.get_texts()] == [
        "V  vertical",
        "D  diagonal",
        "VD  vertical+diagonal",
        "B  block",
        "H  heterogeneous",
    ]
    colours = [to_hex(patch.get_facecolor()) for patch in legend.get_patches()]
    assert len(set(colours)) == len(PATTERNS)
    statistic = result.figure("entropy")
    assert np.array_equal(statistic.axes[0].images[0].get_array(), result.statistics["entropy"])
    assert colour_bar_label(statistic) == "attention entropy (nats)"
    with pytest.raises(InputError, match="no statistic 'nope': choose one of cls, sep"):
        result.figure("nope")


def test_a_head_switched_off_is_its_own_class_in_the_figure_and_marked_in_a_statistic(backend):
    mask = HeadMask.parse("1:2", LAYERS, HEADS)
    result = last(backend.patterns(SENTENCES, mask=mask))
    figure = result.figure()
    ax = figure.axes[0]
    assert [text.get_text() for text in ax.texts if text.get_position() == (2, 1)] == ["×"]  # x = head, y = layer
    assert "×" not in [text.get_text() for text in ax.texts if text.get_position() != (2, 1)]
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    assert legend[-1] == "×  off (switched off; not in the shares)" and len(legend) == len(PATTERNS) + 1
    assert note_of(figure).endswith("tokens · mask 1:2 (zero)")  # what the passes ran under, from the result itself
    statistic = result.figure("cls")
    assert [text.get_position() for text in statistic.axes[0].texts if text.get_text() == "×"] == [(2, 1)]
    assert result.figure(under=" · mask 1:2 (zero) · upos erased @1").get_supxlabel().endswith("upos erased @1")
    unmasked = last(backend.patterns(SENTENCES)).figure()
    assert len(unmasked.legends[0].get_texts()) == len(PATTERNS)  # no class off where no head was


def test_importance_syntax_and_comparison_grids_draw_their_arrays(backend, importance):
    figure = importance.figure()
    assert np.array_equal(figure.axes[0].images[0].get_array(), importance.importance)
    assert colour_bar_label(figure).startswith("importance E‖∂h/∂ξ_h‖²")  # the preserve objective's movement
    treebank = list(built_in_treebank(30).sentences)
    syntax = last(backend.syntax(treebank[:3]))
    relation = syntax.by_frequency()[0]
    grids = syntax.figure([relation])
    assert np.array_equal(grids.axes[0].images[0].get_array(), syntax.accuracy(relation))
    assert grids.axes[0].get_title().startswith(f"{relation} (n = ")
    assert colour_bar_label(grids) == "accuracy, dependent → head"
    layer, head, _ = syntax.best(relation)
    box = grids.axes[0].patches[0]
    assert box.get_xy() == (head - 0.5, layer - 0.5)  # the best head boxed
    comparison = last(backend.compare("model-b", SENTENCES))
    cosine = comparison.figure()
    assert np.array_equal(cosine.axes[0].images[0].get_array(), comparison.head_cosine)
    cka = comparison.figure("cka")
    assert np.array_equal(cka.axes[0].images[0].get_array(), comparison.cka)
    assert cka.axes[0].get_xlabel() == "B: model-b · layer"


# --- curves --------------------------------------------------------------------------------------


def test_a_probing_curve_has_its_numbers_its_baselines_dashed_and_its_best_layer_starred(backend):
    report = last(backend.probe("sentence_length"))
    figure = report.figure()
    ax = figure.axes[0]
    line = ax.lines[0]
    assert list(line.get_ydata()) == [layer[report.metric] for layer in report.layers]
    assert list(line.get_xdata()) == list(range(len(report.layers)))
    assert ax.get_xlabel() == "layer (0 = embeddings)" and ax.get_ylabel() == report.metric
    majority = next(line for line in ax.lines if line.get_label() == "majority class")
    assert set(majority.get_ydata()) == {report.baselines["majority"]} and majority.get_linestyle() != "-"
    star = next(line for line in ax.lines if line.get_label() == "best layer")
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (report.best_layer, report.layers[report.best_layer][report.metric])


def test_a_probing_figure_with_description_lengths_shows_the_accuracy_and_the_compression(backend):
    """Issue 54: with --mdl the figure showed the compression alone; it shows the score above, the compression below."""
    report = last(backend.probe("upos", list(built_in_treebank(30).sentences), mdl=True))
    figure = report.figure(mdl=True, under="mask 0:1 (zero)")
    top, bottom = figure.axes
    assert list(top.lines[0].get_ydata()) == [layer[report.metric] for layer in report.layers]
    assert top.get_ylabel() == report.metric
    assert list(bottom.lines[0].get_ydata()) == list(report.compression())
    assert bottom.get_ylabel() == "compression (uniform / online bits)" and bottom.get_xlabel() == "layer (0 = embeddings)"
    assert {line.get_label() for line in bottom.lines} >= {"uniform code", "control task"}  # a word task has one
    assert title_of(figure) == f"probing upos: {report.metric} and description length"
    assert note_of(figure) == "mask 0:1 (zero)"
    assert len(report.figure().axes) == 1 and note_of(report.figure()) == ""  # without mdl: the score alone


def test_several_tasks_share_the_axes_each_in_its_colour_with_per_layer_baselines():
    curves = [
        ProbeCurve("upos", [0.5, 0.9, 0.8], 1, {"majority": 0.2, "random_init": [0.5, 0.55, 0.5], "control": [0.4, 0.6, 0.6]}),
        ProbeCurve("depth", [0.3, 0.4, 0.6], 2),
    ]
    figure = probe_curves(curves, "accuracy")
    lines = {line.get_label(): line for line in figure.axes[0].lines}
    assert list(lines["upos: random-init model"].get_ydata()) == [0.5, 0.55, 0.5]
    assert lines["upos: control task"].get_color() == lines["upos"].get_color() != lines["depth"].get_color()
    stars = [line for line in figure.axes[0].lines if line.get_marker() == "*"]
    assert [(s.get_xdata()[0], s.get_ydata()[0]) for s in stars] == [(1, 0.9), (2, 0.6)]


def test_a_pruning_curve_marks_the_prunable_point_and_the_drop_allowed(backend, importance):
    curve = last(backend.pruning_curve("preserve", SENTENCES, ranking=importance))
    figure = curve.figure()
    ax = figure.axes[0]
    assert list(ax.lines[0].get_xdata()) == [p.fraction for p in curve.points]
    assert list(ax.lines[0].get_ydata()) == [p.metric for p in curve.points]
    threshold = ax.lines[1]
    assert set(threshold.get_ydata()) == {curve.points[0].metric - curve.max_drop}
    best = curve.prunable()
    star = ax.lines[2]
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (best.fraction, best.metric)
    assert star.get_label() == f"prunable: {best.fraction:.0%}, {best.heads_pruned} heads"


# --- geometry ------------------------------------------------------------------------------------


def test_the_scatter_has_a_legend_of_distinct_colours_and_the_variance_on_its_axes(backend):
    result = last(backend.geometry(SENTENCES * 4))
    figure = result.figure(layer=1)
    ax = figure.axes[0]
    label = next(iter(result.labels))
    names = [text.get_text() for text in figure.legends[0].get_texts()]
    assert sorted(names) == sorted(set(result.labels[label]))
    assert ax.get_xlabel() == f"PC1 ({100 * result.explained[1, 0]:.1f}% variance)"
    points = np.concatenate([collection.get_offsets() for collection in ax.collections])
    assert sorted(map(tuple, points)) == sorted(map(tuple, result.projection[1].astype(float)))
    cka = result.figure("cka")
    assert np.array_equal(cka.axes[0].images[0].get_array(), result.cka)
    assert (cka.axes[0].images[0].norm.vmin, cka.axes[0].images[0].norm.vmax) == (0.0, 1.0)
    assert colour_bar_label(cka) == "linear CKA"
    dimension = result.figure("dimension")
    assert list(dimension.axes[0].lines[0].get_ydata()) == list(result.intrinsic_dimension)
    assert dimension.axes[0].get_ylabel() == "intrinsic dimension (TwoNN)"


def test_a_geometry_figure_says_the_mask_its_passes_ran_under(backend):
    """Issue 54: the geometry figure lacked the mask its JSON has: each kind says it now."""
    result = last(backend.geometry(SENTENCES * 4, mask=HeadMask.parse("2:2", LAYERS, HEADS), ablation="uniform"))
    assert result.as_json("fake")["mask"] == "2:2"
    for kind in ("scatter", "cka", "dimension"):
        assert note_of(result.figure(kind)).endswith("mask 2:2 (uniform)"), kind
    assert note_of(result.figure("cka", under=" · mask 2:2 (uniform) · upos erased @1")).endswith("upos erased @1")
    plain = last(backend.geometry(SENTENCES * 4))
    assert "mask" not in note_of(plain.figure("cka")) and note_of(plain.figure()) == ""


def test_past_twelve_labels_the_rarest_are_folded_into_other():
    rng = np.random.default_rng(0)
    labels = [f"L{i:02d}" for i in range(16) for _ in range(20 - i)]  # L00 most frequent … L15 least
    figure = pca_scatter(rng.normal(size=(len(labels), 2)), labels, explained=(0.3, 0.1))
    legend = figure.legends[0]
    names = [text.get_text() for text in legend.get_texts()]
    assert names == [f"L{i:02d}" for i in range(MAX_LABELS)] + ["other"]
    colours = [to_hex(handle.get_facecolor()[0]) for handle in legend.legend_handles]
    assert len(set(colours)) == len(colours)  # NOUN and PRON no longer share one
    other = next(c for c in figure.axes[0].collections if c.get_label() == "other")
    assert len(other.get_offsets()) == sum(20 - i for i in range(MAX_LABELS, 16))


# --- patching and attribution --------------------------------------------------------------------


def test_the_residual_stream_map_has_tokens_down_and_layers_across(backend):
    result = last(backend.patch("the cat sat", "the dog sat", sweep=("positions",)))
    figure = result.figure()
    ax = figure.axes[0]
    assert np.array_equal(ax.images[0].get_array(), result.positions.T)
    differing = set(result.differing)
    assert ticks(ax, "y") == [f"{t}*" if i in differing else t for i, t in enumerate(result.tokens)]
    assert ax.get_xlabel() == "hidden state (0 = embeddings)"
    with pytest.raises(InputError, match=r"this run did not patch heads \(it swept positions\)"):
        result.figure("heads")


def test_every_patching_figure_names_the_clean_and_the_corrupted_input(backend):
    for sweep in ("heads", "layers", "positions"):
        result = last(backend.patch("the cat sat", "the dog sat", sweep=(sweep,)))
        assert note_of(result.figure()).startswith('clean "the cat sat" · corrupted "the dog sat"\ndenoise'), sweep
    pair = last(backend.patch("the cat sat", "the dog sat", pair="it purred", corrupt_pair="it barked", sweep=("heads",)))
    assert note_of(pair.figure()).startswith('clean "the cat sat / it purred" · corrupted "the dog sat / it barked"')


def test_the_attribution_strip_shades_each_token_and_names_what_it_explains(backend):
    result = last(backend.attribute("the cat sat on the [mask]"))
    figure = result.figure()
    ax = figure.axes[0]
    words = [text.get_text() for text in ax.texts][::2]
    assert words == list(result.tokens)
    label = colour_bar_label(figure)
    assert label.startswith("integrated gradients of log p(") and "[MASK]" in label
    cells = [patch.get_facecolor() for patch in ax.patches]
    strongest = int(np.argmax(np.where(result.encoding.special, 0, result.scores)))
    weakest = int(np.argmin(np.where(result.encoding.special, 0, result.scores)))
    assert cells[strongest] != cells[weakest]


def test_a_strip_scales_to_the_real_tokens_and_clamps_the_special_ones():
    scores = np.array([5.0, 0.5, -1.0, 0.25, 5.0])
    figure = attribution_strip(["[CLS]", "a", "b", "c", "[SEP]"], scores, label="gradient × input", special=[1, 0, 0, 0, 1])
    bar = next(ax for ax in figure.axes if getattr(ax, "_colorbar", None) is not None)._colorbar
    assert (bar.norm.vmin, bar.norm.vmax) == (-1.0, 1.0) and bar.extend == "both"


# --- files ---------------------------------------------------------------------------------------


def test_svg_keeps_the_tokens_as_text_and_pdf_and_png_open(tmp_path, backend):
    figure = backend.forward("the cabinet keys", attentions=True).figure(layer=0, head=0)
    svg = save_figure(figure, tmp_path / "map.svg").read_text()
    for token in ("[CLS]", "cabinet", "keys", "[SEP]"):
        assert f">{token}</text>" in svg
    assert "attention weight α</text>" in svg
    assert (tmp_path / "map.pdf").exists() is False
    pdf = save_figure(figure, tmp_path / "map.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and b"/FontFile2" in pdf  # TrueType embedded: text, not outlines
    assert save_figure(figure, tmp_path / "map.PNG").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["map.PNG", "map.pdf", "map.svg"]


def test_a_figure_never_replaces_a_file_and_the_explorer_picks_a_free_name(tmp_path):
    """Issue 54: `--figure existing.svg` overwrote without a word while the explorer's `e` never overwrites. One rule
    (figures.save): a figure never replaces a file; the command line refuses the name, the explorer finds a free one."""
    from datetime import datetime

    from bertscope.ui.export import export_screen

    taken = tmp_path / "map.svg"
    taken.write_text("the user's own figure")
    for write in (check_figure_path, lambda path: save_figure(head_grid(np.eye(3), "metric"), path)):
        with pytest.raises(InputError) as refused:
            write(taken)
        assert str(refused.value) == f"cannot write a figure to {taken}: a file of that name exists; remove it or give another name"
        assert refused.value.setting == "figure"
    assert taken.read_text() == "the user's own figure" and [p.name for p in tmp_path.iterdir()] == ["map.svg"]
    (tmp_path / "bertscope-grid-20261121-113005.svg").write_text("an earlier export")
    figure_path, data_path = export_screen(
        tmp_path, "grid", figure=head_grid(np.eye(3), "metric"), data="{}", suffix=".json", when=datetime(2026, 11, 21, 11, 30, 5)
    )
    assert figure_path.name == "bertscope-grid-20261121-113005-2.svg" and data_path.name == "bertscope-grid-20261121-113005-2.json"
    assert (tmp_path / "bertscope-grid-20261121-113005.svg").read_text() == "an earlier export"


def test_a_file_made_while_the_figure_is_drawn_is_not_replaced(tmp_path, monkeypatch):
    figure = head_grid(np.eye(3), "metric")
    target = tmp_path / "grid.svg"
    real_savefig = figure.savefig

    def someone_else_writes_first(handle, **options):
        target.write_text("written meanwhile")
        real_savefig(handle, **options)

    monkeypatch.setattr(figure, "savefig", someone_else_writes_first)
    with pytest.raises(InputError, match="a file of that name exists"):
        save_figure(figure, target)
    assert target.read_text() == "written meanwhile" and [p.name for p in tmp_path.iterdir()] == ["grid.svg"]


def test_the_cli_refuses_an_existing_figure_before_torch_loads(tmp_path):
    taken = tmp_path / "map.svg"
    taken.write_text("mine")
    (status, imported), stderr = command_in_a_new_process(
        ["attention", "a b", "-l", "0", "-H", "0", "--figure", str(taken)], module="torch"
    )
    assert (status, imported) == ("2", "False")
    assert stderr.strip() == (
        f"bertscope: error: cannot write a figure to {taken}: a file of that name exists; remove it or give another name (--figure PATH)"
    )
    assert taken.read_text() == "mine"


def test_a_failing_save_leaves_no_file_and_an_old_one_as_it_was(tmp_path, monkeypatch):
    figure = head_grid(np.eye(3), "metric")
    target = tmp_path / "grid.pdf"

    def broken(handle, **options):
        handle.write(b"%PDF-1.4 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(figure, "savefig", broken)
    with pytest.raises(InputError, match="cannot write .*grid.pdf: No space left on device") as failed:
        save_figure(figure, target)
    assert failed.value.setting == "figure" and list(tmp_path.iterdir()) == []
    target.write_bytes(b"the old figure")
    with pytest.raises(InputError):
        save_figure(figure, target)
    assert target.read_bytes() == b"the old figure" and list(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize("name", ["figure.jpg", "figure", "figure.svg.txt"])
def test_a_suffix_that_is_not_svg_pdf_or_png_is_refused_in_one_line(tmp_path, name):
    with pytest.raises(InputError, match=r"give a file ending in \.svg, \.pdf or \.png") as refused:
        check_figure_path(tmp_path / name)
    assert refused.value.setting == "figure" and "\n" not in str(refused.value)


def test_the_cli_refuses_a_bad_figure_path_before_torch_loads(tmp_path):
    (status, imported), stderr = command_in_a_new_process(
        ["attention", "a b", "-l", "0", "-H", "0", "--figure", str(tmp_path / "map.jpg")], module="torch"
    )
    assert (status, imported) == ("2", "False")
    assert stderr.strip() == (
        f"bertscope: error: cannot write a figure to {tmp_path / 'map.jpg'}: suffix .jpg; "
        "give a file ending in .svg, .pdf or .png (--figure PATH)"
    )
    (status, _), stderr = command_in_a_new_process(
        ["prune", "-O", "preserve", "--fraction", "0.3", "--figure", str(tmp_path / "curve.pdf")], module="torch"
    )
    assert status == "2" and "--figure draws the pruning curve: use it with --curve" in stderr


def test_drawing_needs_no_torch_and_importing_bertscope_no_matplotlib():
    import subprocess
    import sys

    script = (
        "import sys, bertscope, bertscope.cli, bertscope.figures.save\n"
        "assert 'matplotlib' not in sys.modules, 'import bertscope pulled in matplotlib'\n"
        "from bertscope.figures import curves, grids, heatmaps, scatter, strips\n"
        "assert 'torch' not in sys.modules, 'a figure module pulled in torch'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


COMMANDS = {  # each command that prints a picture, on the tiny model, its figure asked for (probe and attribute: their fits take seconds)
    "patterns": ["patterns", "The keys to the cabinet are on the table."],
    "syntax": ["syntax", "--limit", "5"],
    "importance": ["importance", "The keys to the cabinet are on the table.", "-O", "preserve"],
    "prune": ["prune", "The keys to the cabinet are on the table.", "-O", "preserve", "--curve", "--step", "0.25"],
    "geometry": ["geometry", "--limit", "10"],
    "compare": ["compare", "--limit", "5", "--model-b", "TINY"],
    "patch": ["patch", "The keys to the cabinet are on the table.", "--corrupt", "The key to the cabinet is on the table."],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_writes_its_figure(command, tiny_bert_dir, tmp_path):
    from click.testing import CliRunner

    from bertscope.cli import main

    target = tmp_path / "figure.png"
    arguments = [word.replace("TINY", str(tiny_bert_dir)) for word in COMMANDS[command]]
    done = CliRunner().invoke(main, [*arguments, "-m", str(tiny_bert_dir), "--figure", str(target)])
    assert done.exit_code == 0, done.output
    assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.slow
def test_attention_writes_its_figure_on_the_bundled_model(tmp_path):
    import subprocess
    import sys

    target = tmp_path / "head.svg"
    done = subprocess.run(
        [sys.executable, "-m", "bertscope", "attention", "The keys are here.", "-l", "2", "-H", "3", "--figure", str(target), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == f"wrote {target}"
    svg = target.read_text()
    assert all(f">{token}</text>" in svg for token in ("[CLS]", "keys", "here", "[SEP]"))
    assert "layer 2 · head 3</text>" in svg
