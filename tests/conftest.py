import fcntl
import os
import tempfile
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


class _MachineShare:
    """With pytest-xdist (``-n 2``), tests run side by side; a test marked ``serial`` (one that scans the whole
    machine's processes or its shared memory, starts busy programs or measures speed) runs alone: it takes the
    machine's lock exclusively, every other test shares it. A turnstile lets a waiting serial test in before tests
    that come after it. Serial tests that follow each other in one process keep the lock between them: run as a
    block, they wait for the others once. The Ray tests share the machine: they run in one worker
    (``xdist_group("ray")``), so one Ray runs at a time, and their scans look for Ray's own processes only. A
    module's Ray starts and stops inside its tests' shared hold, never while a serial test scans."""

    def __init__(self, run: str) -> None:
        folder = Path(tempfile.gettempdir())
        self.turnstile = open(folder / f"maze_impala_tests_{run}.turnstile", "a")  # held all run
        self.lock = open(folder / f"maze_impala_tests_{run}.lock", "a")
        self.held: bool | None = None  # None: not held; True: exclusively; False: shared

    def enter(self, exclusive: bool) -> None:
        if self.held is not None:
            if self.held == exclusive:
                return
            self.leave()
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        fcntl.flock(self.lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        self.held = exclusive

    def leave(self) -> None:
        if self.held is not None:
            fcntl.flock(self.lock, fcntl.LOCK_UN)
            self.held = None


_SHARE = _MachineShare(os.environ["PYTEST_XDIST_TESTRUNUID"]) if "PYTEST_XDIST_TESTRUNUID" in os.environ else None
_ALONE_THREADS = torch.get_num_threads()
"""torch's own thread count, kept for the tests that run alone. A test that shares the machine computes in-process on
one thread: torch's threads wait for each other at every operation, and beside another busy process one of them is
often off its core, so a test of small operations ran 10-40 times slower on two threads than on one (a learner
test of a small LSTM: 11-14 s against 0.3-1.4 s). What a test's run or learner sets for itself (the trainer's thread
rule, runner=dev's one thread, actor processes) is unchanged."""


def _serial(item) -> bool:
    return item.get_closest_marker("serial") is not None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if _SHARE is not None:  # one process: every test runs alone anyway
        alone = _serial(item)
        _SHARE.enter(alone)
        torch.set_num_threads(_ALONE_THREADS if alone else 1)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if _SHARE is not None and not (_SHARE.held and nextitem is not None and _serial(nextitem)):
        _SHARE.leave()
