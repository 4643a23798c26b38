"""What the explorer remembers between runs with `--session FILE`.

A session file is small JSON a person can read and edit. A file that is not one (a text
file named by mistake, someone else's JSON, an empty file) is never touched: the command
line refuses it before the explorer starts (`check_session_file`). A session the explorer wrote that has
since been damaged (an edit gone wrong, a newer version) never stops the explorer and is
never lost: it is moved aside and the explorer starts fresh.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertscope.base.errors import InputError, MaskSpecError
from bertscope.data.files import atomic_write
from bertscope.model.masks import ABLATIONS, Ablation, HeadMask

if TYPE_CHECKING:
    from bertscope.analyses.erasure_results import LiveErasure
    from bertscope.analyses.sae.results import LiveFeatures

STATE_VERSION = 1
DEFAULT_TEXT = "The keys to the cabinet are on the table."
VIEWS = ("head", "average")


class StateFileError(InputError, ValueError):
    """A session file whose content is not a state this bertscope can use."""


class NotASessionError(StateFileError):
    """A file that is not a session the explorer wrote (or cannot be read to tell): it is left as it is."""


class DamagedSessionError(StateFileError):
    """A session the explorer wrote that this bertscope cannot use; `reason` says why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"session file {path} is damaged ({reason})", setting="session_file")
        self.reason = reason


@dataclass(frozen=True)
class ExplorerState:
    """Everything needed to reopen the explorer where the user left it."""

    text: str = DEFAULT_TEXT
    pair: str = ""
    mask: str = ""  # a mask spec such as "0:3,2:*"; checked against the model by fit_to_model
    ablation: Ablation = "zero"
    layer: int = 0
    head: int = 0
    view: str = "head"
    figure: str = "entropy"
    theme: str | None = None
    cursor: tuple[int, int] = (0, 0)  # (query row, key column) in the heatmap
    erased: str = ""  # a property erased in every pass (`E`), "task@layer" such as "upos@4"; checked by fit_to_model
    sae: str = ""  # the SAE directory the features screen opened (`F`)
    switched: str = ""  # its features switched in every pass, "12,40,7=2.5" (a bare number: off); checked by fit_to_model

    def with_(self, **changes: Any) -> ExplorerState:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["cursor"] = list(self.cursor)
        data["version"] = STATE_VERSION
        return data

    @classmethod
    def from_json(cls, data: Any) -> ExplorerState:
        """Check and read a `to_json` dict; a missing field takes its default, unknown keys are ignored."""
        if not isinstance(data, dict):
            raise StateFileError(f"expected a JSON object, found {_json_type(data)}")
        if "version" not in data:
            raise StateFileError("it has no version field")
        version = data["version"]
        if type(version) is not int or version != STATE_VERSION:
            raise StateFileError(f"it is version {_short(version)}; this bertscope reads version {STATE_VERSION}")
        defaults = cls()
        fields: dict[str, Any] = {}
        for name in ("text", "pair", "mask", "figure", "erased", "sae", "switched"):
            fields[name] = _string(data, name, getattr(defaults, name))
        fields["ablation"] = _choice(data, "ablation", ABLATIONS, defaults.ablation)
        fields["view"] = _choice(data, "view", VIEWS, defaults.view)
        fields["layer"] = _index(data.get("layer", defaults.layer), "layer")
        fields["head"] = _index(data.get("head", defaults.head), "head")
        theme = data.get("theme", defaults.theme)
        if theme is not None and not isinstance(theme, str):
            raise StateFileError(f"theme must be a theme name or null, not {_json_type(theme)}")
        fields["theme"] = theme
        cursor = data.get("cursor", list(defaults.cursor))
        if not isinstance(cursor, list) or len(cursor) != 2:
            raise StateFileError(f"cursor must be a list of two whole numbers, not {_short(cursor)}")
        fields["cursor"] = (_index(cursor[0], "cursor row"), _index(cursor[1], "cursor column"))
        return cls(**fields)


def fit_to_model(state: ExplorerState, num_layers: int, num_heads: int) -> tuple[ExplorerState, list[str]]:
    """Make a saved state valid for the model now loaded, saying in one line each what changed.

    The same file may be reopened with a smaller model; its layer, head and mask must not
    point outside it.
    """
    if num_layers < 1 or num_heads < 1:
        raise ValueError(f"a model has at least one layer and one head, not {num_layers} x {num_heads}")
    size = f"{num_layers} layers x {num_heads} heads"
    warnings: list[str] = []
    changes: dict[str, Any] = {}
    if state.layer >= num_layers:
        changes["layer"] = num_layers - 1
        warnings.append(f"the saved layer {state.layer} is outside this model ({size}); showing layer {num_layers - 1}")
    if state.head >= num_heads:
        changes["head"] = num_heads - 1
        warnings.append(f"the saved head {state.head} is outside this model ({size}); showing head {num_heads - 1}")
    try:
        mask = HeadMask.parse(state.mask, num_layers, num_heads)
    except MaskSpecError:
        changes["mask"] = ""
        shown = state.mask if state.mask.isprintable() else repr(state.mask)
        warnings.append(f"the saved mask {shown} does not fit this model ({size}); starting unmasked")
    else:
        changes["mask"] = mask.spec()
    if state.erased and saved_erasure(state.erased, num_layers) is None:
        changes["erased"] = ""
        shown = state.erased if state.erased.isprintable() else repr(state.erased)
        warnings.append(f"the saved erasure {shown} is not a task@layer of this model's hidden states 0-{num_layers}; nothing is erased")
    if state.switched:
        from bertscope.analyses.sae.results import LiveFeatures

        try:
            LiveFeatures.parse_spec(state.switched)
        except InputError as error:
            changes["switched"] = ""
            warnings.append(f"the saved SAE features are not features ({error}); none is switched")
    return state.with_(**changes), warnings


def features_spec(features: LiveFeatures | None) -> dict[str, str]:
    """How a session file keeps switched SAE features: the SAE's directory and "12,40,7=2.5" ("" for none)."""
    return {"sae": features.directory, "switched": features.spec()} if features is not None else {"switched": ""}


def erasure_spec(erasure: LiveErasure | None) -> str:
    """How a session file keeps an erasure: "task@layer" ("" for none)."""
    return f"{erasure.task}@{erasure.layer}" if erasure is not None else ""


def saved_erasure(erased: str, num_layers: int) -> tuple[str, int] | None:
    """(task, hidden-state layer) of a session's "task@layer" erasure, or None where it names no erasable task or no
    hidden state of a model of `num_layers` layers."""
    from bertscope.ui.erasure import erasable_tasks

    task, _, layer = erased.rpartition("@")
    if task not in erasable_tasks() or not layer.isdecimal() or not 0 <= int(layer) <= num_layers:
        return None
    return task, int(layer)


def check_session_file(path: str | Path) -> None:
    """Raise NotASessionError where `path` holds something other than a session (the command line's check,
    before the explorer starts); a missing file, a session, or a damaged session pass."""
    try:
        read_state(path)
    except DamagedSessionError:
        pass  # a session the explorer wrote, damaged since: the explorer moves it aside and says so


def read_state(path: str | Path) -> ExplorerState | None:
    """The state saved in `path`; None where there is none yet (no file).

    Raises NotASessionError where the file is not a session the explorer wrote: a directory,
    unreadable, empty, not UTF-8 (the explorer writes ASCII), not JSON, or JSON without the
    session's version and fields. Raises DamagedSessionError where it is a session this
    bertscope cannot use (a value out of place, another version).
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise NotASessionError(f"session file {path} is a directory; give a file name", setting="session_file")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise NotASessionError(f"cannot read session file {path}: {error.strerror or error}", setting="session_file") from None
    if not raw.strip():  # the explorer never writes an empty session: this file is someone else's, or a placeholder
        raise _not_a_session(path, "it is empty")
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise _not_a_session(path, "it is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise _not_a_session(path, f"not JSON: {error.msg} at line {error.lineno}") from None
    except RecursionError:
        raise _not_a_session(path, "not JSON bertscope can read: nested too deeply") from None
    try:
        return ExplorerState.from_json(data)
    except StateFileError as error:
        if not _written_by_the_explorer(data):
            raise _not_a_session(path, str(error)) from None
        raise DamagedSessionError(path, str(error)) from None


def load_state(path: str | Path) -> tuple[ExplorerState, str | None]:
    """The state saved in `path`, or a fresh one and a one-line message saying why not.

    A missing file is a new session (no message). A damaged session is renamed
    aside to `<name>.damaged` (or `.damaged-2`, ...) so nothing the user had is lost or
    overwritten. A file that is not a session raises NotASessionError and is left as it is.
    """
    path = Path(path).expanduser()
    try:
        state = read_state(path)
    except DamagedSessionError as error:
        return ExplorerState(), _set_aside(path, error.reason)
    return state or ExplorerState(), None


def _written_by_the_explorer(data: object) -> bool:
    """Whether JSON that is not a usable state is a session all the same: an object with the version and at least
    one of the session's fields (not, say, a package.json, whose version is its own)."""
    fields = {field.name for field in dataclasses.fields(ExplorerState)}
    return isinstance(data, dict) and "version" in data and bool(fields & data.keys())


def _not_a_session(path: Path, reason: str) -> NotASessionError:
    return NotASessionError(
        f"{path} is not a bertscope session ({reason}); left it as it is: give a new file name, or a session the explorer wrote",
        setting="session_file",
    )


def save_state(path: str | Path, state: ExplorerState) -> None:
    """Write `state` to `path` atomically: the old file stays whole if anything fails."""
    try:
        with atomic_write(path, "w") as handle:
            # ASCII-only output (json's default), so the platform's text encoding cannot matter
            json.dump(state.to_json(), handle, indent=2, sort_keys=True)
            handle.write("\n")
    except OSError as error:
        raise InputError(f"cannot save the session to {path}: {error.strerror or error}") from None


def _set_aside(path: Path, reason: str) -> str:
    """Rename a damaged session file to a free `.damaged` name; the message for the user."""
    number = 1
    while True:
        aside = path.with_name(f"{path.name}.damaged" + (f"-{number}" if number > 1 else ""))
        if not (aside.exists() or aside.is_symlink()):
            break
        number += 1
    try:
        path.rename(aside)
    except OSError as error:
        return (
            f"session file {path} is damaged ({reason}) and could not be moved aside ({error.strerror or error}); started a fresh session"
        )
    return f"session file {path} is damaged ({reason}); kept it as {aside} and started a fresh session"


def _string(data: dict, name: str, default: str) -> str:
    value = data.get(name, default)
    if not isinstance(value, str):
        raise StateFileError(f"{name} must be a string, not {_json_type(value)}")
    return value


def _choice(data: dict, name: str, choices: tuple[str, ...], default: str) -> str:
    value = data.get(name, default)
    if value not in choices:
        raise StateFileError(f"{name} must be {' or '.join(choices)}, not {_short(value)}")
    return value


def _index(value: Any, name: str) -> int:
    if type(value) is not int or value < 0:
        raise StateFileError(f"{name} must be a whole number from 0, not {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
