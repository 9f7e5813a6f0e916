"""``maze-run`` that interrupts itself (SIGINT, as Ctrl-C does) at one stage of a training run:

    python interrupting.py STAGE [maze-run arguments]

STAGE: ``import`` (while the training modules, torch among them, are imported), ``actors`` (before the actors
start), ``update:N`` (at the N-th learner update), ``evaluate:N`` (as the N-th evaluation starts) or
``checkpoint:N`` (in the middle of writing the N-th ``model_last.pt``, after half of its bytes). The test suite runs
it on the installed package, to check what every stage leaves behind and what a resume of it does.
"""

import os
import signal
import sys

from maze_impala import files
from maze_impala.actors.sequential import SequentialActors
from maze_impala.cli import main
from maze_impala.impala.learner import ImpalaLearner


def interrupt():
    os.kill(os.getpid(), signal.SIGINT)  # maze-run's handler raises at once, in this thread


def at_call(function, number, before):
    """``function`` that calls ``before`` on its ``number``-th call."""
    calls = [0]

    def wrapped(*args, **kwargs):
        calls[0] += 1
        if calls[0] == number:
            before(*args, **kwargs)
        return function(*args, **kwargs)

    return wrapped


def half_written_model(path, write):
    """The write of ``path``: half of its bytes, then the interrupt."""
    if path.name != "model_last.pt":
        return original_atomic_write(path, write)

    def torn(file):
        data = bytearray()

        class Sink:
            def write(self, chunk):
                data.extend(chunk)

        write(Sink())
        file.write(bytes(data[: len(data) // 2]))
        file.flush()
        interrupt()

    return original_atomic_write(path, torn)


stage, _, number = sys.argv.pop(1).partition(":")
original_atomic_write = files.atomic_write
if stage == "import":

    class InterruptImport:
        """Ctrl-C in the seconds in which ``maze-run`` imports torch, before any actor starts."""

        def find_spec(self, name, path=None, target=None):
            if name == "maze_impala.train.setup":
                interrupt()
            return None

    for module in [m for m in sys.modules if m == "maze_impala.train.setup"]:
        del sys.modules[module]
    sys.meta_path.insert(0, InterruptImport())
elif stage == "actors":
    SequentialActors.start = at_call(SequentialActors.start, 1, lambda self: interrupt())
elif stage == "update":
    ImpalaLearner.step = at_call(ImpalaLearner.step, int(number), lambda *args: interrupt())
elif stage == "evaluate":
    from maze_impala.evaluate.evaluator import RolloutEvaluator

    RolloutEvaluator.evaluate = at_call(RolloutEvaluator.evaluate, int(number), lambda *args: interrupt())
elif stage == "checkpoint":
    count = [0]

    def atomic_write(path, write):
        count[0] += path.name == "model_last.pt"
        return (half_written_model if count[0] == int(number) else original_atomic_write)(path, write)

    files.atomic_write = atomic_write
else:
    raise SystemExit(f"unknown stage {stage!r}")
main()
