"""Writing files so that a crash or a full disk never leaves half a file behind."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from bertscope.base.errors import InputError

PROCESS_STATUS = "/proc/self/status"  # Linux 4.7 and later report the umask there


def check_writable(path: str | Path) -> Path:
    """Fail early, before any slow work, if `path` cannot be written.

    Permission bits do not tell (root passes every `os.access` check, and /proc takes no new
    files), so this creates and removes a temporary file where `path` will go.
    """
    target = _checked_target(path)
    os.unlink(_new_temporary(target))
    return target


def _checked_target(path: str | os.PathLike[str]) -> Path:
    """`path` as a file name whose directory exists; what is wrong said in one line."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise InputError(f"cannot write {target}: it is a directory; give a file name")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        existing = next((folder for folder in (parent, *parent.parents) if folder.exists()), None)
        if existing is not None and not existing.is_dir():
            raise InputError(f"cannot write {target}: {existing} is a file, not a directory")
        raise InputError(f"cannot write {target}: directory {parent} does not exist")
    return target


def _new_temporary(target: Path) -> Path:
    """`temporary_beside(target)`, its failure said in one line."""
    try:
        return temporary_beside(target)
    except OSError as error:
        if isinstance(error, PermissionError):
            raise InputError(f"cannot write {target}: no permission to write in {target.parent}") from None
        raise InputError(f"cannot write {target}: {target.parent} takes no new files ({error.strerror or error})") from None


def check_new_directory(path: str | Path) -> Path:
    """Fail early unless `path` is a new or empty directory that can be made and written in."""
    target = Path(path).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InputError(f"cannot write {target}: it already exists and is not an empty directory; give a new directory")
    check_writable(target / "config.json" if target.is_dir() else target)
    return target


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Fill a new directory whole or not at all: the block writes into a temporary directory beside `path`, which is
    renamed to `path` when the block ends; a failure or an interrupt removes it, leaving no half-written `path`.

    `path` must be new or an empty directory (`check_new_directory`, also checked here)."""
    target = check_new_directory(path)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent if str(target.parent) else "."))
    try:
        yield staging
        follow_umask(staging)  # mkdtemp's directory is private; what is published follows the umask
        if target.exists():
            target.rmdir()  # empty, as checked
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb", *, replace: bool = True) -> Iterator[IO[Any]]:
    """Write to a temporary file beside `path`, then rename it over `path` in one step.

    `replace=False`: an existing `path` is never replaced, even one made while this wrote (FileExistsError).
    """
    target = _checked_target(path)
    temporary = _new_temporary(target)  # the check and the file in one step
    try:
        with open(temporary, mode) as handle:
            yield handle
        publish(temporary, target, replace=replace)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def temporary_beside(path: str | Path) -> Path:
    """A new empty file in `path`'s directory, hidden, to be filled and then `publish`ed over `path`.

    Made with the permissions a plain open() gives (0o666 less the umask, which the system
    applies), so the published file has them too. The umask is never read by setting it:
    that changes it for the whole process, and a file or directory another thread makes in
    that moment (the feature cache writes from one) would be open to everyone."""
    target = Path(path)
    for _ in range(100):
        candidate = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
        try:
            descriptor = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(descriptor)
        return candidate
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(target.parent))


def current_umask() -> int:
    """The process's umask, read without setting it (see `temporary_beside`): from /proc where Linux reports it,
    else from the permissions a new directory asking for all of them is given."""
    try:
        with open(PROCESS_STATUS, encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    probe = Path(tempfile.gettempdir()) / f".bertscope-umask-{secrets.token_hex(4)}"
    os.mkdir(probe, 0o777)
    try:
        return 0o777 & ~stat.S_IMODE(os.stat(probe).st_mode)
    finally:
        os.rmdir(probe)


def follow_umask(directory: str | Path) -> None:
    """Give `directory` and everything in it the permissions a plain mkdir and open() give, where other code made
    them private (tempfile.mkdtemp's directory, the weights transformers saves), so that what bertscope writes
    follows the user's umask like any other file."""
    mask = current_umask()
    os.chmod(directory, 0o777 & ~mask)
    for root, folders, files in os.walk(directory):
        for name in folders:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), 0o777 & ~mask)
        for name in files:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), 0o666 & ~mask)


def publish(temporary: str | Path, path: str | Path, *, replace: bool = True) -> None:
    """Move a complete `temporary` file over `path` in one step, once its contents are on disk.

    `replace=False`: only where no `path` exists (FileExistsError otherwise), by a hard link, which fails where the
    name is taken however late it was; a file system without hard links is checked, then renamed onto."""
    descriptor = os.open(temporary, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    if replace:
        os.replace(temporary, path)
        return
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise
    except OSError:  # no hard links here (FAT, some network file systems)
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from None
        os.replace(temporary, path)
        return
    os.unlink(temporary)


def reserve_space(path: str | Path, start: int = 0, chunk: int = 1 << 20) -> None:
    """Make the file's blocks from `start` to its end real on disk, so a full disk fails here and not later.

    A memory-mapped file that is sparse gets its blocks only when a page is first written,
    and a full disk then kills the process (SIGBUS) instead of raising. `posix_fallocate`
    reserves them at once where the system and file system have it; elsewhere (macOS,
    Windows, some network file systems) the bytes are written as zeros (a new file's
    content, so nothing changes but the blocks).
    Raises OSError when the space is not there.
    """
    with open(path, "r+b") as handle:
        size = os.fstat(handle.fileno()).st_size
        if hasattr(os, "posix_fallocate"):
            try:
                os.posix_fallocate(handle.fileno(), start, max(size - start, 0))
                return
            except OSError as error:
                if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
        zeros = bytes(chunk)
        handle.seek(start)
        for offset in range(start, size, chunk):
            handle.write(zeros[: min(chunk, size - offset)])
        handle.flush()
        os.fsync(handle.fileno())
