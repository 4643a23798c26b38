"""Files written whole and on real disk blocks (data.files)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from bertscope.data.files import atomic_write


@pytest.mark.parametrize("has_fallocate", [True, False])
def test_reserving_space_keeps_a_header_and_zeroes_the_rest(tmp_path, monkeypatch, has_fallocate):
    """The probing feature cache maps an .npy file: its header must survive, with or without posix_fallocate (macOS)."""
    import numpy as np

    from bertscope.data.files import reserve_space

    if not has_fallocate:
        monkeypatch.delattr(os, "posix_fallocate", raising=False)
    path = tmp_path / "features.npy"
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(300, 1000))
    reserve_space(path, start=array.offset)
    array[:] = 1.5
    array.flush()
    del array
    again = np.load(path, mmap_mode="r")
    assert again.shape == (300, 1000) and float(again.min()) == 1.5
    assert os.stat(path).st_blocks * 512 >= 300 * 1000 * 4  # the blocks are on disk, not a sparse promise


def test_writing_a_file_never_touches_the_umask(tmp_path, monkeypatch):
    """Reading the umask by setting it opens a window in which another thread's new files are world-writable."""

    def forbidden(_mask):
        raise AssertionError("os.umask changed the whole process's umask")

    monkeypatch.setattr(os, "umask", forbidden)
    with atomic_write(tmp_path / "out.json", "w") as handle:
        handle.write("{}")
    assert (tmp_path / "out.json").read_text() == "{}"


def test_files_written_while_another_thread_makes_directories_leave_them_private(tmp_path):
    """Two threads, as the feature cache's writer and the main thread: every directory either makes keeps the
    umask's permissions, and every written file has a plain open()'s."""
    old = os.umask(0o022)
    try:
        made: list[Path] = []

        def make_directories():
            for index in range(3000):
                folder = tmp_path / f"d{index}"
                folder.mkdir()
                made.append(folder)

        maker = threading.Thread(target=make_directories)
        maker.start()
        for index in range(300):
            with atomic_write(tmp_path / f"f{index}.bin") as handle:
                handle.write(b"x")
        maker.join()
    finally:
        os.umask(old)
    assert not [folder for folder in made if folder.stat().st_mode & stat.S_IWOTH]
    assert {stat.S_IMODE((tmp_path / f"f{index}.bin").stat().st_mode) for index in range(300)} == {0o644}


@pytest.mark.parametrize("reported", [True, False], ids=["proc", "without-proc"])
@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_the_umask_is_read_without_setting_it(tmp_path, monkeypatch, reported, mask):
    """From /proc/self/status where Linux reports it, else from a new directory's permissions (macOS)."""
    from bertscope.data import files

    old = os.umask(mask)
    try:
        monkeypatch.setattr(os, "umask", lambda _mask: pytest.fail("os.umask changed the whole process's umask"))
        if not reported:
            monkeypatch.setattr(files, "PROCESS_STATUS", str(tmp_path / "no-status"))
        assert files.current_umask() == mask
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_a_pruned_copy_follows_the_umask_like_every_other_file(tiny_session, tmp_path, monkeypatch, mask):
    """Issue 54: the copy's folder came out 0700 and its weights 0600 (mkdtemp, transformers), beside 0644 files."""
    from bertscope.analyses.importance import pruned_export

    timing = pruned_export.PairedTiming((1.0,), (1.0,), sentences=1)
    monkeypatch.setattr(pruned_export, "time_paired", lambda original, pruned_copy, texts: timing)  # its speed is not the point
    old = os.umask(mask)
    try:
        pruned_export.write_pruned_model(tiny_session, [(0, 1)], tmp_path / "pruned", timing_texts=["The cat sat."], extra={})
    finally:
        os.umask(old)
    written = tmp_path / "pruned"
    assert stat.S_IMODE(written.stat().st_mode) == 0o777 & ~mask
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in written.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o666 & ~mask}, modes
