"""Files written whole and on real disk blocks (core.data.files)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from bertscope.core.data.files import atomic_write


@pytest.mark.parametrize("has_fallocate", [True, False])
def test_reserving_space_keeps_a_header_and_zeroes_the_rest(tmp_path, monkeypatch, has_fallocate):
    """The probing feature cache maps an .npy file: its header must survive, with or without posix_fallocate (macOS)."""
    import numpy as np

    from bertscope.core.data.files import reserve_space

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
