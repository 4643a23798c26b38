"""How each attention pattern class (Kovaleva et al. 2019) is marked, alike in the terminal and in a figure.

Plain data, without matplotlib, so the render layer's letter grid and the figures' class grid
read one table: a class's letter, its Rich style in the terminal and its fill in a figure
(Okabe & Ito's colour-blind-safe palette for the structured classes; heterogeneous, no
structure, in grey; off, a head switched off, in white).
"""

from __future__ import annotations

from typing import NamedTuple


class PatternMark(NamedTuple):
    letter: str
    style: str  # Rich
    colour: str  # a figure's fill


PATTERN_MARKS = {
    "vertical": PatternMark("V", "bold magenta", "#E69F00"),
    "diagonal": PatternMark("D", "bold cyan", "#56B4E9"),
    "vertical+diagonal": PatternMark("VD", "bold blue", "#009E73"),
    "block": PatternMark("B", "bold green", "#CC79A7"),
    "heterogeneous": PatternMark("H", "dim", "#DDDDDD"),
    "off": PatternMark("×", "bold red", "#FFFFFF"),
}
PATTERN_LETTERS = {name: mark.letter for name, mark in PATTERN_MARKS.items()}
