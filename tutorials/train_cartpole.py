"""Train IMPALA on CartPole-v1 from Python, with the same components that `maze-run` wires.

python tutorials/train_cartpole.py              # 24 epochs of the shipped defaults: about 90 s on 2 cores
python tutorials/train_cartpole.py --epochs 2   # a quick look
"""

import argparse

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, OutputConfig, Player, RunnerConfig, load_policy, train


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=24)
    parser.add_argument("--output-dir", default="outputs/tutorial_cartpole")
    args = parser.parse_args()

    # 1. Train: 2 actor processes, 32 envs each, V-trace learner; stats and models go to output_dir.
    result = train(
        env="CartPole-v1",  # any Gymnasium id, a StructuredEnv factory, or a Hydra-style config
        algorithm=ImpalaAlgorithmConfig(n_epochs=args.epochs),
        model=ModelConfig(hidden_units=[64, 64]),
        runner=RunnerConfig(type="local"),
        output=OutputConfig(tensorboard=False),
        seed=1,
        output_dir=args.output_dir,
    )
    print(f"trained {result.env_steps:,} env steps; best evaluation return {result.best_eval_return:.1f}")
    print(
        "training return per epoch:",
        [round(x) for x in result.column("train/EpisodeEvents/episode_return/mean")],
    )

    # 2. Use the best policy: one action for one observation.
    policy, env = load_policy(f"{args.output_dir}/model_best.pt")
    obs, _ = env.reset(seed=0)
    episode_return, done = 0.0, False
    while not done:
        action = Player(policy)(obs, env.actor_id())
        obs, reward, terminated, truncated, _ = env.step(action)
        episode_return += reward
        done = terminated or truncated
    print(f"one greedy episode with the best policy: return {episode_return:.0f}")


if __name__ == "__main__":
    main()
