"""Files written whole and on real disk blocks (core.data.files)."""

from __future__ import annotations

import os

import pytest


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
