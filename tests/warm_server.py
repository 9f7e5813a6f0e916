"""The warm starter's server (tests/warm.py): imports the installed package's heavy modules once, then forks a
child for each command it is sent, in which the command runs as in a fresh ``python`` process.

Protocol, one JSON object a line: the first line on stdin is the list of modules to import; then each request
is ``{"target", "kind", "argv", "cwd", "env", "out", "err"}`` and is answered with ``{"pid"}`` once forked and
``{"code"}`` when the child has ended (its exit code, or minus the signal that ended it, as ``subprocess``).
The server never runs a torch operation, so that no thread pool exists when it forks, and it ends when its
client does: at the end of its stdin, or by the parent-death signal if the client is killed.
"""

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import runpy
import signal
import sys
import threading
import traceback
import types

PR_SET_PDEATHSIG = 1


def _exit_code(exit_: SystemExit) -> int:
    """The code with which the interpreter would end for an uncaught ``SystemExit``."""
    if exit_.code is None:
        return 0
    if isinstance(exit_.code, int):
        return exit_.code
    print(exit_.code, file=sys.stderr)
    return 1


def _run(request: dict) -> int:
    """The command, as ``python -m target`` (kind "module") or ``python target`` (kind "script") would run it."""
    if request["kind"] == "module":
        sys.argv = [request["target"], *request["argv"]]
        sys.path[0] = request["cwd"]
        runpy.run_module(request["target"], run_name="__main__", alter_sys=True)
    else:
        script = os.path.join(request["cwd"], request["target"])  # a script's __file__ is absolute (Python 3.9+)
        sys.argv = [request["target"], *request["argv"]]
        sys.path[0] = os.path.dirname(script)
        runpy.run_path(script, run_name="__main__")
    return 0


def _child(request: dict) -> None:
    """In the forked child: the command's streams, directory and environment, the command, and the interpreter's
    own exit (threads joined, exit hooks run, streams flushed)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, 0)  # a command outlives its server, as a process outlives a shell
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, request["out"]), (2, request["err"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    os.chdir(request["cwd"])
    if "multiprocessing.process" in sys.modules:  # where spawned processes find a relative main script
        sys.modules["multiprocessing.process"].ORIGINAL_DIR = request["cwd"]
    os.environ.clear()
    os.environ.update(request["env"])
    sys.modules["__main__"] = types.ModuleType("__main__")  # spawned actors re-import no main module of ours
    importlib.invalidate_caches()
    try:
        code = _run(request)
    except SystemExit as exit_:
        code = _exit_code(exit_)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # what the interpreter does at its end, before the exit hooks
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C of the suite reaches the commands; the client ends us
    replies = os.fdopen(os.dup(1), "w")  # the answers' own descriptor: what an import prints goes to stderr
    os.dup2(2, 1)

    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    for name in json.loads(sys.stdin.readline()):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    reply({"ready": threading.active_count()})
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            replies.close()  # the command and its children do not hold the answers' pipe open
            _child(request)
        reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        reply({"code": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
