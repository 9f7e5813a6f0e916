"""Your own policy network per step key (``model.networks``), the critics' own widths and the initialisation."""

import numpy as np
import pytest
import torch
from tiny import QUIET
from torch import nn

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, Player, RunnerConfig, load_policy, train
from maze_impala.checkpoints import read_checkpoint
from maze_impala.config import ConfigError
from maze_impala.envs.examples import CuttingEnv
from maze_impala.envs.factory import make_env
from maze_impala.nn.critics import make_critic
from maze_impala.nn.custom import ExternalNet
from maze_impala.nn.models import make_policy
from maze_impala.nn.networks import StepNet
from maze_impala.nn.torch_acting import TorchActing, make_acting


class JoinedNet(nn.Module):
    """Every observation key flattened (discrete keys as their codes) and joined, then two layers."""

    def __init__(self, observation_space, n_outputs, hidden=16):
        super().__init__()
        n_inputs = sum(int(np.prod(space.shape)) or 1 for space in observation_space.spaces.values())
        self.layers = nn.Sequential(nn.Linear(n_inputs, hidden), nn.Tanh(), nn.Linear(hidden, n_outputs))

    def forward(self, observations):
        x = torch.cat([value.reshape(len(value), -1).float() for value in observations.values()], dim=1)
        return self.layers(x)


class WrongShape(JoinedNet):
    def forward(self, observations):
        return super().forward(observations)[:, :1]


TARGET = f"{__name__}.JoinedNet"


def test_one_step_key_takes_your_network_and_the_other_keeps_the_built_in_one():
    env = make_env(CuttingEnv)
    policy = make_policy(env, ModelConfig(networks={"cut": {"_target_": TARGET, "hidden": 8}}))
    assert isinstance(policy.network("cut"), ExternalNet) and isinstance(policy.network("select"), StepNet)
    assert policy.network("cut").module.layers[0].out_features == 8
    acting = make_acting(policy)
    assert isinstance(acting, TorchActing), "a network of yours acts in torch"
    obs, _ = env.reset(seed=0)
    while env.actor_id().step_key != "cut":
        obs, *_ = env.step(Player(policy, deterministic=False)(obs, env.actor_id()))
    batch = {k: np.stack([v] * 5) for k, v in obs.items()}
    actions, log_probs, _ = acting.act("cut", batch, {}, np.zeros(5, np.int64), None)
    assert actions["remainder"].shape == (5,) and np.isfinite(log_probs).all()
    # [T, N] batches (the learner's) are flattened for it and shaped back
    tensors = {k: torch.as_tensor(v).reshape(1, 5, *v.shape[1:]) for k, v in batch.items()}
    assert policy.logits("cut", tensors, 2).shape == (1, 5, 6)


def test_your_network_trains_is_checkpointed_and_loads_back(tmp_path):
    model = ModelConfig(networks={"_target_": TARGET, "hidden": 12})
    algorithm = ImpalaAlgorithmConfig(n_epochs=1, epoch_length=2, envs_per_actor=4, num_actors=1)
    train(CuttingEnv, algorithm, model=model, runner=RunnerConfig(type="dev"), output=QUIET, output_dir=tmp_path)
    state = read_checkpoint(tmp_path / "model_last.pt")
    assert state["config"]["model"]["networks"] == {"_target_": TARGET, "hidden": 12}
    assert state["policy"]["networks.cut.module.layers.0.weight"].shape[0] == 12
    policy, _ = load_policy(tmp_path / "model_last.pt")
    assert all(isinstance(policy.network(k), ExternalNet) for k in ("select", "cut"))
    assert torch.equal(
        policy.state_dict()["networks.cut.module.layers.0.weight"],
        state["policy"]["networks.cut.module.layers.0.weight"],
    )


@pytest.mark.parametrize(
    ("networks", "error", "message"),
    [
        ({"place": {"_target_": TARGET}}, ConfigError, r"no step key 'place' \(its step keys: \['select', 'cut'\]\)"),
        ({"cut": {"hidden": 4}}, ConfigError, "model.networks.cut needs a _target_"),
        (
            {"_target_": "no_such_module.Net"},
            ValueError,
            "cannot build no_such_module.Net for step key .*run from the "
            "directory that holds no_such_module, .* or add that directory to PYTHONPATH",
        ),
        ({"_target_": TARGET, "width": 3}, ValueError, r"built as .*JoinedNet\(observation_space="),
    ],
)
def test_a_wrong_network_config_names_the_problem(networks, error, message):
    with pytest.raises(error, match=message):
        make_policy(make_env(CuttingEnv), ModelConfig(networks=networks))


def test_a_network_returning_the_wrong_shape_is_named():
    policy = make_policy(make_env(CuttingEnv), ModelConfig(networks={"_target_": f"{__name__}.WrongShape"}))
    obs = {"order": torch.ones(3, dtype=torch.long), "piece": torch.zeros(3, dtype=torch.long)}
    with pytest.raises(ValueError, match=r"WrongShape.forward must return a \[batch, n_outputs\] = \(3, 6\) tensor"):
        policy.logits("cut", obs)


def test_your_network_and_a_recurrent_core_do_not_combine():
    with pytest.raises(ConfigError, match=r"cannot be combined with model\.recurrent"):
        ModelConfig(networks={"_target_": TARGET}, recurrent="lstm")


def test_the_critics_take_their_own_widths():
    env = make_env(CuttingEnv)
    model = ModelConfig(hidden_units=[32], critic_hidden_units=[8, 8])
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    widths = [m.out_features for m in critic.networks_by_key()["cut"].modules() if isinstance(m, nn.Linear)]
    assert widths == [8, 8, 1]
    assert make_policy(env, model).network("cut").body[0].out_features == 32
    with pytest.raises(ConfigError, match="critic_hidden_units"):
        ModelConfig(critic_hidden_units=[])


def test_orthogonal_and_default_initialisation():
    env = make_env(CuttingEnv)
    orthogonal = make_policy(env, ModelConfig(hidden_units=[16])).network("cut").body[0]
    w = orthogonal.weight.detach()
    torch.testing.assert_close(w.T @ w, 2.0 * torch.eye(w.shape[1]), atol=1e-4, rtol=0)  # gain sqrt(2), 16 x 13
    assert not orthogonal.bias.any()
    default = make_policy(env, ModelConfig(hidden_units=[16], init="default")).network("cut").body[0]
    assert default.bias.abs().sum() > 0, "torch's own initialisation draws the biases"
