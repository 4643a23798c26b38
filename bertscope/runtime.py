"""Corpus jobs across processes, launched by `torchrun` (or Slurm, Kubernetes, `accelerate launch`).

torchrun starts one process per GPU (or CPU socket) and sets `RANK`, `WORLD_SIZE` and
`LOCAL_RANK`; bertscope notices them itself. Each rank reads the corpus as a stream and
keeps sentence i when i % WORLD_SIZE == RANK (`shard`), reduces its own sufficient
statistics (float64 sums and counts: `sum_across`; rows and samples: `gather`), and only
rank 0 prints and writes. Without those variables every function here is the identity and
nothing is started.

Faults. A rank that fails posts one line (`rank R: cause`) in the launcher's key-value
store (`share_failure`); the others see it at their next progress step or arrival and stop
with `RankFailed`. Collectives are entered only after every rank has `arrive`d, a wait that
polls the store, so a slow rank never runs into a collective timeout and a failed one never
leaves the others blocked in a collective. A rank killed outright (the kernel's OOM killer)
is seen by torchrun, which stops the whole group.

A job joins in three places: its sentences through `shard` (where it reads them), its
float64 sums and integer counts through `sum_across` where it finalises them (or `gather` for
rows and samples, `from_main` for work done once on rank 0), and its `outcome` inside
`failures_shared()` with `whole_corpus(progress)` (bertscope.api does this for each job).

Torch is imported inside the functions: the CLI reads the environment before torch loads.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from bertscope.base.errors import BertscopeError

if TYPE_CHECKING:  # only in annotations
    from bertscope.base.progress import Progress

T = TypeVar("T")

COLLECTIVE_TIMEOUT_S = 600  # every rank is present when a collective starts (see `arrive`); this bounds a lost one
POLL_S = 0.05  # how often a waiting rank looks at the store
ACK_WAIT_S = 10.0  # how long a failed rank waits for rank 0 to have said so, before it exits
PUBLISH_EVERY_S = 0.5  # progress and failure checks, at most this often


@dataclass(frozen=True)
class World:
    """This process's place in the job: `rank` of `size`, and `local_rank` on its machine."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


class RankFailed(BertscopeError):
    """Another rank failed; its message names the rank and the cause. `status`: the exit status to end with."""

    def __init__(self, message: str, status: int = 1, setting: str | None = None):
        super().__init__(message, setting=setting)
        self.status = status


class RankSetupFailed(BertscopeError):
    """This rank alone could not join (no GPU for it): before the group exists rank 0 cannot say so, so this rank does."""


def world() -> World:
    """The distributed environment torchrun sets, or a world of one."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        raise BertscopeError("RANK, WORLD_SIZE and LOCAL_RANK must be whole numbers, as torchrun sets them") from None
    if size < 1 or not 0 <= rank < size:
        raise BertscopeError(f"RANK {rank} does not fit WORLD_SIZE {size}; launch with torchrun")
    return World(rank, size, local_rank)


def is_main() -> bool:
    """True on rank 0, and in a process not launched by torchrun: the one that prints and writes."""
    return world().main


# --- starting -------------------------------------------------------------------------------

_state: dict[str, Any] = {}  # the store, the backend and counters of the process group this process started


def started() -> bool:
    return "store" in _state


def start(device: str = "auto") -> str:
    """Join the process group when launched by torchrun (once); return the device this rank uses.

    `auto` becomes `cuda:LOCAL_RANK` with NCCL when CUDA is there, else the CPU with gloo.
    An explicit device is kept (`cpu` forces gloo). Outside torchrun: `device`, unchanged.
    """
    here = world()
    if not here.active:
        return device
    import torch
    import torch.distributed as dist

    if device == "auto":
        device = f"cuda:{here.local_rank}" if torch.cuda.is_available() else "cpu"
    if started():
        return device
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        raise BertscopeError("WORLD_SIZE is set but MASTER_ADDR/MASTER_PORT are not; launch with torchrun")
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        chosen, count = torch.device(device), torch.cuda.device_count()
        if chosen.index is not None and chosen.index >= count:
            raise RankSetupFailed(
                f"rank {here.rank} would use {device}, but this machine has {count} GPU{'s' if count != 1 else ''}; "
                f"start at most {count} rank{'s' if count != 1 else ''} on it, or run on the CPU",
                setting="device",
            )
        torch.cuda.set_device(chosen)
    timeout = datetime.timedelta(seconds=float(os.environ.get("BERTSCOPE_COLLECTIVE_TIMEOUT", COLLECTIVE_TIMEOUT_S)))
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timeout)
    # The launcher's key-value store: no collective, so a rank can post and read without the others.
    store = dist.PrefixStore("bertscope/", dist.distributed_c10d._get_default_store())
    _state.update(store=store, backend=backend, device=device, arrivals=0, published=0.0)
    with contextlib.suppress(ValueError):  # only the main thread may set it
        signal.signal(signal.SIGTERM, _interrupt)  # torchrun stops the group with SIGTERM: unwind as on Ctrl-C
    return device


class Terminated(KeyboardInterrupt):
    """torchrun stopped this rank (SIGTERM): another rank failed, and said so itself, or the launcher was stopped."""


def _interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise Terminated


# --- failures -------------------------------------------------------------------------------


def failure_line(error: BaseException) -> str:
    """One line for a rank's failure: the message of a user error, the kind and message of anything else."""
    import torch

    if isinstance(error, torch.OutOfMemoryError):
        return f"out of memory ({str(error).splitlines()[0] if str(error) else 'no detail'}); use a smaller batch size"
    if isinstance(error, BertscopeError):
        return str(error)
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'no message'}"


def failure_setting(error: BaseException) -> str | None:
    """The setting that would have avoided a rank's failure: a user error's own; out of memory, the batch size."""
    if isinstance(error, BertscopeError):
        return error.setting
    return "batch_size" if type(error).__name__ == "OutOfMemoryError" else None


def share_failure(error: BaseException) -> None:
    """Tell every rank that this one failed and why (the first failure of the job is the one kept)."""
    if not started() or isinstance(error, RankFailed):
        return
    store, rank = _state["store"], world().rank
    status = 2 if isinstance(error, BertscopeError) else 1
    if isinstance(error, KeyboardInterrupt):
        line, status = "interrupted", 130
    else:
        line = failure_line(error)
    setting = failure_setting(error) or "-"
    if store.add("failures", 1) == 1:
        store.set("failed", f"{status} {setting} rank {rank}: {line}")
    if rank != 0:  # rank 0 says it; torchrun stops the group as soon as this process exits
        deadline = time.monotonic() + ACK_WAIT_S
        while time.monotonic() < deadline and not store.check(["acknowledged"]):
            time.sleep(POLL_S)


def check() -> None:
    """Raise `RankFailed` if a rank has posted a failure."""
    if not started():
        return
    store = _state["store"]
    if store.check(["failed"]):
        status, setting, line = store.get("failed").decode().split(" ", 2)
        if world().main:
            store.set("acknowledged", "1")
        raise RankFailed(line, int(status), None if setting == "-" else setting)


@contextlib.contextmanager
def failures_shared() -> Iterator[None]:
    """Run a job so that a failure here stops every rank (see `share_failure`)."""
    try:
        yield
    except BaseException as error:
        share_failure(error)
        raise


# --- sharding and waiting -------------------------------------------------------------------


def shard(items: Iterable[T]) -> Iterator[T]:
    """This rank's items: the i-th when i % size == rank, chosen while streaming (nothing is read ahead)."""
    here = world()
    if not here.active:
        yield from items
        return
    for index, item in enumerate(items):
        if index % here.size == here.rank:
            yield item


def shard_size(count: int) -> int:
    """How many of `count` items `shard` gives this rank (all of them outside torchrun)."""
    here = world()
    return len(range(here.rank, count, here.size))


def arrive() -> None:
    """Wait until every rank got here (or one failed: `RankFailed`), by polling the store, without a timeout.

    Every collective below comes after it, so collectives start with all ranks present.
    """
    if not started():
        return
    store = _state["store"]
    _state["arrivals"] += 1
    key = f"arrived/{_state['arrivals']}"
    store.add(key, 1)
    while True:
        check()
        if store.add(key, 0) >= world().size:
            return
        time.sleep(POLL_S)


def sum_across(values: dict[str, Any]) -> dict[str, Any]:
    """Every rank's values summed, in float64 (arrays, tensors, numbers); the same dict on every rank.

    Tensors come back as float64 tensors on their device, numpy arrays and numbers as float64
    numpy arrays and Python floats (integers stay integers: counts are exact).
    """
    if not started():
        return values
    import numpy as np
    import torch
    import torch.distributed as dist

    arrive()
    transport = torch.device(_state["device"]) if _state["backend"] == "nccl" else torch.device("cpu")
    names = sorted(values)
    flat = torch.cat(
        [
            torch.as_tensor(
                np.asarray(values[name].detach().cpu() if torch.is_tensor(values[name]) else values[name]), dtype=torch.float64
            ).reshape(-1)
            for name in names
        ]
    ).to(transport)
    dist.all_reduce(flat)
    summed: dict[str, Any] = {}
    offset = 0
    for name in names:
        value = values[name]
        size = int(np.prod(np.shape(value.detach().cpu() if torch.is_tensor(value) else value)))
        part = flat[offset : offset + size].cpu()
        offset += size
        if torch.is_tensor(value):
            summed[name] = part.reshape(value.shape).to(value.device)
        elif isinstance(value, np.ndarray):
            summed[name] = part.reshape(value.shape).numpy()
        elif isinstance(value, int):
            summed[name] = int(round(float(part[0])))
        else:
            summed[name] = float(part[0])
    return summed


def gather(value: T, *, to_main: bool = False) -> list[T]:
    """Every rank's `value` (any picklable object), in rank order, on every rank; with `to_main`
    on rank 0 only (the others get an empty list), so rows are not held twice on every rank."""
    if not started():
        return [value]
    import torch.distributed as dist

    arrive()
    if not to_main:
        gathered: list[Any] = [None] * world().size
        dist.all_gather_object(gathered, value)
        return gathered
    on_main: list[Any] | None = [None] * world().size if world().main else None
    dist.gather_object(value, on_main, dst=0)
    return on_main or []


def from_main(value: T) -> T:
    """Rank 0's `value` on every rank (the others pass anything, e.g. None): work done once, shared."""
    if not started():
        return value
    import torch.distributed as dist

    arrive()
    box = [value if world().main else None]
    dist.broadcast_object_list(box, src=0)
    return cast(T, box[0])  # rank 0's value, on every rank


def whole_corpus(progress: Callable[[Any], None] | None, *, summed: bool = True) -> Callable[[Any], None] | None:
    """A progress callback for a sharded job: every rank publishes its count, rank 0 shows the sum
    over the ranks at its stage (`summed=False`: a job whose steps already speak of the whole
    corpus; rank 0 shows its own). A stage that runs on rank 0 alone, after the shards, shows as it is.

    It also checks, at most every PUBLISH_EVERY_S, whether another rank failed.
    """
    if not started():
        return progress
    store, here = _state["store"], world()

    def publish(step: Progress[Any]) -> None:
        now = time.monotonic()
        if now - _state["published"] < PUBLISH_EVERY_S and not step.finished:
            return
        _state["published"] = now
        check()
        store.set(f"progress/{here.rank}", f"{step.done} {step.total if step.total is not None else -1} {step.stage}")
        if progress is None or not here.main:
            return
        if not summed:
            progress(step)
            return
        done = 0
        total: int | None = 0
        for rank in range(here.size):
            key = f"progress/{rank}"
            if not store.check([key]):
                continue
            rank_done, rank_total, stage = store.get(key).decode().split(" ", 2)
            if stage != step.stage:
                continue
            rank_done, rank_total = int(rank_done), int(rank_total)
            done += rank_done
            total = None if total is None or rank_total < 0 else total + rank_total
        progress(type(step)(step.stage, done, total or None))

    return publish


def stop() -> None:
    """Leave the process group (at the end of the process)."""
    if started():
        import torch.distributed as dist

        with contextlib.suppress(Exception):
            dist.destroy_process_group()
        _state.clear()


def add_now(tensor: Any) -> None:
    """Add `tensor` over the ranks in place, at once: for the steps of a job whose ranks have just met (`arrive`),
    such as a data-parallel optimiser's gradients, where a wait on the store for every step would cost more than the step."""
    if not started():
        return
    import torch.distributed as dist

    if _state["backend"] == "nccl" or tensor.device.type == "cpu":
        dist.all_reduce(tensor)
        return
    moved = tensor.cpu()  # gloo with the rows on a GPU: through the host
    dist.all_reduce(moved)
    tensor.copy_(moved.to(tensor.device))
