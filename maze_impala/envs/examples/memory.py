"""Memory tasks: a cue shown once must be recalled later, and CartPole with parts of its state hidden or mis-scaled.

:class:`MemoryEnv` needs a memory and nothing else: a policy without one stays at chance, a recurrent policy
(``model.recurrent=lstm``) can reach the optimum. :class:`StatelessCartPole` hides CartPole's velocities (RLlib's
StatelessCartPole): a policy must infer them from successive positions. :class:`ScaledCartPole` multiplies
CartPole's observations by factors from 1e-3 to 1e3 and adds offsets: what ``model.normalize_observations`` is for.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class MemoryEnv(gym.Env):
    """The cue (one of ``n_cues``) is shown at the first step only; at the last of ``length`` steps the agent is
    asked for it and earns 1 for naming it, 0 otherwise (its other actions do nothing).

    Observation: ``n_cues + 1`` values, the cue one-hot at step 0, zeros in between, and a last entry that is 1 at
    the query step. The optimum return is 1; without memory the best is chance, ``1 / n_cues``.
    """

    def __init__(self, n_cues: int = 4, length: int = 10):
        if n_cues < 2 or length < 2:
            raise ValueError(f"MemoryEnv needs n_cues >= 2 and length >= 2, got {n_cues} and {length}")
        self.n_cues, self.length = n_cues, length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (n_cues + 1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(n_cues)
        self._t, self._cue = 0, 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.n_cues + 1, dtype=np.float32)
        if self._t == 0:
            obs[self._cue] = 1.0
        if self._t == self.length - 1:
            obs[-1] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t, self._cue = 0, int(self.np_random.integers(self.n_cues))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        query = self._t == self.length - 1
        reward = float(query and int(action) == self._cue)
        self._t += 1
        return self._obs() if not query else np.zeros(self.n_cues + 1, dtype=np.float32), reward, query, False, {}


class StatelessCartPole(gym.ObservationWrapper):
    """CartPole-v1 observing the cart's position and the pole's angle only (no velocities)."""

    KEPT = [0, 2]

    def __init__(self, **kwargs: Any):
        super().__init__(gym.make("CartPole-v1", **kwargs))
        space = self.env.observation_space
        self.observation_space = gym.spaces.Box(space.low[self.KEPT], space.high[self.KEPT], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.KEPT]


class ScaledCartPole(gym.ObservationWrapper):
    """CartPole-v1 with badly scaled observations: ``x * scale + offset``, scales from 1e-3 to 1e3."""

    SCALE = np.array([1e3, 1e-3, 1e2, 1e-2], dtype=np.float32)
    OFFSET = np.array([10.0, -2.0, 50.0, 1.0], dtype=np.float32)

    def __init__(self, **kwargs: Any):
        super().__init__(gym.make("CartPole-v1", **kwargs))
        space = self.env.observation_space
        low, high = space.low * self.SCALE + self.OFFSET, space.high * self.SCALE + self.OFFSET
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (observation * self.SCALE + self.OFFSET).astype(np.float32)
