"""A batch's results read to the host one batch late, so that a GPU and the host work at the same time.

A corpus job reduces each batch on the device and reads the reduction to the host. Read at once, the host waits
for the batch's forward to finish, and only then tokenises, pads and uploads the next batch, while the GPU waits
in turn: the job's time is the host's work plus the device's. The bare forward it is measured against reads
nothing until the end, so its time is the larger of the two. `LaggedReads` queues each batch's copy behind the
batch's own work (pinned memory, no wait) and waits for it only once the next batch's work is queued as well.
On a device that runs as it is called (the CPU) the read is immediate, and nothing changes. The batch's uploads must
not wait either (`device.upload`): on one H200 the late reads alone bought nothing while each batch still copied
its ids from pageable memory (benchmarks/README.md, session 27).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class LaggedReads:
    """Hands each batch's tensors to its consumer as host arrays, one batch late on a CUDA device.

    The consumers run in the order the batches came; `flush` reads what is still queued (at the end of the corpus,
    or before the sums so far are shown).
    """

    def __init__(self) -> None:
        self._queued: tuple[tuple[torch.Tensor, ...], torch.cuda.Event, Callable[..., None]] | None = None

    def put(self, *values: torch.Tensor, use: Callable[..., None]) -> None:
        """Queue the copy of `values` to the host; `use` gets them, as arrays in the same order, once they are read.
        The batch before is read now."""
        if any(tensor.device.type != "cuda" for tensor in values):
            self.flush()
            use(*(tensor.cpu().numpy() for tensor in values))
            return
        hosts = tuple(torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True).copy_(tensor, non_blocking=True) for tensor in values)
        copied = torch.cuda.Event()
        copied.record(torch.cuda.current_stream(values[0].device))
        self.flush()
        self._queued = (hosts, copied, use)

    def flush(self) -> None:
        """Read the batch still queued, if any, and hand it on."""
        if self._queued is None:
            return
        hosts, copied, use = self._queued
        self._queued = None
        copied.synchronize()
        use(*(host.numpy() for host in hosts))
