"""An image task small enough to learn on a CPU in a minute: reach a goal on a grid seen only as pixels."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class PixelGoalEnv(gym.Env):
    """An agent and a goal on a ``size`` x ``size`` grid, observed as a uint8 image: channel 0 shows the agent,
    channel 1 the goal (255 where they are, 0 elsewhere), channel 2 the walls around the grid's border.

    Actions: up, down, left, right (a move into a wall does nothing). Reaching the goal ends the episode with reward
    ``1 - 0.9 * steps / max_steps`` (MiniGrid's reward); after ``max_steps`` (default ``4 * size``) it is cut off
    with 0. The optimum averages 0.90 on the default 6x6 grid (4x4 free cells), a random policy 0.35.

    ``cell_pixels``: each cell is that many pixels wide and high in the observation (the same task as a larger image:
    ``size * cell_pixels`` square; the benchmarks choose ``model.image_encoder=auto``'s rule with it).
    ``channels_first`` gives CHW images instead of HWC; ``dict_observation`` a Dict with the image under ``"map"``,
    the share of steps left under ``"time"`` and the moves that do not run into a wall under ``"action_mask"`` (an
    image among other keys, as a logistics env's map would be, and an action mask).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}
    MOVES = np.array([(-1, 0), (1, 0), (0, -1), (0, 1)])

    def __init__(
        self,
        size: int = 6,
        max_steps: int | None = None,
        channels_first: bool = False,
        dict_observation: bool = False,
        render_mode: str | None = None,
        cell_pixels: int = 1,
    ):
        if size < 4:
            raise ValueError(f"PixelGoalEnv needs size >= 4 (a border and at least 2x2 free cells), got {size}")
        if cell_pixels < 1:
            raise ValueError(f"PixelGoalEnv needs cell_pixels >= 1, got {cell_pixels}")
        self.size, self.max_steps, self.cell_pixels = size, max_steps or 4 * size, cell_pixels
        self.channels_first, self.dict_observation, self.render_mode = channels_first, dict_observation, render_mode
        side = size * cell_pixels
        shape = (3, side, side) if channels_first else (side, side, 3)
        image = gym.spaces.Box(0, 255, shape, dtype=np.uint8)
        time = gym.spaces.Box(0.0, 1.0, (1,), dtype=np.float32)
        mask = gym.spaces.MultiBinary(4)
        self.observation_space = (
            gym.spaces.Dict({"map": image, "time": time, "action_mask": mask}) if dict_observation else image
        )
        self.action_space = gym.spaces.Discrete(4)
        self._agent = self._goal = np.zeros(2, dtype=np.int64)
        self._steps = 0

    def _image(self) -> np.ndarray:
        image = np.zeros((self.size, self.size, 3), dtype=np.uint8)
        image[[0, -1], :, 2] = image[:, [0, -1], 2] = 255
        image[self._agent[0], self._agent[1], 0] = 255
        image[self._goal[0], self._goal[1], 1] = 255
        return image

    def _obs(self) -> Any:
        image = self._image()
        if self.cell_pixels > 1:
            image = np.repeat(np.repeat(image, self.cell_pixels, axis=0), self.cell_pixels, axis=1)
        if self.channels_first:
            image = np.ascontiguousarray(image.transpose(2, 0, 1))
        if not self.dict_observation:
            return image
        inside = (self._agent + self.MOVES >= 1) & (self._agent + self.MOVES <= self.size - 2)
        return {
            "map": image,
            "time": np.array([1.0 - self._steps / self.max_steps], dtype=np.float32),
            "action_mask": inside.all(axis=1).astype(np.int8),
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        free = self.size - 2
        cells = self.np_random.choice(free * free, size=2, replace=False)
        self._agent, self._goal = (np.array(divmod(int(c), free)) + 1 for c in cells)
        self._steps = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._agent = np.clip(self._agent + self.MOVES[int(action)], 1, self.size - 2)
        self._steps += 1
        reached = bool((self._agent == self._goal).all())
        reward = 1.0 - 0.9 * self._steps / self.max_steps if reached else 0.0
        return self._obs(), reward, reached, not reached and self._steps >= self.max_steps, {}

    def render(self) -> np.ndarray:
        """The grid as an RGB frame, 16 pixels per cell."""
        return np.repeat(np.repeat(self._image(), 16, axis=0), 16, axis=1)
