"""What bertscope keeps in its cache directory, and clearing it.

Probing caches each split's layer features (`features-KEY.npy`, with `features-KEY.npz`
naming the rows) and trained decision probes (`probe-KEY.npz`), a few hundred MB per
corpus; `cpu-linear.json` says which CPU kernels were measured faster on this machine. Keys
hash the model, the data, the options and the cache format, so entries of an older
bertscope are never read again but stay on disk until cleared. Only files with these
names (and their hidden temporaries) are counted or removed; anything else in the
directory is left alone. Removing entries another process is reading or writing is safe:
a reader keeps its open map, and a writer whose temporary is gone only loses its entry.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertscope.base.errors import InputError

CHOICES_FILE = "cpu-linear.json"  # the CPU kernels measured faster on this machine (model.cpu_linear)
ENTRY_PATTERNS = ("features-*.npy", "features-*.npz", "probe-*.npz", CHOICES_FILE)
# files.temporary_beside: being written, or left by a crash
TEMPORARY_PATTERNS = (".features-*.tmp", ".probe-*.tmp", f".{CHOICES_FILE}.*.tmp")


def default_cache_dir() -> Path:
    """`$BERTSCOPE_CACHE_DIR`, else `$XDG_CACHE_HOME/bertscope`, else `~/.cache/bertscope`."""
    if os.environ.get("BERTSCOPE_CACHE_DIR"):
        return Path(os.environ["BERTSCOPE_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "bertscope"


@dataclass(frozen=True)
class CacheUsage:
    directory: Path
    feature_entries: int  # feature sets (one split of a corpus under one model and set of options)
    probes: int
    files: int  # every cache file, temporaries included
    bytes: int

    def as_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "feature_entries": self.feature_entries,
            "probes": self.probes,
            "files": self.files,
            "bytes": self.bytes,
        }


def cache_files(directory: str | Path) -> list[Path]:
    """bertscope's files in `directory` (none when it does not exist)."""
    directory = _checked(directory)
    if not directory.exists():
        return []
    found = {path for pattern in ENTRY_PATTERNS + TEMPORARY_PATTERNS for path in directory.glob(pattern) if path.is_file()}
    return sorted(found)


def cache_usage(directory: str | Path) -> CacheUsage:
    return _usage(directory, cache_files(directory))


def clear_cache(directory: str | Path) -> CacheUsage:
    """Remove bertscope's files from `directory`; returns what was there (one listing for both)."""
    files = cache_files(directory)
    removed = _usage(directory, files)
    try:
        for path in files:
            with contextlib.suppress(FileNotFoundError):  # another process got there first
                path.unlink()
    except PermissionError as error:
        raise InputError(f"cannot clear {removed.directory}: no permission to remove {error.filename}") from None
    return removed


def _usage(directory: str | Path, files: list[Path]) -> CacheUsage:
    entries = {path.stem for path in files if not path.name.startswith(".")}  # features-KEY's .npy and .npz are one
    features = sum(1 for stem in entries if stem.startswith("features-"))
    probes = sum(1 for stem in entries if stem.startswith("probe-"))
    return CacheUsage(Path(directory).expanduser(), features, probes, len(files), sum(_size(path) for path in files))


def _checked(directory: str | Path) -> Path:
    directory = Path(directory).expanduser()
    if directory.exists() and not directory.is_dir():
        raise InputError(f"the cache directory {directory} is a file; give a directory (or set $BERTSCOPE_CACHE_DIR)", setting="cache_dir")
    return directory


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
