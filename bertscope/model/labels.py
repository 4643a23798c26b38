"""Tokens as a person reads them: each piece's text, word pieces marked the WordPiece way (no torch).

Tokenizers mark where words begin and end in their own ways. WordPiece (BERT, DistilBERT,
ELECTRA, MPNet) writes a piece that continues a word with a leading `##` and leaves a word's
first piece bare: `post ##man`. Byte-level BPE (RoBERTa, ModernBERT) marks instead a piece
that follows a space, with `Ġ`, and spells each byte as a character of its own, so that
`é` shows as `Ã©`; SentencePiece (XLM-R, ALBERT, DeBERTa-v3, CamemBERT) marks a word's first
piece with `▁`. `token_labels` writes every family as WordPiece does: a word's first piece
bare, the pieces after it `##`, bytes decoded back to text (a byte that is only part of a
character as `\\xc3`), and a word-start mark with nothing after it as `▁`. WordPiece tokens,
and any a tokenizer of none of these kinds made, are left as they are.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

BYTE_LEVEL_SPACE = "Ġ"  # byte-level BPE's spelling of a space, the start of a word
SENTENCEPIECE_SPACE = "▁"  # SentencePiece's word-start mark
CONTINUATION = "##"  # WordPiece's mark of a piece that continues a word
_SPECIAL = re.compile(r"^(\[[A-Za-z_]+\]|<[/A-Za-z_|]+>)$")  # [CLS], [SEP], <s>, </s>, <pad>, <mask>...


@functools.cache
def _byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's character for each byte (GPT-2's `bytes_to_unicode`), the other way round: printable
    Latin-1 characters stand for themselves, the other 68 bytes (controls, the space) for U+0100 onwards."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    alphabet = {chr(byte): byte for byte in printable}
    alphabet.update({chr(256 + index): byte for index, byte in enumerate(others)})
    return alphabet


def _scheme(tokens: Sequence[str], special: Sequence[bool]) -> str | None:
    """'byte-level', 'sentencepiece', or None (WordPiece, or a tokenizer that marks nothing we know)."""
    pieces = [token for token, is_special in zip(tokens, special) if not is_special]
    if any(token.startswith(SENTENCEPIECE_SPACE) and token.strip(SENTENCEPIECE_SPACE) for token in pieces):
        return "sentencepiece"  # a mark before a word (a mark alone is also what the labels show for one)
    # a character only byte-level BPE writes (a space, a newline, a control byte), in a token spelt in its alphabet
    alphabet = _byte_alphabet()
    if any(any(ord(char) >= 256 for char in token) and all(char in alphabet for char in token) for token in pieces):
        return "byte-level"
    return None


def _decoded(piece: str) -> str:
    """A byte-level piece as text; bytes that are only part of a character written as `\\xNN`."""
    alphabet = _byte_alphabet()
    if not all(char in alphabet for char in piece):
        return piece  # an added token, spelt as itself
    return bytes(alphabet[char] for char in piece).decode("utf-8", errors="backslashreplace")


def token_labels(tokens: Sequence[str], special: Iterable[object] | None = None) -> tuple[str, ...]:
    """Each token as it reads, for labels: WordPiece's marks for every tokenizer (see the module's text).

    `special`: which tokens are special ([CLS], <s>...), as an Encoding holds them (an array of flags); None:
    told by their look.
    """
    flags = [bool(flag) for flag in special] if special is not None else [bool(_SPECIAL.match(token)) for token in tokens]
    scheme = _scheme(tokens, flags)
    if scheme is None:
        return tuple(tokens)
    start = BYTE_LEVEL_SPACE if scheme == "byte-level" else SENTENCEPIECE_SPACE
    labels: list[str] = []
    before = ""  # the text of the piece before ("" after a special token)
    for token, is_special in zip(tokens, flags):
        if is_special:
            labels.append(token)
            before = ""
            continue
        starts = token.startswith(start)
        text = token[len(start) :] if starts else token
        if scheme == "byte-level":
            text = _decoded(text)
        if not text.strip():
            labels.append(SENTENCEPIECE_SPACE)  # a word-start mark alone, or a run of spaces
        elif not starts and before[-1:].isalnum() and text[:1].isalnum():
            labels.append(CONTINUATION + text)  # letters on letters; punctuation is a word of its own, as in WordPiece
        else:
            labels.append(text)
        before = text if text.strip() else ""
    return tuple(labels)
