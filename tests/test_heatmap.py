"""The attention heatmap as a person sees it in a terminal: labels, shades, cursor, legend."""

import io
import time

import numpy as np
import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.text import Text

from bertscope.base.theming import Colormap
from bertscope.render import AttentionHeatmap
from bertscope.render.heatmap import MAX_LABEL_WIDTH, Cells, Labels, Scale

COLORMAP = Colormap(("#000000", "#ff8000", "#ffff00"), masked="#404040", cursor="#00ffff")
TOKENS = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]


def render(heatmap, width=100, color_system=None, **console_options):
    console = Console(file=io.StringIO(), width=width, color_system=color_system, force_terminal=True, **console_options)
    console.print(heatmap)
    return console.file.getvalue()


def plain_lines(heatmap, width=100, color_system=None):
    console = Console(file=io.StringIO(), width=width, color_system=color_system, record=True)
    console.print(heatmap)
    return console.export_text(styles=False).splitlines()


def column_labels(lines, count, label_width=12):
    """Read the vertical labels above the grid back into words, left to right."""
    header = []
    for line in lines:
        if line[:label_width].strip():  # the first row label: the grid starts
            break
        header.append(line[label_width + 1 :])
    return ["".join(line[2 * c] for line in header if len(line) > 2 * c).strip() for c in range(count)]


def attention(n=8, seed=0):
    rng = np.random.default_rng(seed)
    weights = rng.random((n, n)) ** 3
    return weights / weights.sum(axis=1, keepdims=True)


def test_every_token_label_is_shown_on_both_axes():
    lines = plain_lines(AttentionHeatmap(attention(), TOKENS, TOKENS, COLORMAP))
    row_labels = [line[:12].strip() for line in lines if line[:12].strip()]
    assert row_labels == TOKENS
    assert column_labels(lines, len(TOKENS)) == TOKENS


def test_long_labels_are_cut_with_an_ellipsis():
    labels = ["antidisestablishmentarianism", "b"]
    lines = plain_lines(AttentionHeatmap(np.eye(2), labels, labels, COLORMAP, labels=Labels(width=8)))
    assert any(line.startswith("antidis… ") for line in lines)
    assert column_labels(lines, 2, label_width=8) == ["antidis…", "b"]


def test_legend_shows_the_value_range():
    text = "\n".join(plain_lines(AttentionHeatmap(attention(), TOKENS, TOKENS, COLORMAP, scale=Scale(vmax=0.5))))
    assert "0.00" in text and "0.50" in text
    no_legend = "\n".join(plain_lines(AttentionHeatmap(attention(), TOKENS, TOKENS, COLORMAP, legend=False)))
    assert "0.00" not in no_legend


def test_wide_grid_wraps_into_column_blocks_that_fit_the_width():
    labels = [f"tok{i}" for i in range(80)]
    heatmap = AttentionHeatmap(attention(80), labels, labels, COLORMAP)
    lines = plain_lines(heatmap, width=60)
    assert max(cell_len(line) for line in lines) <= 60
    blocks = [line.strip() for line in lines if line.strip().startswith("columns ")]
    assert blocks[0] == "columns 0–22 of 80"  # (60 - 13) // 2 columns a block
    assert blocks[-1].endswith("–79 of 80")
    # every block repeats all row labels
    assert sum(line.startswith("        tok0 ") for line in lines) == len(blocks)
    # and the colour output fits too
    coloured = render(heatmap, width=60, color_system="truecolor")
    assert max(cell_len(line) for line in Text.from_ansi(coloured).plain.splitlines()) <= 60


def test_unsplit_grid_keeps_full_width_for_a_scrolling_container():
    labels = [f"tok{i}" for i in range(80)]
    heatmap = AttentionHeatmap(attention(80), labels, labels, COLORMAP, cells=Cells(split=False))
    console = Console(file=io.StringIO(), width=60, color_system=None)
    assert heatmap.__rich_measure__(console, console.options) == Measurement(12 + 1 + 2 * 80, 12 + 1 + 2 * 80)
    lines = console.render_lines(heatmap, console.options.update(width=200), pad=False)
    text = ["".join(segment.text for segment in line) for line in lines]
    assert not any("columns" in line for line in text)
    assert max(cell_len(line) for line in text) == 12 + 1 + 2 * 80


@pytest.mark.parametrize("color_system", [None, "standard"])
def test_without_enough_colours_shades_show_the_weights(color_system):
    weights = np.full((8, 8), 0.01)
    np.fill_diagonal(weights, 1.0)
    lines = plain_lines(AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP), color_system=color_system)
    grid = [line[13:] for line in lines if line[:12].strip() in TOKENS]
    for row, line in enumerate(grid):
        assert line[2 * row : 2 * row + 2] == "██"
        assert line.replace("██", "").strip() == ""


def test_no_color_environment_gets_shades_not_invisible_colours():
    weights = np.eye(8)
    output = render(AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP), color_system="truecolor", no_color=True)
    assert "██" in output


def test_truecolor_paints_cell_backgrounds_from_the_colour_map():
    weights = np.eye(8)
    output = render(AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP), color_system="truecolor")
    assert "48;2;255;255;0" in output  # brightest stop for the diagonal
    assert "48;2;0;0;0" in output  # darkest stop elsewhere
    assert "█" not in output


def test_cursor_cell_and_its_labels_are_marked():
    lines = plain_lines(AttentionHeatmap(attention(), TOKENS, TOKENS, COLORMAP, cursor=(2, 6)))
    cat_line = next(line for line in lines if line.startswith("         cat"))
    assert cat_line[12] == "▸"
    assert cat_line[13 + 12 : 13 + 14] == "[]"
    assert sum("[]" in line for line in lines) == 1
    assert any("2:cat → 6:mat" in line for line in lines)

    coloured = render(AttentionHeatmap(attention(), TOKENS, TOKENS, COLORMAP, cursor=(2, 6)), color_system="truecolor")
    assert "48;2;0;255;255" in coloured  # the cursor colour


def test_masked_head_says_so_and_is_drawn_in_the_masked_colour():
    weights = np.eye(8)
    heatmap = AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, title="layer 0 · head 3", masked=True)
    assert "masked" in plain_lines(heatmap)[0]
    coloured = render(heatmap, color_system="truecolor")
    assert "48;2;255;255;0" not in coloured  # the bright stop is toned down to the masked colour


def test_nan_weights_are_drawn_as_missing():
    weights = np.eye(8)
    weights[1, 2] = np.nan
    lines = plain_lines(AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP))
    assert "··" in next(line for line in lines if line.startswith("         the"))


@pytest.mark.parametrize(
    "weights, rows, cols, complaint",
    [
        (np.zeros(8), TOKENS, TOKENS, "2-D"),
        (np.zeros((8, 8)), TOKENS[:7], TOKENS, "7 row labels"),
        (np.zeros((8, 8)), TOKENS, TOKENS + ["x"], "9 column labels"),
    ],
)
def test_bad_input_is_a_clear_value_error(weights, rows, cols, complaint):
    with pytest.raises(ValueError, match=complaint):
        AttentionHeatmap(weights, rows, cols, COLORMAP)


def test_cursor_outside_the_grid_is_rejected():
    with pytest.raises(ValueError, match="outside"):
        AttentionHeatmap(np.eye(8), TOKENS, TOKENS, COLORMAP, cursor=(8, 0))


@pytest.mark.parametrize("color_system", ["truecolor", None])
def test_512_tokens_render_without_pathological_slowness(color_system):
    """About 0.3 s here; the bound only catches a per-cell blow-up (timings live in benchmarks/)."""
    labels = [f"tok{i}" for i in range(512)]
    weights = np.random.default_rng(0).random((512, 512))
    start = time.perf_counter()
    render(AttentionHeatmap(weights, labels, labels, COLORMAP, cursor=(5, 7)), width=200, color_system=color_system)
    assert time.perf_counter() - start < 5.0


# colour scales, one-cell columns, dense mode and the header: what the explorer and `attention --scale` show


def legend_line(heatmap, width=100, color_system=None):
    return plain_lines(heatmap, width=width, color_system=color_system)[-1]


def grid_rows(heatmap, color_system=None, width=100):
    """The grid's lines without their labels (the lines below the column labels and above the legend)."""
    console = Console(file=io.StringIO(), width=width, color_system=color_system)
    layout = heatmap.layout(heatmap.uses_colour(console), heatmap.cell_width)
    return ["".join(s.text for s in layout.grid(i)) for i in range(layout.lines)]


def test_max_scale_stretches_the_colours_to_the_largest_weight_and_says_so():
    weights = np.full((8, 8), 0.02)
    np.fill_diagonal(weights, 0.3)  # a typical head: nothing near 1
    fixed = AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, scale=Scale(name="fixed"), cells=Cells(glyphs=True, width=1))
    stretched = AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, scale=Scale(name="max"), cells=Cells(glyphs=True, width=1))
    assert legend_line(fixed).split() == ["fixed", "0.00", "░▒▓█", "1.00"]
    assert legend_line(stretched).split() == ["max", "0.00", "░▒▓█", "0.30"]
    assert all(line[row] == "░" for row, line in enumerate(grid_rows(fixed)))  # 0.3 of 1: the second glyph
    assert all(line[row] == "█" for row, line in enumerate(grid_rows(stretched)))  # the top of the scale


def test_row_scale_gives_every_query_row_its_own_top():
    weights = np.full((8, 8), 0.01)
    weights[np.arange(8), np.arange(8)] = np.linspace(0.05, 0.9, 8)  # rows that peak low and high
    rows = grid_rows(AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, scale=Scale(name="row"), cells=Cells(glyphs=True, width=1)))
    assert all(line[row] == "█" for row, line in enumerate(rows))
    by_max = grid_rows(AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, scale=Scale(name="max"), cells=Cells(glyphs=True, width=1)))
    assert by_max[0][0] == " " and by_max[7][7] == "█"  # under one scale the weak rows vanish
    legend = legend_line(
        AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, cursor=(2, 0), scale=Scale(name="row"), cells=Cells(glyphs=True))
    )
    assert legend.split()[:2] == ["row", "0"] and legend.endswith(f"row max {weights[2].max():.2f}")


def test_log_scale_shows_small_weights_that_max_leaves_black():
    weights = np.full((8, 8), 1e-5)
    weights[:, 0] = 0.5
    weights[3, 4] = 0.002  # 2.4 decades under the top
    log = AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, scale=Scale(name="log"), cells=Cells(glyphs=True, width=1))
    assert grid_rows(log)[3][4] != " " and grid_rows(log)[3][5] == " "
    assert (
        grid_rows(AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, scale=Scale(name="max"), cells=Cells(glyphs=True, width=1)))[3][4]
        == " "
    )
    assert legend_line(log).split() == ["log", "0.0005", "░▒▓█", "0.50"]  # three decades below 0.5


def test_unknown_scale_is_a_clear_value_error():
    with pytest.raises(ValueError, match="unknown colour scale 'linear'; choose one of max, row, fixed, log"):
        AttentionHeatmap(np.eye(8), TOKENS, TOKENS, COLORMAP, scale=Scale(name="linear"))


def test_one_cell_per_token_halves_the_width():
    two = plain_lines(AttentionHeatmap(attention(), TOKENS, TOKENS, COLORMAP, cells=Cells(width=2), labels=Labels(width=5)))
    one = plain_lines(AttentionHeatmap(attention(), TOKENS, TOKENS, COLORMAP, cells=Cells(width=1), labels=Labels(width=5)))
    grid_two = [line for line in two if line[:5].strip() in TOKENS]
    grid_one = [line for line in one if line[:5].strip() in TOKENS]
    assert len(grid_one) == len(grid_two) == 8
    assert {cell_len(line) for line in grid_one} == {6 + 8} and {cell_len(line) for line in grid_two} == {6 + 16}


def test_automatic_cell_width_uses_two_cells_only_where_the_grid_fits():
    heatmap = AttentionHeatmap(attention(8), TOKENS, TOKENS, COLORMAP, cells=Cells(width=None), labels=Labels(width=5))
    assert max(cell_len(line) for line in plain_lines(heatmap, width=60)) == 6 + 16
    labels = [f"t{i}" for i in range(40)]
    wide = AttentionHeatmap(attention(40), labels, labels, COLORMAP, cells=Cells(width=None), labels=Labels(width=3))
    lines = plain_lines(wide, width=60)
    assert not any("columns" in line for line in lines)  # 40 one-cell columns fit in 60: no blocks
    assert max(cell_len(line) for line in lines) == 4 + 40


def test_dense_mode_draws_two_query_rows_a_line_with_half_blocks():
    weights = np.eye(8)
    plain = AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, cells=Cells(width=1, glyphs=False))
    dense = AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, cells=Cells(width=1, glyphs=False, dense=True))
    assert len(grid_rows(dense, "truecolor")) == len(grid_rows(plain, "truecolor")) // 2 == 4
    assert all(set(line) == {"▀"} for line in grid_rows(dense, "truecolor"))
    output = render(dense, color_system="truecolor")
    assert "38;2;255;255;0;48;2;0;0;0m" in output  # (0,0): the upper half bright on a dark lower half
    assert "38;2;0;0;0;48;2;255;255;0m" in output  # (1,1): dark upper half, bright lower half
    lines = plain_lines(dense, color_system="truecolor")
    assert any(line.split()[:2] == ["[CLS]", "the"] for line in lines)  # both rows' labels, the upper first


def test_dense_map_with_an_odd_number_of_rows_keeps_the_last_row():
    labels = TOKENS[:7]
    dense = AttentionHeatmap(np.eye(7), labels, labels, COLORMAP, cells=Cells(width=1, glyphs=False, dense=True))
    rows = grid_rows(dense, "truecolor")
    assert len(rows) == 4 and len(rows[-1]) == 7
    assert any(line.split() == ["mat", "▀▀▀▀▀▀▀"] for line in plain_lines(dense, color_system="truecolor"))


@pytest.mark.parametrize("color_system", [None, "standard"])
def test_dense_mode_falls_back_to_one_row_a_line_with_glyphs(color_system):
    dense = AttentionHeatmap(np.eye(8), TOKENS, TOKENS, COLORMAP, cells=Cells(width=1, dense=True))
    rows = grid_rows(dense, color_system)
    assert len(rows) == 8
    assert all(line[row] == "█" and "▀" not in line for row, line in enumerate(rows))


def test_glyph_cursor_in_one_cell_columns_is_a_single_mark():
    lines = plain_lines(AttentionHeatmap(np.eye(8), TOKENS, TOKENS, COLORMAP, cursor=(2, 6), cells=Cells(width=1, glyphs=True)))
    cat_line = next(line for line in lines if line.lstrip().startswith("cat▸"))
    assert cat_line[13:] == "  █   ◆ "


def test_label_gutter_is_as_wide_as_the_longest_label_and_cuts_only_beyond_the_cap():
    labels = ["[CLS]", "extraordinarily", "a", "supercalifragilisticexpialidocious"]
    heatmap = AttentionHeatmap(np.eye(4), labels, labels, COLORMAP, labels=Labels(width=None, height=0))
    assert heatmap.label_width == MAX_LABEL_WIDTH
    gutter = [line[:MAX_LABEL_WIDTH] for line in plain_lines(heatmap)[:4]]
    assert gutter[1] == "extraordinarily".rjust(MAX_LABEL_WIDTH)  # not cut at 10 characters
    assert gutter[3] == "supercalifragilisti…"
    short = AttentionHeatmap(np.eye(4), ["a", "bb", "ccc", "dd"], ["a", "bb", "ccc", "dd"], COLORMAP, labels=Labels(width=None))
    assert short.label_width == 3


def test_header_line_names_the_cursor_tokens_and_weight():
    weights = attention()
    layout = AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP, cursor=(3, 6)).layout(use_colour=True)
    (header,) = layout.header_lines()
    assert "".join(s.text for s in header) == f"▸ 3:sat → 6:mat  {weights[3, 6]:.3f}"
    assert AttentionHeatmap(weights, TOKENS, TOKENS, COLORMAP).layout(use_colour=True).header_lines() == []


def test_short_column_labels_where_only_a_few_lines_fit():
    lines = plain_lines(AttentionHeatmap(np.eye(8), TOKENS, TOKENS, COLORMAP, cells=Cells(width=1), labels=Labels(width=5, height=2)))
    assert lines[0][6:] == "[tcsotm["  # first characters of the eight tokens
    assert lines[1][6:] == "Chaanha" + "S"
    assert lines[2].split()[0] == "[CLS]"  # the grid starts after two label lines
    none = plain_lines(AttentionHeatmap(np.eye(8), TOKENS, TOKENS, COLORMAP, cells=Cells(width=1), labels=Labels(width=5, height=0)))
    assert none[0].split()[0] == "[CLS]"
