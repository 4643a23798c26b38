"""Theme files: built-ins load and look right, users can override them, bad files say why."""

import math
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bertscope.base.theming import (
    APP_COLOURS,
    DEFAULT_THEME,
    Colormap,
    ThemeError,
    ThemeSpec,
    available_themes,
    builtin_themes_dir,
    load_theme,
    user_themes_dir,
)

BUILTIN = ("dark", "light", "colorblind")


@pytest.fixture(autouse=True)
def empty_user_dir(tmp_path, monkeypatch):
    """Keep the developer's own themes out of the tests."""
    folder = tmp_path / "user-themes"
    monkeypatch.setenv("BERTSCOPE_THEMES_DIR", str(folder))
    return folder


def luminance(rgb):
    """WCAG relative luminance, 0 (black) to 1 (white)."""

    def linear(channel):
        c = channel / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def hex_rgb(colour):
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def write_theme(path, **changes):
    """A copy of the dark theme with some lines replaced."""
    text = (builtin_themes_dir() / "dark.toml").read_text()
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new)
    path.write_text(text)
    return path


# Built-in themes


def test_builtin_themes_are_available_and_load():
    themes = available_themes()
    assert DEFAULT_THEME in themes
    for name in BUILTIN:
        spec = load_theme(name)
        assert isinstance(spec, ThemeSpec)
        assert spec.name == name
    assert load_theme("light").dark is False
    assert load_theme("dark").dark is True


@pytest.mark.parametrize("name", BUILTIN)
def test_heatmap_rises_from_the_background(name):
    """Low attention fades into the background; contrast grows steadily with the weight."""
    spec = load_theme(name)
    background = luminance(hex_rgb(spec.background))
    contrast = [abs(luminance(spec.heatmap.rgb(v)) - background) for v in np.linspace(0, 1, 101)]
    assert all(b >= a - 1e-9 for a, b in zip(contrast, contrast[1:])), "not monotone"
    low = np.array(spec.heatmap.rgb(0.0))
    assert np.abs(low - hex_rgb(spec.background)).max() <= 32, "lowest weight stands out from the background"
    assert contrast[-1] > 0.5, "highest weight is not bright against the background"


@pytest.mark.parametrize("name", BUILTIN)
def test_cursor_and_masked_colours_differ_from_the_ramp_ends(name):
    colormap = load_theme(name).heatmap
    for special in (colormap.cursor, colormap.masked):
        for end in (0.0, 1.0):
            assert np.abs(np.subtract(hex_rgb(special), colormap.rgb(end))).max() > 40


def test_app_colours_make_a_textual_theme():
    theme_module = pytest.importorskip("textual.theme")
    spec = load_theme("colorblind")
    theme = theme_module.Theme(name=spec.name, dark=spec.dark, **spec.app_colours())
    assert theme.primary == spec.primary
    assert set(spec.app_colours()) == set(APP_COLOURS)


def test_theme_modules_do_not_import_textual_or_torch():
    code = "import sys, bertscope.base.theming, bertscope.render; print(sorted({'textual', 'torch'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# Colormap


def test_colormap_interpolates_clamps_and_masks_nan():
    colormap = Colormap(("#000000", "#ff0000", "#ffffff"), masked="#123456", cursor="#00ffff")
    assert colormap.rgb(0.0) == (0, 0, 0)
    assert colormap.rgb(0.25) == (128, 0, 0)
    assert colormap.rgb(0.5) == (255, 0, 0)
    assert colormap.rgb(1.0) == (255, 255, 255)
    assert colormap.rgb(-3.0) == (0, 0, 0)
    assert colormap.rgb(7.0) == (255, 255, 255)
    assert colormap.rgb(math.nan) == (0x12, 0x34, 0x56)
    assert colormap.color(0.5).get_truecolor() == (255, 0, 0)


def test_colormap_needs_two_valid_stops():
    with pytest.raises(ValueError, match="at least 2"):
        Colormap(("#000000",), masked="#111111", cursor="#222222")
    with pytest.raises(ValueError, match="hex colour"):
        Colormap(("#000000", "red"), masked="#111111", cursor="#222222")


# User themes


def test_user_theme_overrides_builtin_of_the_same_name(empty_user_dir):
    empty_user_dir.mkdir()
    write_theme(empty_user_dir / "dark.toml", **{'primary = "#f37819"': 'primary = "#123abc"'})
    shutil.copy(builtin_themes_dir() / "light.toml", empty_user_dir / "paper.toml")

    themes = available_themes()
    assert themes["dark"] == empty_user_dir / "dark.toml"
    assert themes["light"] == builtin_themes_dir() / "light.toml"
    assert load_theme("dark").primary == "#123abc"
    assert load_theme("paper").name == "paper"


def test_theme_loads_from_a_path(tmp_path):
    path = write_theme(tmp_path / "mine.toml")
    assert load_theme(str(path)).name == "mine"


def test_user_dir_follows_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.delenv("BERTSCOPE_THEMES_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert user_themes_dir() == tmp_path / "xdg" / "bertscope" / "themes"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_themes_dir() == tmp_path / "home" / ".config" / "bertscope" / "themes"


# Bad themes


@pytest.mark.parametrize(
    "changes, complaint",
    [
        ({"dark = true": "dark = "}, "not valid TOML"),
        ({'error = "#ef5f6b"\n': ""}, "missing key colors.error"),
        ({'primary = "#f37819"': 'primay = "#f37819"'}, "colors.primary"),
        ({'accent = "#fca50a"': 'accent = "orange"'}, "colors.accent must be a hex colour"),
        ({'cursor = "#22d3ee"': 'cursor = "#22d3e"'}, "heatmap.cursor"),
        ({"stops = [": 'stops = ["#000000"]  # ['}, "at least 2"),
        ({"dark = true": 'dark = "yes"'}, "dark must be true or false"),
    ],
)
def test_broken_theme_names_the_file_and_the_fault(tmp_path, changes, complaint):
    path = write_theme(tmp_path / "broken.toml", **changes)
    with pytest.raises(ThemeError) as error:
        load_theme(str(path))
    message = str(error.value)
    assert str(path) in message
    assert complaint in message
    assert "\n" not in message


def test_unknown_theme_lists_the_available_ones():
    with pytest.raises(ThemeError) as error:
        load_theme("neon")
    assert "neon" in str(error.value)
    for name in BUILTIN:
        assert name in str(error.value)


def test_missing_theme_file(tmp_path):
    with pytest.raises(ThemeError, match="not found"):
        load_theme(str(tmp_path / "nowhere.toml"))


def test_theme_error_is_a_value_error():
    assert issubclass(ThemeError, ValueError)
