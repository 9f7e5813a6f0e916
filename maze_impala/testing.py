"""Small deterministic environments for tests; importable by spawned actor processes."""

from __future__ import annotations

import os
import signal
from typing import Any

import gymnasium as gym
import numpy as np


class CounterEnv(gym.Env):
    """Observation = [step count, episode id]; reward = 1 + action; truncated after ``limit`` steps.

    Everything is a known function of the step count, so tests can check exactly what
    actors record: observations, overlap between rollouts, rewards and truncation.
    """

    def __init__(self, limit: int = 5, terminate_at: int | None = None):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.limit, self.terminate_at = limit, terminate_at
        self.t, self.episode = 0, -1

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.episode], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.episode = 0, self.episode + 1
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        truncated = not terminated and self.t >= self.limit
        return self._obs(), 1.0 + float(action), terminated, truncated, {}


class CrashingEnv(CounterEnv):
    """Raises in ``step`` after ``crash_after`` steps: an actor that fails with an exception."""

    def __init__(self, crash_after: int = 50):
        super().__init__(limit=10)
        self.crash_after, self.steps = crash_after, 0

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps > self.crash_after:
            raise RuntimeError("CrashingEnv: simulated failure in env.step")
        return super().step(action)


class DyingEnv(CrashingEnv):
    """Kills its own process with SIGKILL after ``crash_after`` steps: an actor that dies silently."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps > self.crash_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return CounterEnv.step(self, action)
