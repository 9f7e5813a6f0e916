"""sb3-contrib's RecurrentPPO on the velocity-free CartPole: the reference beside ``learning.py``'s stateless row.

    pip install -c constraints/cpu.txt sb3-contrib        # not a dependency of maze_impala
    python benchmarks/recurrent_ppo.py --seeds 1 --budget 1000000 --settings zoo default

It trains RecurrentPPO on :class:`maze_impala.envs.examples.StatelessCartPole`, the env of
``python benchmarks/learning.py --envs stateless-cartpole-lstm``, for ``--budget`` env steps, on one thread as
each of our learner's, with

* ``zoo``: the RL Zoo's tuned hyperparameters for CartPoleNoVel-v1 (``ppo_lstm.yml``: 8 envs, 32 steps, batches
  of 256, 20 epochs, lr and clip range 1e-3 and 0.2 annealed linearly, gamma 0.98, GAE lambda 0.8, a 64-unit
  LSTM for the actor and one for the critic, observations normalised);
* ``default``: sb3-contrib's defaults (``RecurrentPPO("MlpLstmPolicy", env)``, one env).

Every ``--eval-every`` env steps it plays ``--eval-episodes`` greedy episodes, and it reports the env steps and
seconds (from the start of training, evaluations excluded) to the first greedy evaluation of 475 and of 500,
and the last training return; a run stops once it has evaluated at 500.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def run(settings: str, seed: int, budget: int, eval_every: int, eval_episodes: int) -> dict:
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    from torch import nn

    from maze_impala.envs.examples import StatelessCartPole

    torch.set_num_threads(1)
    if settings == "zoo":
        env = VecNormalize(make_vec_env(StatelessCartPole, n_envs=8, seed=seed), norm_obs=True, norm_reward=False)
        linear = lambda start: lambda progress: progress * start  # noqa: E731  (the Zoo's lin_ schedules)
        model = RecurrentPPO(
            "MlpLstmPolicy",
            env,
            n_steps=32,
            batch_size=256,
            n_epochs=20,
            gamma=0.98,
            gae_lambda=0.8,
            ent_coef=0.0,
            learning_rate=linear(1e-3),
            clip_range=linear(0.2),
            seed=seed,
            verbose=0,
            policy_kwargs=dict(
                ortho_init=False,
                activation_fn=nn.ReLU,
                lstm_hidden_size=64,
                enable_critic_lstm=True,
                net_arch=dict(pi=[64], vf=[64]),
            ),
        )
    else:
        env = make_vec_env(StatelessCartPole, n_envs=1, seed=seed)
        model = RecurrentPPO("MlpLstmPolicy", env, seed=seed, verbose=0)
    evaluation = StatelessCartPole()

    def greedy_return() -> float:
        returns = []
        for episode in range(eval_episodes):
            obs, _ = evaluation.reset(seed=10_000 + episode)
            state, start, total, done = None, np.ones((1,), dtype=bool), 0.0, False
            while not done:
                normalised = env.normalize_obs(obs[None]) if settings == "zoo" else obs[None]
                action, state = model.predict(normalised, state=state, episode_start=start, deterministic=True)
                obs, reward, terminated, truncated, _ = evaluation.step(int(action[0]))
                total, done, start = total + float(reward), terminated or truncated, np.zeros((1,), dtype=bool)
            returns.append(total)
        return float(np.mean(returns))

    result: dict = {"settings": settings, "seed": seed, "evaluations": []}
    for threshold in (475, 500):
        result[f"steps_to_{threshold}"] = result[f"seconds_to_{threshold}"] = None

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next, self.training_seconds, self.lap = eval_every, 0.0, time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next:
                return True
            self.training_seconds += time.perf_counter() - self.lap
            self.next += eval_every
            score = greedy_return()
            result["evaluations"].append((self.num_timesteps, round(self.training_seconds, 1), score))
            print(
                f"  {settings} seed {seed}: {self.num_timesteps:,} env steps, {self.training_seconds:.0f} s, "
                f"greedy {score:.1f}",
                flush=True,
            )
            for threshold in (475, 500):
                if score >= threshold and result[f"steps_to_{threshold}"] is None:
                    result[f"steps_to_{threshold}"] = self.num_timesteps
                    result[f"seconds_to_{threshold}"] = round(self.training_seconds, 1)
            self.lap = time.perf_counter()
            return result["steps_to_500"] is None  # stop once solved

    model.learn(total_timesteps=budget, callback=Evaluate())
    buffer = [info["r"] for info in model.ep_info_buffer]
    result["last_training_return"] = float(np.mean(buffer)) if buffer else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=["zoo", "default"], choices=["zoo", "default"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--budget", type=int, default=1_000_000)
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--eval-episodes", type=int, default=8)
    args = parser.parse_args()
    for settings in args.settings:
        for seed in args.seeds:
            print(json.dumps(run(settings, seed, args.budget, args.eval_every, args.eval_episodes)), flush=True)


if __name__ == "__main__":
    main()
