"""The learner alone on one fixed batch: how fast this machine is at the moment of a benchmark.

On a shared machine the same run takes up to twice as long at one moment as at another. A benchmark that prints
``calibration_ms`` beside its table lets tables taken at different moments be compared: seconds scale
with the learner's ms per update, env steps do not.

    python benchmarks/calibration.py                # CartPole-v1, the shipped settings, one thread
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig


class Collector:
    """The rollouts of an actor of the seeded policy (:func:`learner_and_batch`'s, or ``policy``), collected as they
    are asked for: the first ``n`` are the batch that a fresh collection of ``n`` gives, so batches of several sizes
    share them."""

    def __init__(self, env_id: str | dict, algorithm: ImpalaAlgorithmConfig, model: ModelConfig, policy: Any = None):
        import torch

        from maze_impala.actors.actor import ActorSpec
        from maze_impala.actors.weights import SharedWeights
        from maze_impala.envs.factory import make_env
        from maze_impala.nn.models import make_policy
        from maze_impala.play.lineup import Lineup

        if policy is None:
            torch.manual_seed(0)
            policy = make_policy(make_env(env_id), model)
        spec = ActorSpec(env_id, Lineup.of(model), algorithm.n_rollout_steps, algorithm.envs_per_actor, seed=0)
        self.actor = spec.build(0, SharedWeights(policy))  # the weights as they are now: updates do not reach it
        self.rollouts: list[Any] = []

    def take(self, n: int) -> list[Any]:
        """The first ``n`` rollouts, collecting those not collected yet."""
        while len(self.rollouts) < n:
            self.rollouts.append(self.actor.rollout())
        return self.rollouts[:n]


def learner_and_batch(
    env_id: str = "CartPole-v1",
    algorithm: ImpalaAlgorithmConfig | None = None,
    model: ModelConfig | None = None,
    batch_size: int | None = None,
    collector: Collector | None = None,
) -> tuple[Any, list[Any]]:
    """The learner of ``algorithm`` and ``model`` (default the shipped ones) for ``env_id``, seeded, and one batch of
    ``batch_size`` rollouts (default ``algorithm.actors_batch_size``) that its policy collected (``collector``'s,
    one for the same env, model and rollout sizes, whose batches are the same; default a collector of its own)."""
    import torch  # here, not at the top: the actor processes of a benchmark re-import its script

    from maze_impala.envs.factory import make_env
    from maze_impala.events.api import EventHub
    from maze_impala.impala.events import MultiStepIMPALAEvents
    from maze_impala.impala.learner import ImpalaLearner
    from maze_impala.nn.critics import make_critic
    from maze_impala.nn.models import make_policy
    from maze_impala.startup import fast_cuda_math

    algorithm = algorithm or ImpalaAlgorithmConfig()
    model = model or ModelConfig()
    env = make_env(env_id)
    torch.manual_seed(0)
    policy = make_policy(env, model)
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    batch = (collector or Collector(env_id, algorithm, model, policy)).take(batch_size or algorithm.actors_batch_size)
    fast_cuda_math(algorithm.device)  # as a run's set-up does for a CUDA learner
    return ImpalaLearner(policy, critic, algorithm, EventHub().publisher(MultiStepIMPALAEvents)), batch


def learner_updates_per_second(
    env_id: str = "CartPole-v1",
    algorithm: ImpalaAlgorithmConfig | None = None,
    model: ModelConfig | None = None,
    *,
    batch_size: int | None = None,
    seconds: float = 3.0,
    threads: int | None = 1,
) -> tuple[float, int]:
    """Updates per second of the learner (``algorithm``, ``model``: default the shipped ones) on one fixed batch of
    ``batch_size`` rollouts (default ``algorithm.actors_batch_size``) of ``env_id``, and the env steps in that batch.
    ``threads``: torch's CPU threads during the measurement (None: torch's setting); the caller's is restored."""
    import torch  # here, not at the top: the actor processes of a benchmark re-import its script

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        learner, batch = learner_and_batch(env_id, algorithm, model, batch_size)
        for _ in range(3):  # warm-up: allocations, the optimizer's state
            learner.step(batch)
        updates, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            learner.step(batch)
            updates += 1
        return updates / (time.perf_counter() - started), sum(r.env_steps for r in batch)
    finally:
        torch.set_num_threads(before)


def calibration_ms(seconds: float = 3.0) -> float:
    """The calibration: the shipped learner's ms per update on its CartPole batch, on one thread."""
    return 1000 / learner_updates_per_second(seconds=seconds)[0]


def describe(ms_per_update: Sequence[float]) -> str:
    """One line for a benchmark's output: the calibration taken before and after its runs."""
    figures = " and ".join(f"{ms:.1f}" for ms in ms_per_update)
    return (
        f"calibration: the learner took {figures} ms per update (before and after the runs; CartPole-v1, the "
        "shipped batch, 1 thread): seconds compare between tables in proportion to it"
    )


if __name__ == "__main__":
    rate, samples = learner_updates_per_second()
    print(f"{1000 / rate:.1f} ms per update ({rate:.1f} updates/s, {samples} env steps per batch)")
