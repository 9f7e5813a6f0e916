"""Stops a Ray that a run started on this machine when the run's process dies without stopping it (e.g. SIGKILL).

Ray's own processes share the driver's fate only in part: its GCS and raylet die with the
driver, but the per-node agents notice the raylet's death only after about a minute. The
reaper is a small process of its own session that waits for its stdin to close: the
driver writes ``done`` first when it stopped Ray itself; otherwise the reaper kills the
processes it was given and every process of that raylet it saw while the run lived (the
raylet's children, and processes with ``RAY_RAYLET_PID`` in their environment; by then
the raylet is dead and its children belong to init).

``python -m maze_impala.actors.reaper RAYLET_PID PID...`` (see :func:`start_reaper`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

REFRESH_SECONDS = 0.5
"""How often the reaper looks for the raylet's new processes while the run lives."""


def start_reaper(raylet_pid: int, pids: list[int]) -> subprocess.Popen:
    """Start the reaper of a local Ray; write ``done`` to its stdin and close it once Ray is stopped."""
    return subprocess.Popen(
        [sys.executable, "-m", "maze_impala.actors.reaper", str(raylet_pid), *map(str, pids)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # neither Ctrl-C nor the driver's group dying takes it along
    )


def stop_reaper(reaper: subprocess.Popen) -> None:
    """Tell the reaper that Ray was stopped cleanly, and wait for it to exit."""
    with contextlib.suppress(OSError, ValueError):
        reaper.stdin.write(b"done\n")
        reaper.stdin.close()
    try:
        reaper.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()


def _start_time(pid: int) -> int | None:
    """The start time of ``pid`` (a pid reused by a new process has another), or None if it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def raylet_processes(raylet_pid: int) -> list[int]:
    """The raylet's children (its agents and workers) and every process whose environment names it as their
    raylet (``RAY_RAYLET_PID``; agents overwrite their environment with their process title, workers do not)."""
    marker = f"RAY_RAYLET_PID={raylet_pid}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == raylet_pid or marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
    return found


def main(argv: list[str]) -> None:
    raylet_pid, pids = int(argv[0]), [int(p) for p in argv[1:]]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    known: dict[int, int | None] = {pid: _start_time(pid) for pid in [raylet_pid, *pids]}
    stdin, message = sys.stdin.buffer.raw, b""
    while True:  # until the run writes "done" or dies (EOF); meanwhile, remember what its Ray started
        if select.select([stdin], [], [], REFRESH_SECONDS)[0]:
            chunk = os.read(stdin.fileno(), 64)
            if not chunk:
                break
            message += chunk
            continue
        for pid in raylet_processes(raylet_pid):
            known.setdefault(pid, _start_time(pid))
    if message.strip() == b"done":
        return
    for pid, started in known.items():
        if started is not None and _start_time(pid) == started and pid != os.getpid():  # not a reused pid
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    for pid in raylet_processes(raylet_pid):  # workers that started since the last look
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
