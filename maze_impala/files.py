"""Durable files: atomic replacement, fsynced appends, one run per directory.

Every file a run writes goes through here. A replaced file is written to a temporary
file beside it, fsynced and renamed over the old one, so a crash (or a SIGKILL) leaves
either the old or the new file, never a torn one. A failed write (a full disk) removes
its temporary file and raises :class:`OutputWriteError` naming the path and the OS error.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from maze_impala.run_files import LOCK_FILE

TEMP_SUFFIX = ".tmp"


class OutputWriteError(OSError):
    """A run's file could not be written; the message names the path and the OS error."""


class RunDirInUseError(RuntimeError):
    """Another live process trains into the same directory."""


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` through ``write(file)`` so that a crash leaves the old or the new file, fsynced."""
    path = Path(path)
    tmp = _temp_path(path)
    try:
        with open(tmp, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
        _fsync_directory(path.parent)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise OutputWriteError(error.errno, f"cannot write {path}: {error.strerror or error}") from error
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda file: file.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def save_torch(path: Path, state: object) -> None:
    """``torch.save`` made atomic and fsynced; serialised in memory first, so a full disk is an OS error here."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getbuffer())


def append_text(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` and fsync it."""
    try:
        with open(path, "a") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
    except OSError as error:
        raise OutputWriteError(error.errno, f"cannot append to {path}: {error.strerror or error}") from error


def remove_stray_temp_files(directory: Path) -> list[Path]:
    """Remove the temporary files that an interrupted write left in ``directory`` (one run per directory)."""
    stray = [p for p in Path(directory).glob(f".*{TEMP_SUFFIX}") if p.is_file()]
    for path in stray:
        path.unlink(missing_ok=True)
    return stray


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a directory be opened
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class RunDirLock:
    """An exclusive lock on a run directory, held while a run trains into it.

    It is an ``flock`` on ``.maze_run.lock`` holding the owner's pid: the kernel drops it
    when the owner exits, however it exits (SIGKILL included), so a stale lock never
    blocks the next run, and a second live run is refused with the holder's pid. A run that
    ends cleanly removes the file (while it still holds the lock; whoever locks a file that is
    no longer the one at the path tries again).
    """

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        """The run directory it locks."""
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunDirLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise RunDirInUseError(
                    f"{self.path.parent} is in use by another run (pid {holder}); wait for it to end, or choose "
                    "another directory"
                ) from None
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)  # the previous holder removed this file as we locked it: lock the one at the path now
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
