"""The attention heatmap as a person sees it in a terminal: labels, shades, cursor, legend."""

import io
import time

import numpy as np
import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.text import Text

from bertscope.render import AttentionHeatmap
from bertscope.theming import Colormap

COLORMAP = Colormap(("#000000", "#ff8000", "#ffff00"), masked="#404040", cursor="#00ffff")
TOKENS = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]


def render(heatmap, width=100, color_system=None, **console_options):
    console = Console(
        file=io.StringIO(), width=width, color_system=color_system, force_terminal=True, **console_options
    )
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
    lines = plain_lines(AttentionHeatmap(np.eye(2), labels, labels, COLORMAP, label_width=8))
    assert any(line.startswith("antidis… ") for line in lines)
    assert column_labels(lines, 2, label_width=8) == ["antidis…", "b"]


def test_legend_shows_the_value_range():
    text = "\n".join(plain_lines(AttentionHeatmap(attention(), TOKENS, TOKENS, COLORMAP, vmax=0.5)))
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
    heatmap = AttentionHeatmap(attention(80), labels, labels, COLORMAP, split_columns=False)
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
