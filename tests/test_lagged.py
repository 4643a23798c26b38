"""LaggedReads (model.lagged): every batch reaches its consumer, in order, as a host array; on the CPU at once."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from bertscope.model.device import upload  # noqa: E402
from bertscope.model.lagged import LaggedReads  # noqa: E402


def test_on_the_cpu_each_batch_is_read_at_once_and_in_order():
    reads, seen = LaggedReads(), []
    for number in range(3):
        reads.put(torch.full((2, 3), float(number)), use=seen.append)
        assert len(seen) == number + 1  # nothing waits: the CPU ran the batch as it was called
    reads.flush()
    assert [array.tolist() for array in seen] == [[[float(n)] * 3] * 2 for n in range(3)]
    assert all(isinstance(array, np.ndarray) for array in seen)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_on_a_gpu_a_batch_is_read_once_the_next_is_queued_and_the_last_at_flush():
    reads, seen = LaggedReads(), []
    for number in range(3):
        values = torch.arange(6, device="cuda", dtype=torch.float64) + 10 * number
        reads.put(values, use=seen.append)
        del values  # the copy is queued on the stream: freeing the source cannot spoil it
        assert len(seen) == number  # the batch before this one, not this one
    reads.flush()
    reads.flush()  # nothing left: a second flush reads nothing again
    assert [array.tolist() for array in seen] == [[float(i + 10 * n) for i in range(6)] for n in range(3)]


def test_several_tensors_of_a_batch_reach_the_consumer_together():
    reads, seen = LaggedReads(), []
    reads.put(torch.ones(2, 2, dtype=torch.float16), torch.tensor(True), use=lambda rows, flag: seen.append((rows, bool(flag))))
    assert seen[0][0].dtype == np.float16 and seen[0][0].sum() == 4 and seen[0][1] is True


def test_an_upload_is_the_values_on_the_device():
    source = np.arange(12, dtype=np.int64).reshape(3, 4)
    uploaded = upload(source, "cpu")
    assert uploaded.tolist() == source.tolist() and uploaded.dtype == torch.int64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_an_upload_to_a_gpu_leaves_the_source_free_at_once():
    source = np.arange(12, dtype=np.int64).reshape(3, 4)
    uploaded = upload(source, "cuda")
    source[:] = -1  # the caller may reuse its buffer at once: the upload copied it to pinned memory first
    assert uploaded.is_cuda and uploaded.cpu().tolist() == np.arange(12).reshape(3, 4).tolist()
