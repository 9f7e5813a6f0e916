"""Learning tests: IMPALA trains to a reward threshold within a fixed budget of environment steps."""

import ast
import contextlib
import runpy
import sys
from pathlib import Path

import pytest
from columns import EVAL, RETURN, STEPS
from tiny import QUIET

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, OutputConfig, RunnerConfig, TrainingConfig, train
from maze_impala.config.workloads import shipped_env, shipped_model, shipped_runner
from maze_impala.events.writers import StatsWriter
from maze_impala.train.setup import build_trainer

pytestmark = pytest.mark.slow
MEMORY = {"_target_": "maze_impala.envs.examples.MemoryEnv"}
EPOCH = 10
"""Updates an epoch of :func:`_train`'s runs: a run can stop after any epoch."""


def _example(name):
    return {"_target_": f"maze_impala.envs.examples.{name}"}


def test_cartpole_with_subprocess_actors_reaches_475_and_holds_it(tmp_path):
    # The shipped settings over 300 updates (a quarter of the shipped 1,200: the suite's time; the learning rate
    # anneals to 0 over them) in epochs of 10, so that a relapse shows in the per-epoch returns. Subprocess actors
    # reach 475 at a median of 40,960 env steps (benchmarks/learning.py, seeds 5-12; 61,440 at most), so the 200,000
    # steps after it lie inside the run. With the shipped 64 optimizer steps a batch, a solved CartPole dips once
    # in about one run of six (to 292-349, back at 500 within 3 epochs; docs/benchmarks.md), so the window checks
    # for a collapse (the IMPALA loss's fall onto one action, which did not come back), not for a dip.
    algorithm = ImpalaAlgorithmConfig(epoch_length=10, n_epochs=30)
    assert algorithm.total_env_steps == 307_200, "the budget this test allows"
    result = train(
        "CartPole-v1",
        algorithm,
        runner=RunnerConfig(type="local"),
        output=OutputConfig(tensorboard=False, console=False, progress=False, plot=False),
        seed=1,
        output_dir=tmp_path,
    )
    returns, steps = result.column(RETURN), result.column(STEPS)
    shown = [round(r) if r == r else r for r in returns]  # NaN: no episode ended in that epoch (all long)
    assert result.env_steps <= algorithm.total_env_steps
    first = next((i for i, r in enumerate(returns) if r >= 475), None)
    assert first is not None, f"never reached 475; mean training return per epoch: {shown}"
    assert result.column(EVAL)[-1] >= 475, "the final policy, not only model_best.pt, must hold the return"
    window = [r for r, s in zip(returns, steps) if steps[first] < s <= steps[first] + 200_000 and r == r]
    assert min(window) >= 200, f"collapsed below 200 within 200,000 env steps of reaching 475: {shown}"


def test_cartpole_with_two_learner_processes_reaches_475(tmp_path):
    # Two learners make the update of one on the whole batch (tests/test_learners.py): the shipped settings, in
    # at most 150 updates (an eighth of the shipped 1,200; one learner reaches 475 at a median of 40,960 env
    # steps), until a greedy evaluation reaches 475.
    algorithm = ImpalaAlgorithmConfig(epoch_length=10, n_epochs=15, num_learners=2, target_score=475)
    assert algorithm.total_env_steps == 153_600, "the budget this test allows"
    result = train(
        "CartPole-v1", algorithm, runner=RunnerConfig(type="local"), output=QUIET, seed=1, output_dir=tmp_path
    )
    evaluations = result.column(EVAL)
    assert evaluations[-1] >= 475, f"never evaluated at 475; greedy evaluation per epoch: {evaluations}"


def test_yaml_defaults_equal_the_dataclass_defaults():
    import dataclasses

    from omegaconf import OmegaConf

    from maze_impala.cli import config_dir

    shipped = OmegaConf.to_container(OmegaConf.load(config_dir() / "algorithm" / "impala.yaml"))
    defaults = dataclasses.asdict(ImpalaAlgorithmConfig())
    assert {k: v for k, v in shipped.items() if k != "defaults"} == defaults
    cartpole = OmegaConf.to_container(OmegaConf.load(config_dir() / "algorithm" / "impala_cartpole.yaml"))
    assert cartpole == {"defaults": ["impala", "_self_"], "eps": 1e-3}


def test_tutorial_runs(tmp_path, monkeypatch, capsys):
    script = Path(__file__).resolve().parents[1] / "tutorials" / "train_cartpole.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--epochs", "1", "--output-dir", str(tmp_path)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "one greedy episode with the best policy: return" in out
    assert (tmp_path / "model_best.pt").is_file()


def test_pick_then_place_tutorial_learns_both_sub_steps(tmp_path, monkeypatch, capsys):
    script = Path(__file__).resolve().parents[1] / "tutorials" / "pick_then_place.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--epochs", "3", "--output-dir", str(tmp_path)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    returns = ast.literal_eval(out.split("training return per epoch (optimum 10):")[1].splitlines()[0])
    assert max(returns) >= 7.0, out  # a random policy earns about 10 * 0.625 / 4 = 1.6
    greedy = float(out.split("one greedy episode with the best policy: return")[1].split()[0])
    assert greedy >= 7.0


class _Reached(Exception):
    """Ends a run whose rows so far pass its test: the budget is what it may use, not what it must."""


class _Rows(StatsWriter):
    """Every epoch's row of a run; ends the run (:class:`_Reached`) once ``reached(rows)``."""

    def __init__(self, reached):
        self.reached, self.rows = reached, []

    def write(self, epoch, env_steps, row):
        self.rows.append(row)
        if self.reached(self):
            raise _Reached

    def column(self, name):
        return [row.get(name, float("nan")) for row in self.rows]

    def best(self, name):
        """The largest value of a column so far (epochs without one, such as no finished episode, aside)."""
        return max((v for v in self.column(name) if v == v), default=float("-inf"))


def _train(env, model, updates, seed, tmp_path, reached=lambda rows: False, runner=None, **settings):
    """``updates`` updates in epochs of ``EPOCH`` (``runner=dev`` unless ``runner`` says otherwise; ``settings``:
    algorithm fields), stopped at the first epoch where ``reached(rows)``: the algorithm, and per epoch the mean
    training return (rounded) and the mean greedy evaluation.

    runner=dev acts and learns in one process on one thread: a run repeats exactly for its seed, so a learning test
    passes or fails the same way every time, and beside the suite's other tests it costs half the CPU time of
    subprocess actors (the 2-core machine's scarce resource). The subprocess and Ray backends learn in tests of
    their own (here and in tests/test_ray_training.py)."""
    algorithm = ImpalaAlgorithmConfig(epoch_length=EPOCH, n_epochs=updates // EPOCH, **settings)
    runner = runner or RunnerConfig(type="dev")
    config = TrainingConfig(env, algorithm, model, runner, output=QUIET, seed=seed)
    rows = _Rows(reached)
    trainer = build_trainer(config, tmp_path)
    trainer.outputs.writers.append(rows)
    with contextlib.suppress(_Reached):
        trainer.train()
    assert rows.column(STEPS)[-1] <= algorithm.total_env_steps
    return algorithm, [round(r, 2) for r in rows.column(RETURN)], rows.column(EVAL)


def _shipped(name, updates, seed, tmp_path, reached):
    """:func:`_train` on what ``maze-run -cn conf_train env=<name>`` trains: the family's env and the algorithm,
    model and runner settings its config sets, on runner=dev."""
    env, settings = shipped_env(name)
    model, runner = ModelConfig(**shipped_model(name)), RunnerConfig(**{**shipped_runner(name), "type": "dev"})
    return _train(env, model, updates, seed, tmp_path, reached, runner, **settings)


def _updates(per_epoch: list) -> int:
    """The updates a stopped run took: the budget its control gets. A control run beside a run that
    passed gets as many env steps as that run needed; staying below the threshold on them is what "beats" means,
    and the controls' own ceilings (chance, or a flat head's best) keep them below it at any budget (their
    full-budget runs are benchmarks/learning.py's ``-mlp`` and ``-flat`` tasks)."""
    return EPOCH * len(per_epoch)


def _reaches(**thresholds):
    """Passed once every column named (``train``: the mean training return, ``eval``: the mean greedy evaluation)
    has reached its threshold in some epoch."""
    columns = {"train": RETURN, "eval": EVAL}
    return lambda rows: all(rows.best(columns[name]) >= value for name, value in thresholds.items())


def test_a_recurrent_policy_recalls_the_cue_that_an_mlp_cannot(tmp_path):
    # MemoryEnv: the cue is shown at the first step and must be named at the tenth (optimum 1, chance 0.25).
    lstm = ModelConfig(recurrent="lstm")
    algorithm, returns, _ = _train(MEMORY, lstm, 150, 2, tmp_path / "lstm", _reaches(train=0.9))
    assert algorithm.total_env_steps == 153_600
    assert max(returns) >= 0.9, f"the LSTM never named 90% of the cues: {returns}"
    _, returns, _ = _train(MEMORY, ModelConfig(), _updates(returns), 2, tmp_path / "mlp")
    assert max(returns) < 0.4, f"an MLP cannot know the cue, yet it named it: {returns}"


def test_a_recurrent_policy_balances_cartpole_without_its_velocities(tmp_path):
    # An MLP reaches about 50 on it (benchmarks/learning.py, stateless-cartpole-mlp); the full 1M-step target (400
    # in training, 475 greedy, 3 of 3 seeds) is the benchmark's. On runner=dev, seeds 1 to 4 passed at 260, 80, 100
    # and 120 updates: the budget is 300 (the run stops at the first epoch that passes), the seed the median one.
    env = {"_target_": "maze_impala.envs.examples.StatelessCartPole"}
    both = _reaches(train=300, eval=475)
    algorithm, returns, evaluations = _train(env, ModelConfig(recurrent="lstm"), 300, 3, tmp_path, both)
    assert algorithm.total_env_steps == 307_200
    assert max(returns) >= 300, f"mean training return per epoch: {returns}"
    assert max(evaluations) >= 475, f"greedy evaluations: {evaluations}"


def test_normalised_observations_learn_a_badly_scaled_cartpole_that_raw_ones_do_not(tmp_path):
    env = {"_target_": "maze_impala.envs.examples.ScaledCartPole"}  # observations x 1e3 .. 1e-3, plus offsets
    normalized = ModelConfig(normalize_observations=True)
    algorithm, returns, _ = _train(env, normalized, 100, 1, tmp_path / "normalized", _reaches(train=475))
    assert algorithm.total_env_steps == 102_400
    assert max(returns) >= 475, f"mean training return per epoch: {returns}"
    _, raw, _ = _train(env, ModelConfig(normalize_observations=False), _updates(returns), 1, tmp_path / "raw")
    assert max(raw) < 150, f"the raw observations learnt after all: {raw}"


def test_two_step_keys_beat_flat_heads_when_the_second_sub_action_depends_on_the_first(tmp_path):
    # CorrelatedPairsEnv: pick a slot, then name its value (10 steps, optimum 10); the flat MultiDiscrete twin's
    # independent heads cannot know which slot was taken (slip 0.2): at most 8.5 per episode
    steps = tmp_path / "steps"
    algorithm, returns, _ = _train(_example("CorrelatedPairsEnv"), ModelConfig(), 100, 1, steps, _reaches(train=9))
    assert algorithm.total_env_steps == 102_400
    assert max(returns) >= 9.0, f"two step keys: {returns}"
    _, flat, _ = _train(_example("FlatCorrelatedPairsEnv"), ModelConfig(), _updates(returns), 1, tmp_path / "flat")
    assert max(flat) < 9.0, f"flat heads beat their ceiling of 8.5: {flat}"


def test_a_parametrized_action_as_a_discrete_then_a_continuous_step_key_beats_flat_heads(tmp_path):
    # ParametrizedActionEnv: an available action type, then its continuous parameter (10 steps, optimum 10); greedy
    greedy_9 = _reaches(eval=9.0)
    algorithm, _, steps = _train(_example("ParametrizedActionEnv"), ModelConfig(), 200, 1, tmp_path / "steps", greedy_9)
    assert algorithm.total_env_steps == 204_800
    assert max(steps) >= 9.0, f"greedy evaluations, two step keys: {steps}"
    _, _, flat = _train(_example("FlatParametrizedActionEnv"), ModelConfig(), _updates(steps), 1, tmp_path / "flat")
    assert max(flat) < 8.0, f"greedy evaluations, flat heads: {flat}"


def test_the_impala_cnn_learns_to_reach_a_goal_seen_only_as_pixels(tmp_path):
    # PixelGoalEnv: a 6x6 uint8 image of the agent, the goal and the walls (optimum 0.90, random 0.35)
    env = {"_target_": "maze_impala.envs.examples.PixelGoalEnv"}
    algorithm, returns, _ = _train(env, ModelConfig(image_encoder="impala"), 60, 1, tmp_path, _reaches(train=0.85))
    assert algorithm.total_env_steps == 61_440
    assert max(returns) >= 0.85, f"mean training return per epoch: {returns}"


def test_the_default_model_learns_a_small_image_through_the_mlp(tmp_path):
    """image_encoder=auto puts a 24x24 image (the pixel goal, 4 pixels a cell) into the MLP, and it learns."""
    env = {"_target_": "maze_impala.envs.examples.PixelGoalEnv", "cell_pixels": 4}
    algorithm, returns, _ = _train(env, ModelConfig(), 60, 1, tmp_path, _reaches(train=0.85))
    assert "image_encoder: flatten" in (tmp_path / "config.yaml").read_text()
    assert algorithm.total_env_steps == 61_440
    assert max(returns) >= 0.85, f"mean training return per epoch: {returns}"


def test_the_shipped_minigrid_config_learns_doorkey(tmp_path):
    """``env=minigrid`` as shipped (DoorKey-5x5's 7x7 codes through the MLP, an entropy bonus of 0.01, gamma 0.99)
    picks up the key, opens the door and reaches the goal: a mean training return of 0.9, the benchmark's target
    (random play: 0.046), and a greedy policy that solves at least 6 of its 8 evaluation layouts (0.7). On
    subprocess actors seeds 1 to 4 passed within 90 to 120 of the 150 updates allowed, their greedy evaluations
    then between 0.72 and 0.96 (a greedy DoorKey policy may loop on a layout that its sampling solves); on
    runner=dev, the run this test repeats, seed 1 passes at 110. Its 3-seed benchmark (500k env steps) is
    ``benchmarks/learning.py --envs minigrid-doorkey``."""
    pytest.importorskip("minigrid")
    algorithm, returns, evaluations = _shipped("minigrid", 150, 1, tmp_path, _reaches(train=0.9, eval=0.7))
    assert (algorithm.entropy_coef, algorithm.gamma, algorithm.total_env_steps) == (0.01, 0.99, 153_600)
    assert max(returns) >= 0.9, f"mean training return per epoch: {returns}"
    assert max(evaluations) >= 0.7, f"greedy evaluations: {evaluations} (training returns: {returns})"


def test_the_shipped_minatar_config_learns_breakout(tmp_path):
    """``env=minatar`` as shipped (MinAtar's small CNN, 4 minibatches and a bonus of 0.01) learns Breakout: a mean
    training return of 1 per game within 40,960 env steps, against the random policy's 0.38 (1,000 games). Its
    benchmark, at 1M env steps on three games, is ``benchmarks/learning.py --envs minatar-breakout-1m ...``; on a
    2-core CPU it takes minutes, so the suite checks only that the shipped settings learn. On runner=dev, seeds 1 to
    3 passed at 20 updates each; the test runs seed 2."""
    pytest.importorskip("minatar")
    algorithm, returns, _ = _shipped("minatar", 40, 2, tmp_path, _reaches(train=1.0))
    assert (algorithm.n_sgd_minibatches, algorithm.entropy_coef, algorithm.total_env_steps) == (4, 0.01, 40_960)
    assert max(returns) >= 1.0, f"mean training return per epoch: {returns}"


def test_the_defaults_learn_to_land_lunarlander(tmp_path):
    """The shipped defaults, which any Gymnasium id without a family config gets, learn to land LunarLander-v3 (the
    Box2D row of the benchmark): a mean training return of 50 within 153,600 env steps, where random play scores
    about -180 and a policy that hovers until the time limit about -80 (only landings score above 0). Its benchmark,
    200 judged on 100 greedy episodes within 1M env steps on 3 seeds, is ``benchmarks/learning.py --envs
    LunarLander-v3``. On runner=dev with one thread (as the suite runs it), seeds 1 to 4 passed at 100, 80, 80 and
    90 updates (76, 98, 106 and 113); the test runs seed 2, with one evaluation episode an epoch (the suite's
    time: a hovering policy's episodes last 1,000 steps)."""
    pytest.importorskip("Box2D")
    land = _reaches(train=50)
    algorithm, returns, _ = _train(
        "LunarLander-v3", ModelConfig(), 150, 2, tmp_path, land, rollout_evaluator={"n_episodes": 1}
    )
    assert algorithm.total_env_steps == 153_600
    assert max(returns) >= 50, f"mean training return per epoch: {returns}"


def test_the_defaults_learn_mpe_through_the_parallel_api(tmp_path):
    """``env=pettingzoo env.name=mpe2.simple_v3 env.api=parallel`` with the shipped defaults (the MPE family, through
    PettingZoo's Parallel API): the agent learns to reach its landmark, a mean training return of -15 within 51,200
    env steps, where the first epoch scores about -34 to -38. The benchmark's MPE rows are the cooperative
    simple_spread and simple_speaker_listener at 512k env steps (``benchmarks/learning.py --envs mpe-simple-spread
    mpe-speaker-listener``); their short ``runner=dev`` runs wobble (docs/benchmarks.md), so the suite learns the
    one-agent scenario. On runner=dev with one thread, seeds 2 and 3 passed at 40 and 50 updates; the test runs
    seed 1."""
    pytest.importorskip("mpe2")
    env, settings = shipped_env("pettingzoo")
    env = {**env, "name": "mpe2.simple_v3", "api": "parallel"}
    model = ModelConfig(**shipped_model("pettingzoo"))
    runner = RunnerConfig(**{**shipped_runner("pettingzoo"), "type": "dev"})
    algorithm, returns, _ = _train(env, model, 50, 1, tmp_path, _reaches(train=-15), runner, **settings)
    assert algorithm.total_env_steps == 51_200
    assert max(returns) >= -15, f"mean training return per epoch: {returns}"


def test_the_defaults_learn_acrobot_whatever_the_units_of_its_rewards(tmp_path):
    """Every reward x100 (``env.wrappers``: ``ScaledReward``): the shipped defaults' value normalisation
    (``algorithm.value_normalization=popart``) learns Acrobot as unscaled, a mean training return of -100 (unscaled)
    within 153,600 env steps, where random play scores -500. Without it the same run stays at -500 (the benchmark:
    ``benchmarks/learning.py --envs Acrobot-v1-500k --reward-scale 100``, 3 seeds at -500 against a judged -78)."""
    env = {
        "_target_": "maze_impala.envs.gym_adapter.make_gym_env",
        "name": "Acrobot-v1",
        "wrappers": [{"_target_": "maze_impala.envs.wrappers.ScaledReward", "scale": 100.0}],
    }
    algorithm, returns, _ = _train(env, ModelConfig(), 150, 2, tmp_path, _reaches(train=-100 * 100))
    assert algorithm.value_normalization == "popart" and algorithm.total_env_steps == 153_600
    assert max(returns) >= -100 * 100, f"mean training return per epoch (x100): {returns}"
