"""The package's child processes, owned one way: actor processes (:mod:`maze_impala.actors.subprocess`) and
learner processes (:mod:`maze_impala.impala.replica_processes`) alike.

A child dies with its parent (:func:`die_with_parent`; it also watches its parent's pid), reports a failure on its
pipe before it exits, and ends fast once its work is done (:func:`run_child`: its output flushed, then
``os._exit``, skipping the interpreter's teardown of torch and the envs' libraries, which frees nothing the end
of the process does not). Its owner stops it with :func:`stop_children` (asked first, killed when it does not end
in time) and says how it ended with :func:`how_it_ended`.

Ray's actors (:mod:`maze_impala.actors.ray_actors`, :mod:`maze_impala.impala.ray_replicas`) are processes that Ray
owns; their owner here says how a call to one ended with :func:`how_a_ray_call_ended` and kills them with
:func:`kill_ray_actors`. Ray is imported only by those two functions.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (elsewhere the parent pid is watched)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def run_child(main: Callable[..., None], *args: Any) -> NoReturn:
    """The target of a child process: ``main(*args)``, then an immediate exit with its code once the output is
    flushed (``main`` reports its own failures; anything it lets through is printed here and exits 1)."""
    code = 0
    try:
        main(*args)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def failure_report(error: BaseException) -> str:
    """What a child sends its owner before it exits on ``error``: the error and its traceback."""
    return f"{type(error).__name__}: {error}\n{traceback.format_exc()}"


def how_it_ended(exitcode: int | None) -> str:
    """How a child process ended, for messages: its exit code, or the signal that killed it."""
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else str(-exitcode)
        killed = ": killed, or out of memory" if -exitcode == signal.SIGKILL else ""
        return f"was killed by signal {name} (exit code {exitcode}{killed})"
    return f"exited with code {exitcode}"


def stop_children(processes: Iterable[Any], timeout_s: float = 5.0) -> None:
    """Wait up to ``timeout_s`` in all for ``processes`` (already asked to stop) to end, then kill those that did
    not; every one is joined on return."""
    processes = list(processes)
    deadline = time.monotonic() + timeout_s
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
        process.join(timeout=1.0)


def how_a_ray_call_ended(error: BaseException) -> tuple[str, bool]:
    """What a failed call to a Ray actor says of the actor: ``died (...)`` (killed, out of memory, lost with its
    node), ``raised <Error>: ...`` (its own code raised), or ``failed (...)`` (another of Ray's errors, such as a
    result lost with its node); and whether its own code raised."""
    import ray

    if isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)):
        return f"died ({_first_line(error)})", False
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = error.cause if error.cause is not None else error
        return f"raised {type(cause).__name__}: {cause}", True
    return f"failed ({type(error).__name__}: {_first_line(error)})", False


def kill_ray_actors(handles: Iterable[Any]) -> None:
    """Kill Ray actors for good (no restart); quietly where Ray is gone already, and with it the actors."""
    import ray

    if not ray.is_initialized():
        return
    for handle in handles:
        with contextlib.suppress(Exception):
            ray.kill(handle, no_restart=True)


def _first_line(error: BaseException) -> str:
    return str(error).strip().partition("\n")[0]
