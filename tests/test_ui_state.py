"""The explorer's session file: saved and reopened, and never lost when damaged."""

import json
import os
import subprocess
import sys

import pytest

from bertscope.base.errors import InputError
from bertscope.ui.state import (
    ExplorerState,
    NotASessionError,
    StateFileError,
    check_session_file,
    fit_to_model,
    load_state,
    save_state,
)

CHANGED = ExplorerState(
    text="Die Schlüssel liegen auf dem Tisch.",
    pair="Where are the keys?",
    mask="0:3,2:*",
    ablation="uniform",
    layer=2,
    head=5,
    view="average",
    figure="special-tokens",
    theme="solarized",
    cursor=(3, 1),
)


def test_round_trip_through_a_file(tmp_path):
    path = tmp_path / "session.json"
    save_state(path, CHANGED)
    assert load_state(path) == (CHANGED, None)
    data = json.loads(path.read_text())
    assert data["version"] == 1 and data["cursor"] == [3, 1]
    assert list(data) == sorted(data)


def test_defaults_and_with():
    state = ExplorerState()
    assert state.text and state.mask == "" and state.ablation == "zero" and state.view == "head"
    moved = state.with_(layer=3, head=1)
    assert (moved.layer, moved.head) == (3, 1) and state.layer == 0
    assert ExplorerState.from_json(state.to_json()) == state


def test_unknown_keys_are_ignored_and_missing_ones_take_defaults():
    state = ExplorerState.from_json({"version": 1, "layer": 4, "added_by_a_later_bertscope": [1, 2]})
    assert state == ExplorerState(layer=4)


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"version": 2}, "version 2"),
        ({"version": None}, "version None"),
        ({"version": "1"}, "version '1'"),
        ({"ablation": "mean"}, "ablation"),
        ({"view": "grid"}, "view"),
        ({"layer": -1}, "layer"),
        ({"head": 1.5}, "head"),
        ({"head": True}, "head"),
        ({"text": 3}, "text must be a string"),
        ({"theme": 7}, "theme"),
        ({"cursor": [1]}, "cursor"),
        ({"cursor": [0, -2]}, "cursor column"),
    ],
)
def test_invalid_fields_say_which(change, fragment):
    with pytest.raises(StateFileError, match=fragment) as caught:
        ExplorerState.from_json({**ExplorerState().to_json(), **change})
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_state_must_be_an_object_with_a_version():
    with pytest.raises(StateFileError, match="JSON object"):
        ExplorerState.from_json([1, 2])
    with pytest.raises(StateFileError, match="no version"):
        ExplorerState.from_json({"layer": 1})


def test_a_missing_file_is_a_new_session(tmp_path):
    assert load_state(tmp_path / "new.json") == (ExplorerState(), None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"\x00\x9f garbage \xff", "not UTF-8"),
        ('{"text": "caf\u00e9", "version": 1}'.encode("latin-1"), "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"Notes for Monday\n", "not JSON"),
        (b"[1, 2, 3]", "JSON object"),
        (b'{"name": "my-package", "version": "1.0.0"}', "version '1.0.0'"),
        (b'{"text": "a sentence"}', "no version"),
        (b'{"version": 99}', "version 99"),
        (b"[" * 100_000, "JSON"),
    ],
)
def test_a_file_that_is_not_a_session_is_refused_and_left_as_it_is(tmp_path, content, reason):
    path = tmp_path / "notes.json"
    path.write_bytes(content)
    for check in (load_state, check_session_file):
        with pytest.raises(NotASessionError, match="is not a bertscope session") as refused:
            check(path)
        assert reason in str(refused.value) and "\n" not in str(refused.value)
        assert refused.value.setting == "session_file"  # the command line names --session
    assert [p.name for p in tmp_path.iterdir()] == ["notes.json"] and path.read_bytes() == content


@pytest.mark.parametrize("content", [b"", b"\n"])
def test_an_empty_file_is_not_a_session_and_is_left_as_it_is(tmp_path, content):
    """Issue 54: the explorer never writes an empty session, so an empty file is someone else's (a placeholder, a
    log about to be written): it is refused like any other, not written over. A missing file is a new session."""
    path = tmp_path / "empty.txt"
    path.write_bytes(content)
    for check in (load_state, check_session_file):
        with pytest.raises(NotASessionError, match="is not a bertscope session \\(it is empty\\)"):
            check(path)
    assert [p.name for p in tmp_path.iterdir()] == ["empty.txt"] and path.read_bytes() == content
    assert load_state(tmp_path / "new.json") == (ExplorerState(), None)


@pytest.mark.parametrize(
    "content, reason",
    [
        (b'{"version": 1, "layer": "two"}', "layer"),
        (b'{"version": 2, "text": "a sentence", "layers_shown": [1, 2]}', "version 2"),
        (b'{"version": 1, "text": "a sentence", "view": "sideways"}', "view"),
    ],
)
def test_a_damaged_session_is_kept_aside_and_a_fresh_session_starts(tmp_path, content, reason):
    path = tmp_path / "session.json"
    path.write_bytes(content)
    state, message = load_state(path)
    assert state == ExplorerState()
    assert reason in message and "\n" not in message
    assert f"kept it as {tmp_path / 'session.json.damaged'}" in message
    assert not path.exists()
    assert (tmp_path / "session.json.damaged").read_bytes() == content


def test_a_second_damaged_file_does_not_overwrite_the_first(tmp_path):
    path = tmp_path / "session.json"
    for content in (b'{"version": 1, "layer": "first"}', b'{"version": 1, "layer": "second"}', b'{"version": 1, "layer": "third"}'):
        path.write_bytes(content)
        assert load_state(path)[1] is not None
    assert b"first" in (tmp_path / "session.json.damaged").read_bytes()
    assert b"second" in (tmp_path / "session.json.damaged-2").read_bytes()
    assert b"third" in (tmp_path / "session.json.damaged-3").read_bytes()


def test_after_a_damaged_file_the_next_save_starts_clean(tmp_path):
    path = tmp_path / "session.json"
    path.write_bytes(b'{"version": 1, "head": -1}')
    state, _ = load_state(path)
    save_state(path, state.with_(layer=1))
    assert load_state(path) == (ExplorerState(layer=1), None)


def test_a_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "session.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(CHANGED.to_json()).encode())
    assert load_state(path) == (CHANGED, None)


def test_a_directory_is_refused_and_left_alone(tmp_path):
    with pytest.raises(NotASessionError, match="is a directory"):
        load_state(tmp_path)
    assert tmp_path.is_dir()


def test_saving_is_atomic_when_writing_fails_midway(tmp_path, monkeypatch):
    path = tmp_path / "session.json"
    save_state(path, CHANGED)
    before = path.read_bytes()

    def broken_dump(obj, handle, **kwargs):
        handle.write('{"version": 1, "te')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", broken_dump)
    with pytest.raises(InputError, match="No space left on device"):
        save_state(path, ExplorerState())
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["session.json"]


def test_saving_where_it_cannot_write_is_one_clear_line(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        save_state(tmp_path / "missing" / "session.json", ExplorerState())
    with pytest.raises(InputError, match="directory"):
        save_state(tmp_path, ExplorerState())


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions and a non-root user")
def test_saving_into_a_read_only_directory(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(InputError, match="permission"):
            save_state(tmp_path / "session.json", ExplorerState())
    finally:
        tmp_path.chmod(0o700)


def test_fit_to_model_leaves_a_fitting_state_alone():
    assert fit_to_model(CHANGED, 6, 12) == (CHANGED, [])


def test_fit_to_model_clamps_indices_and_drops_a_mask_that_does_not_fit():
    state = CHANGED.with_(layer=11, head=15, mask="7:1")
    fitted, warnings = fit_to_model(state, 6, 12)
    assert (fitted.layer, fitted.head, fitted.mask) == (5, 11, "")
    assert fitted.with_(layer=11, head=15, mask="7:1") == state
    assert len(warnings) == 3 and all("\n" not in line for line in warnings)
    assert "layer 11" in warnings[0] and "showing layer 5" in warnings[0]
    assert "head 15" in warnings[1]
    assert warnings[2] == "the saved mask 7:1 does not fit this model (6 layers x 12 heads); starting unmasked"


def test_fit_to_model_drops_a_malformed_mask_and_tidies_a_good_one():
    fitted, warnings = fit_to_model(ExplorerState(mask="zero:all"), 6, 12)
    assert fitted.mask == "" and "zero:all" in warnings[0]
    fitted, warnings = fit_to_model(ExplorerState(mask=" 1:0, 0:2 ,1:0"), 6, 12)
    assert fitted.mask == "0:2,1:0" and warnings == []


def test_importing_the_ui_state_and_export_does_not_load_torch():
    code = (
        "import sys, bertscope.ui.state, bertscope.ui.export; "
        "heavy = [name for name in ('torch', 'transformers') if name in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
