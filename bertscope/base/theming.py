"""Theme files: the app's colours and the heatmap's colour map, read from TOML.

A theme is a small TOML file so that users can copy a built-in one and change it
without writing Python. Built-in themes ship in ``themes/``; files in the user's theme
directory override built-ins of the same name.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.color import Color

DEFAULT_THEME = "dark"

#: The app colours, named as in ``textual.theme.Theme`` so the UI can pass them through.
APP_COLOURS = (
    "primary",
    "secondary",
    "accent",
    "background",
    "surface",
    "panel",
    "foreground",
    "warning",
    "error",
    "success",
)

_HEX = re.compile(r"#[0-9a-fA-F]{6}")


class ThemeError(ValueError):
    """A theme that cannot be used; the message is one line naming the file and the fault."""


def _hex_to_rgb(value: object, what: str) -> tuple[int, int, int]:
    if not isinstance(value, str) or not _HEX.fullmatch(value):
        raise ValueError(f'{what} must be a hex colour like "#1e90ff", not {value!r}')
    return int(value[1:3], 16), int(value[3:5], 16), int(value[5:7], 16)


@dataclass(frozen=True)
class Colormap:
    """A sequential colour map for attention weights: linear between evenly spaced stops.

    ``masked`` colours heads that are switched off (and NaN weights); ``cursor`` marks the
    selected cell, so it should stand out against every stop.
    """

    stops: tuple[str, ...]
    masked: str
    cursor: str
    _rgb_stops: tuple[tuple[int, int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.stops) < 2:
            raise ValueError(f"heatmap.stops needs at least 2 colours, got {len(self.stops)}")
        rgb = tuple(_hex_to_rgb(s, f"heatmap.stops[{i}]") for i, s in enumerate(self.stops))
        _hex_to_rgb(self.masked, "heatmap.masked")
        _hex_to_rgb(self.cursor, "heatmap.cursor")
        object.__setattr__(self, "stops", tuple(self.stops))
        object.__setattr__(self, "_rgb_stops", rgb)

    def rgb(self, value: float) -> tuple[int, int, int]:
        """The colour of ``value`` in [0, 1] (clamped); NaN gets the masked colour."""
        if math.isnan(value):
            return _hex_to_rgb(self.masked, "heatmap.masked")
        position = min(max(value, 0.0), 1.0) * (len(self._rgb_stops) - 1)
        low = min(int(position), len(self._rgb_stops) - 2)
        t = position - low
        a, b = self._rgb_stops[low], self._rgb_stops[low + 1]
        return tuple(round(x + (y - x) * t) for x, y in zip(a, b))  # type: ignore[return-value]

    def color(self, value: float) -> Color:
        """``rgb(value)`` as a Rich colour (Rich downgrades it for 256-colour terminals)."""
        return Color.from_rgb(*self.rgb(value))


@dataclass(frozen=True)
class ThemeSpec:
    """One theme: the app colours (as hex strings) and the heatmap colour map."""

    name: str
    dark: bool
    primary: str
    secondary: str
    accent: str
    background: str
    surface: str
    panel: str
    foreground: str
    warning: str
    error: str
    success: str
    heatmap: Colormap

    def app_colours(self) -> dict[str, str]:
        """The colours keyed as ``textual.theme.Theme`` expects them."""
        return {key: getattr(self, key) for key in APP_COLOURS}


def builtin_themes_dir() -> Path:
    """The shipped themes: inside the package in a wheel, at the top of a source checkout."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "themes"
    return packaged if packaged.is_dir() else package.parent / "themes"


def user_themes_dir() -> Path:
    """Where users put their own themes (``$BERTSCOPE_THEMES_DIR`` or the XDG config dir)."""
    if override := os.environ.get("BERTSCOPE_THEMES_DIR"):
        return Path(override).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "bertscope" / "themes"


def available_themes() -> dict[str, Path]:
    """Theme name (the file stem) → file, with user files overriding built-ins."""
    themes: dict[str, Path] = {}
    for folder in (builtin_themes_dir(), user_themes_dir()):
        if folder.is_dir():
            themes.update({path.stem: path for path in sorted(folder.glob("*.toml"))})
    return dict(sorted(themes.items()))


def load_theme(name_or_path: str) -> ThemeSpec:
    """Load a theme by name (see ``available_themes``) or from a ``.toml`` file path."""
    looks_like_path = name_or_path.endswith(".toml") or os.sep in name_or_path or "/" in name_or_path
    if looks_like_path:
        return _read_theme_file(Path(name_or_path).expanduser())
    themes = available_themes()
    if name_or_path not in themes:
        names = ", ".join(themes) or "none found"
        raise ThemeError(f"unknown theme {name_or_path!r}; available themes: {names}")
    return _read_theme_file(themes[name_or_path])


def _read_theme_file(path: Path) -> ThemeSpec:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ThemeError(f"{path}: theme file not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ThemeError(f"{path}: cannot read theme file ({error})") from None
    except tomllib.TOMLDecodeError as error:
        raise ThemeError(f"{path}: not valid TOML ({error})") from None
    try:
        return _theme_from_dict(path.stem, data)
    except ValueError as error:
        raise ThemeError(f"{path}: {error}") from None


def _theme_from_dict(name: str, data: dict[str, Any]) -> ThemeSpec:
    _check_keys(data, {"dark", "colors", "heatmap"}, "")
    if not isinstance(data["dark"], bool):
        raise ValueError(f"dark must be true or false, not {data['dark']!r}")
    colors = _table(data, "colors")
    _check_keys(colors, set(APP_COLOURS), "colors.")
    for key in APP_COLOURS:
        _hex_to_rgb(colors[key], f"colors.{key}")
    heatmap = _table(data, "heatmap")
    _check_keys(heatmap, {"stops", "masked", "cursor"}, "heatmap.")
    if not isinstance(heatmap["stops"], list):
        raise ValueError("heatmap.stops must be a list of hex colours")
    colormap = Colormap(tuple(heatmap["stops"]), heatmap["masked"], heatmap["cursor"])
    return ThemeSpec(name=name, dark=data["dark"], heatmap=colormap, **colors)


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    table = data[key]
    if not isinstance(table, dict):
        raise ValueError(f"[{key}] must be a table")
    return table


def _check_keys(table: dict[str, Any], expected: set[str], prefix: str) -> None:
    """Name missing and misspelt keys, so a typo does not silently fall back to a default."""
    if missing := sorted(expected - table.keys()):
        raise ValueError(f"missing key {prefix}{missing[0]}")
    if unknown := sorted(table.keys() - expected):
        raise ValueError(f"unknown key {prefix}{unknown[0]}")
