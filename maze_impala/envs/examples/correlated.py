"""Structured actions against flat ones: a second sub-action that depends on the first.

:class:`CorrelatedPairsEnv` (in the spirit of RLlib's correlated-actions example): every step shows a random
pairing of ``n`` slots with ``n`` values; the agent picks a slot, then names the value paired with it, and earns 1
when the name is right. Every slot is as good as any other, so which value is right depends on the slot taken.
With probability ``slip`` the env takes another slot than the one picked (an item other than the one asked for).
As two step keys (``pick``, then ``name``, which sees the slot taken) a policy reaches the optimum, one per step.
:class:`FlatCorrelatedPairsEnv` is the same task with one flat ``MultiDiscrete([n, n])`` action: its independent
heads start at chance (``1 / n``) and must agree on a slot without seeing each other's samples, and they can
never know a slip: the best they can do is ``1 - slip + slip / n`` per step.

:class:`ParametrizedActionEnv` (in the spirit of Platform and HFO): every step offers ``n`` action types, some
unavailable, each with a continuous parameter whose best value (a target in [-1, 1]) the observation shows;
the agent chooses an available type, then its parameter, and earns ``1 - |parameter - target| / width`` (at
least 0). As two step keys (``type``, a masked Discrete, then ``parameter``, a Box that sees the type chosen
and its target only) a policy can earn nearly 1 per step. :class:`FlatParametrizedActionEnv` is the same task as
one flat step with independent heads (a type and one parameter for whichever type is drawn).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from maze_impala.core import ActorID, StepKey
from maze_impala.envs.structured import StructuredEnv


class _TwoSubSteps(StructuredEnv):
    """Structured steps of two sub-steps, ``first`` then ``second``, over ``n_steps`` steps per episode; the
    reward comes with the second sub-step and is credited to both (the default crediting)."""

    FIRST: StepKey
    SECOND: StepKey

    def __init__(
        self,
        n_steps: int,
        observation_spaces: dict[StepKey, gym.spaces.Dict],
        action_spaces: dict[StepKey, gym.spaces.Dict],
    ):
        self.n_steps, self._obs_spaces, self._act_spaces = n_steps, observation_spaces, action_spaces
        self.rng = np.random.default_rng()
        self.time, self.key = 0, self.FIRST

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._obs_spaces

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._act_spaces

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        return {self.FIRST: 1, self.SECOND: 1}

    def actor_id(self) -> ActorID:
        return ActorID(self.key, 0)

    def get_env_time(self) -> int:
        return self.time

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.time, self.key = 0, self.FIRST
        self._draw()
        return self._first_obs(), {}

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        if self.key == self.FIRST:
            self._choose(action)
            self.key = self.SECOND
            return self._second_obs(), 0.0, False, False, {}
        reward = self._reward(action)
        self.time, self.key = self.time + 1, self.FIRST
        done = self.time >= self.n_steps
        if not done:
            self._draw()
        return self._first_obs(), reward, done, False, {}

    def _draw(self) -> None:
        raise NotImplementedError

    def _choose(self, action: dict[str, Any]) -> None:
        raise NotImplementedError

    def _reward(self, action: dict[str, Any]) -> float:
        raise NotImplementedError

    def _first_obs(self) -> dict:
        raise NotImplementedError

    def _second_obs(self) -> dict:
        raise NotImplementedError


class CorrelatedPairsEnv(_TwoSubSteps):
    """Pick a slot (``pick``), then name the value paired with it (``name``, which sees the slot): see the module."""

    FIRST: StepKey = "pick"
    SECOND: StepKey = "name"

    def __init__(self, n: int = 4, n_steps: int = 10, slip: float = 0.2):
        if n < 2 or not 0.0 <= slip <= 1.0:
            raise ValueError(f"CorrelatedPairsEnv needs n >= 2 and slip in [0, 1], got {n} and {slip}")
        self.n, self.slip = n, slip
        pairing = gym.spaces.MultiDiscrete([n] * n)
        observations = {
            self.FIRST: gym.spaces.Dict({"pairing": pairing}),
            self.SECOND: gym.spaces.Dict({"pairing": pairing, "slot": gym.spaces.Discrete(n)}),
        }
        actions = {
            self.FIRST: gym.spaces.Dict({"slot": gym.spaces.Discrete(n)}),
            self.SECOND: gym.spaces.Dict({"value": gym.spaces.Discrete(n)}),
        }
        super().__init__(n_steps, observations, actions)
        self.pairing, self.slot = np.arange(n), 0

    def _draw(self) -> None:
        self.pairing = self.rng.permutation(self.n)

    def _choose(self, action: dict[str, Any]) -> None:
        self.slot = int(action["slot"])
        if self.rng.random() < self.slip:  # another slot than the one picked
            self.slot = (self.slot + int(self.rng.integers(1, self.n))) % self.n

    def _reward(self, action: dict[str, Any]) -> float:
        return float(int(action["value"]) == self.pairing[self.slot])

    def _first_obs(self) -> dict:
        return {"pairing": self.pairing.copy()}

    def _second_obs(self) -> dict:
        return {"pairing": self.pairing.copy(), "slot": self.slot}


class FlatCorrelatedPairsEnv(gym.Env):
    """:class:`CorrelatedPairsEnv` with one flat action ``MultiDiscrete([n, n])``: (slot, value) at once."""

    def __init__(self, n: int = 4, n_steps: int = 10, slip: float = 0.2):
        self.inner = CorrelatedPairsEnv(n, n_steps, slip)
        self.observation_space = self.inner.observation_spaces_dict[CorrelatedPairsEnv.FIRST]
        self.action_space = gym.spaces.MultiDiscrete([n, n])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        return self.inner.reset(seed=seed)

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        slot, value = (int(a) for a in action)
        self.inner.step({"slot": slot})
        return self.inner.step({"value": value})


class ParametrizedActionEnv(_TwoSubSteps):
    """Choose an available action type (``type``), then its parameter (``parameter``): see the module."""

    FIRST: StepKey = "type"
    SECOND: StepKey = "parameter"

    def __init__(self, n_types: int = 3, n_steps: int = 10, width: float = 0.25):
        if n_types < 2:
            raise ValueError(f"ParametrizedActionEnv needs n_types >= 2, got {n_types}")
        self.n_types, self.width = n_types, width
        box = gym.spaces.Box(-1.0, 1.0, (n_types,), dtype=np.float32)
        observations = {
            self.FIRST: gym.spaces.Dict({"targets": box, "type_mask": gym.spaces.MultiBinary(n_types)}),
            self.SECOND: gym.spaces.Dict(
                {
                    "type": gym.spaces.Discrete(n_types),
                    "target": gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32),
                }
            ),
        }
        actions = {
            self.FIRST: gym.spaces.Dict({"type": gym.spaces.Discrete(n_types)}),
            self.SECOND: gym.spaces.Dict({"parameter": gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)}),
        }
        super().__init__(n_steps, observations, actions)
        self.targets = np.zeros(n_types, dtype=np.float32)
        self.available = np.ones(n_types, dtype=np.int8)
        self.chosen = 0

    def _draw(self) -> None:
        self.targets = self.rng.uniform(-1.0, 1.0, self.n_types).astype(np.float32)
        self.available = (self.rng.random(self.n_types) < 0.7).astype(np.int8)
        self.available[self.rng.integers(self.n_types)] = 1  # at least one type

    def _choose(self, action: dict[str, Any]) -> None:
        self.chosen = int(action["type"])

    def _reward(self, action: dict[str, Any]) -> float:
        if not self.available[self.chosen]:
            return 0.0
        error = abs(float(np.clip(np.asarray(action["parameter"]).reshape(-1)[0], -1, 1)) - self.targets[self.chosen])
        return max(0.0, 1.0 - error / self.width)

    def _first_obs(self) -> dict:
        return {"targets": self.targets.copy(), "type_mask": self.available.copy()}

    def _second_obs(self) -> dict:
        return {"type": self.chosen, "target": self.targets[self.chosen : self.chosen + 1].copy()}


class FlatParametrizedActionEnv(gym.Env):
    """:class:`ParametrizedActionEnv` in one flat step: a Dict action of a type and one parameter, drawn by
    independent heads (the parameter head cannot see which type is drawn)."""

    def __init__(self, n_types: int = 3, n_steps: int = 10, width: float = 0.25):
        self.inner = ParametrizedActionEnv(n_types, n_steps, width)
        first = self.inner.observation_spaces_dict[ParametrizedActionEnv.FIRST]
        self.observation_space = gym.spaces.Dict(first.spaces)
        self.action_space = gym.spaces.Dict(
            {
                "type": gym.spaces.Discrete(n_types),
                "parameter": gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32),
            }
        )

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        return self.inner.reset(seed=seed)

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        self.inner.step({"type": action["type"]})
        return self.inner.step({"parameter": action["parameter"]})
