"""Stops a Ray that a run started on this machine when the run's process dies without stopping it (e.g. SIGKILL).

Ray's own processes share the driver's fate only in part: its GCS and raylet die with the
driver, but the per-node agents notice the raylet's death only after about a minute. The
reaper is a small process of its own session that waits for its stdin to close: the
driver writes ``done`` first when it stopped Ray itself; otherwise the reaper kills the
processes it was given and every process of that raylet (``RAY_RAYLET_PID`` in its
environment).

``python -m maze_impala.actors.reaper RAYLET_PID PID...`` (see :func:`start_reaper`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path


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


def raylet_processes(raylet_pid: int) -> list[int]:
    """Processes whose environment names ``raylet_pid`` as their raylet (workers and agents)."""
    marker = f"RAY_RAYLET_PID={raylet_pid}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
    return found


def _is_ray(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return b"ray" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


def main(argv: list[str]) -> None:
    raylet_pid, pids = int(argv[0]), [int(p) for p in argv[1:]]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.stdin.buffer.read().strip() == b"done":
        return
    for pid in {*[p for p in [raylet_pid, *pids] if _is_ray(p)], *raylet_processes(raylet_pid)} - {os.getpid()}:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
