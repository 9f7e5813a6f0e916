"""The actor process: build the actor, then produce rollouts into the slots the learner grants, until told to stop.

It talks to the learner through one duplex pipe of its own: the learner sends a slot
number (permission to deliver one rollout into that shared-memory slot), the actor
answers ``("slot", n)`` once the rollout is in it, ``("inline", rollout)`` for one too
large for a slot, or ``("error", text)`` before it exits on a failure. No lock, queue or
semaphore is shared with other processes: an actor killed at any moment can damage only
its own pipe, which the learner then discards with the process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import warnings
from typing import Any

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.transport import RolloutSlots
from maze_impala.children import die_with_parent, failure_report, run_child
from maze_impala.core import WeightSource
from maze_impala.startup import enter_process

POLL_SECONDS = 0.1
"""How often a waiting actor looks at the stop flag and at its parent."""


def actor_main(
    spec: ActorSpec,
    index: int,
    weights: WeightSource,
    slots: RolloutSlots,
    conn: Any,
    stop: Any,
    parent: int,
) -> None:
    """Entry point of an actor process (``spec.seed`` already includes its restart count); ``stop``: a shared int32
    array, nonzero once the learner stops the actors. An actor whose policy acts in numpy never imports torch."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle; it stops us.
    stopping = lambda: bool(stop[0]) or os.getppid() != parent  # noqa: E731
    actor, warned = None, False
    try:
        actor = spec.build(index, weights)
        enter_process(1)  # a policy that acts through torch: one core per actor, as for numpy's BLAS
        while not stopping():
            slot = _wait_for_grant(conn, stopping)  # before the rollout: it starts with the newest weights
            if slot is None:
                return
            rollout = actor.rollout()
            if slots.write(slot, rollout):
                conn.send(("slot", slot))
                continue
            conn.send(("inline", slot, rollout))
            if not warned:
                warnings.warn(
                    f"actor {index}: a rollout exceeds the shared-memory slot size ({slots.slot_bytes} "
                    "bytes) and travels pickled",
                    stacklevel=1,
                )
                warned = True
    except (BrokenPipeError, EOFError, ConnectionResetError):
        return  # the learner closed our pipe: it is stopping or replacing us
    except BaseException as error:  # report every failure, then exit non-zero
        with contextlib.suppress(OSError):
            conn.send(("error", failure_report(error)))
        raise SystemExit(1) from None
    finally:
        if actor is not None:
            actor.close()


def actor_process(*args: Any) -> None:
    """The target of an actor process: :func:`actor_main`, then a fast exit with its code
    (:func:`~maze_impala.children.run_child`): the interpreter's own teardown would take the learner's stop about
    half a second per actor, and frees nothing the process does not free by ending (its shared memory is the
    learner's, mapped anonymously)."""
    run_child(actor_main, *args)


def _wait_for_grant(conn: Any, stopping: Any) -> int | None:
    while not conn.poll(POLL_SECONDS):
        if stopping():
            return None
    return int(conn.recv())
