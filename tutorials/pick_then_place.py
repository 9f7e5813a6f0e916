"""A two-sub-step env written from scratch, trained with maze_impala (see docs/structured_envs.md).

python tutorials/pick_then_place.py               # ~10 s on 2 cores
python tutorials/pick_then_place.py --epochs 1    # a quick look

Sub-step "pick" chooses one of the available items; sub-step "place" must put it into
the slot with the same number, which it can only know from its own observation (the
item that "pick" chose). Only "place" returns a reward; the framework credits "pick"
with it too, so a pick of an unavailable item (reward 0) is learned to be avoided.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

from maze_impala import (
    ActorID,
    ImpalaAlgorithmConfig,
    OutputConfig,
    Player,
    RunnerConfig,
    StructuredEnv,
    load_policy,
    train,
)


class PickThenPlace(StructuredEnv):
    """Ten structured steps per episode; each pays 1 if an available item is picked and placed right."""

    def __init__(self, n_items: int = 4, n_steps: int = 10):
        self.n_items, self.n_steps = n_items, n_steps
        self.rng = np.random.default_rng()
        self.key, self.time, self.picked = "pick", 0, 0
        self.available = np.ones(n_items, dtype=np.int8)

    @property
    def observation_spaces_dict(self) -> dict:
        return {
            "pick": gym.spaces.Dict({"available": gym.spaces.MultiBinary(self.n_items)}),
            "place": gym.spaces.Dict({"item": gym.spaces.Discrete(self.n_items)}),
        }

    @property
    def action_spaces_dict(self) -> dict:
        return {
            "pick": gym.spaces.Dict({"item": gym.spaces.Discrete(self.n_items)}),
            "place": gym.spaces.Dict({"slot": gym.spaces.Discrete(self.n_items)}),
        }

    @property
    def agent_counts_dict(self) -> dict:
        return {"pick": 1, "place": 1}

    def actor_id(self) -> ActorID:
        return ActorID(self.key, 0)

    def get_env_time(self) -> int:
        return self.time

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.key, self.time = "pick", 0
        self._restock()
        return {"available": self.available.copy()}, {}

    def step(self, action: dict) -> tuple[dict, float, bool, bool, dict]:
        if self.key == "pick":
            self.key, self.picked = "place", int(action["item"])
            return {"item": self.picked}, 0.0, False, False, {}
        reward = float(self.available[self.picked] == 1 and int(action["slot"]) == self.picked)
        self.key, self.time = "pick", self.time + 1
        self._restock()
        return {"available": self.available.copy()}, reward, self.time >= self.n_steps, False, {}

    def _restock(self) -> None:
        self.available = (self.rng.random(self.n_items) < 0.5).astype(np.int8)
        self.available[self.rng.integers(self.n_items)] = 1  # at least one item is available


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--output-dir", default="outputs/tutorial_pick_then_place")
    args = parser.parse_args()
    result = train(
        env=PickThenPlace,  # a class (or any callable) that builds the env; recorded as its import path
        algorithm=ImpalaAlgorithmConfig(n_epochs=args.epochs, epoch_length=20),
        runner=RunnerConfig(type="dev"),
        output=OutputConfig(console=False, tensorboard=False),
        seed=1,
        output_dir=args.output_dir,
    )
    returns = result.column("train/EpisodeEvents/episode_return/mean")
    print("training return per epoch (optimum 10):", [round(x, 1) for x in returns])
    policy, env = load_policy(f"{args.output_dir}/model_best.pt")
    obs, _ = env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(Player(policy)(obs, env.actor_id()))
        total, done = total + reward, terminated or truncated
    print(f"one greedy episode with the best policy: return {total:.0f}")


if __name__ == "__main__":
    main()
