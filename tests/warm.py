"""A warm start for the suite's commands: ``maze-run`` and the docs' scripts run in a child forked from a server
that has imported torch, Hydra, the envs' libraries and the installed package once (tests/warm_server.py).

A command gets its own process, arguments, directory, environment and streams, and ends as a fresh interpreter
would (threads joined, exit hooks run), so what it does is what ``python -m maze_impala ...`` does; only the
imports, 2-3 s of every command on the 2-core machine, are paid once per test process. The tests that need the
process itself (start-up time, ``sys.modules``, signals, a process's children) start a real one.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

SERVER = Path(__file__).with_name("warm_server.py")
PRELOAD = [
    "torch",
    "hydra",
    "omegaconf",
    "pandas",
    "gymnasium",
    "pettingzoo",
    "pettingzoo.classic",
    "maze_impala.cli",
    "maze_impala.train.setup",
    "maze_impala.report.plots",
    "maze_impala.api",
    "torch.utils.tensorboard",
    "matplotlib.pyplot",
]
"""What every command imports, and the larger imports of a few (pettingzoo's games, the plots)."""


class WarmStarter:
    """The server of one test process, started at its first command and ended with the test process."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="maze_warm_")
        self._server: subprocess.Popen | None = None

    def _started(self) -> subprocess.Popen:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen(
                [sys.executable, str(SERVER)],
                cwd=self._dir.name,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            self._send(PRELOAD)
            self._receive("ready")
        return self._server

    def _send(self, message) -> None:
        self._server.stdin.write(json.dumps(message) + "\n")
        self._server.stdin.flush()

    def _receive(self, key: str):
        line = self._server.stdout.readline()
        if not line:
            raise RuntimeError(f"the warm starter's server ended (exit code {self._server.wait()})")
        return json.loads(line)[key]

    def run(self, target: str, argv, cwd, kind: str = "module", env=None, timeout: float = 300):
        """``python -m target *argv`` (or ``python target *argv``, kind "script") in ``cwd``, its output captured:
        a ``subprocess.CompletedProcess``, or ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        self._started()
        out, err = (Path(self._dir.name) / name for name in ("out", "err"))
        argv = [str(a) for a in argv]
        self._send(
            {
                "target": target,
                "kind": kind,
                "argv": argv,
                "cwd": str(Path(cwd).resolve()),
                "env": dict(os.environ if env is None else env),
                "out": str(out),
                "err": str(err),
            }
        )
        pid = self._receive("pid")
        waiter = _Deadline(pid, timeout)
        try:
            code = self._receive("code")
        finally:
            waiter.cancel()
        stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        if waiter.fired:
            raise subprocess.TimeoutExpired([target, *argv], timeout, stdout, stderr)
        return subprocess.CompletedProcess([target, *argv], code, stdout, stderr)

    def close(self) -> None:
        if self._server is not None:
            self._server.stdin.close()
            try:
                self._server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._server.kill()
        self._dir.cleanup()


class _Deadline:
    """Kills the command's process when its time is up (the server then answers with its code)."""

    def __init__(self, pid: int, timeout: float) -> None:
        import threading

        self.fired = False
        self._pid = pid
        self._timer = threading.Timer(timeout, self._kill)
        self._timer.daemon = True
        self._timer.start()

    def _kill(self) -> None:
        self.fired = True
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def cancel(self) -> None:
        self._timer.cancel()


_STARTER: WarmStarter | None = None


def starter() -> WarmStarter:
    """This test process's warm starter."""
    global _STARTER
    if _STARTER is None:
        import atexit

        _STARTER = WarmStarter()
        atexit.register(_STARTER.close)
    return _STARTER
