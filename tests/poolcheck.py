"""A check shared by the backends' tests: adaptive batches lose no rollout, use none twice, and keep the lag bound."""

import random
import time

import numpy as np

START = 180
"""Seconds a test waits for actors to start and deliver (more than the pool's own 120 s start-up deadline): tests
share the machine, and beside two busy programs three Ray actors' first rollouts took 73 s. A wait ends as soon as
they deliver."""


def check_adaptive_batches(pool, weights, policy, num_actors, limit, at_most, updates=60):
    """Collect ``updates`` adaptive batches (1 to ``at_most`` rollouts; more, for up to ``START`` s, until every actor
    delivered) from ``pool`` (CounterEnv actors, started), learning for a random while between them, and check what
    came: every actor's rollouts chain (each starts where its previous one ended: none lost, none twice), batch sizes
    stay in bounds, and the lag is bounded."""
    rng = random.Random(0)
    last_rows, sizes, lags = {}, [], []
    version, deadline = 0, time.monotonic() + START
    while version < updates or (len(last_rows) < num_actors and time.monotonic() < deadline):
        version += 1
        batch = pool.collect(1, at_most=at_most)
        sizes.append(len(batch))
        for rollout in batch:
            obs = rollout.trajectories[0].observations["observation"]
            if rollout.actor_index in last_rows:
                np.testing.assert_array_equal(obs[0], last_rows[rollout.actor_index], err_msg="a rollout lost or twice")
            last_rows[rollout.actor_index] = obs[-1].copy()
            lags.append(version - 1 - rollout.policy_version)
        weights.publish(policy, version)
        time.sleep(rng.choice([0.0, 0.002, 0.02, 0.05]))  # a learner whose updates take longer or shorter
    assert set(last_rows) == set(range(num_actors))
    assert 1 <= min(sizes) and max(sizes) <= at_most
    assert max(sizes) > 1, f"the learner never took more than one ready rollout: {sizes}"
    assert min(lags) >= 0 and np.mean(lags[10:]) <= limit + num_actors
    return sizes
