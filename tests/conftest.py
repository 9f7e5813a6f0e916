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


@pytest.fixture(autouse=True)
def _machine_share(request):
    """With pytest-xdist (``-n 2``), tests run side by side; a test marked ``serial`` (one that scans the whole
    machine's processes, its Ray processes or its shared memory, starts busy programs or measures speed) runs
    alone: it takes the machine's lock exclusively, every other test shares it. A turnstile lets a waiting serial
    test in before tests that come after it."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # one process: every test runs alone anyway
        yield
        return
    folder = Path(tempfile.gettempdir())
    exclusive = request.node.get_closest_marker("serial") is not None
    with open(folder / f"maze_impala_tests_{run}.turnstile", "a") as turnstile, \
            open(folder / f"maze_impala_tests_{run}.lock", "a") as lock:  # fmt: skip
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
