"""Image observations: stored as uint8 end to end, scaled on the model's device, encoded by the IMPALA or Nature CNN
(HWC or CHW) or flattened, alone or beside other keys of a Dict observation."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from maze_impala import ModelConfig
from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.transport import RolloutSlots, estimate_rollout_bytes
from maze_impala.actors.weights import SharedWeights
from maze_impala.envs.examples import PixelGoalEnv
from maze_impala.envs.factory import make_env
from maze_impala.impala.batch import stack_step
from maze_impala.nn.acting import StreamNoise
from maze_impala.nn.critics import make_critic
from maze_impala.nn.encoders import ImageEncoder, NatureCNN, ObservationEncoder, channels_first
from maze_impala.nn.models import make_policy
from maze_impala.nn.numpy_acting import NumpyActing
from maze_impala.nn.torch_acting import TorchActing, make_acting, numpy_form_of
from maze_impala.play.lineup import Lineup


def _spec(model, envs=3, steps=5):
    return ActorSpec(PixelGoalEnv, Lineup.of(model), n_rollout_steps=steps, envs_per_actor=envs, seed=1)


def test_frames_stay_uint8_from_the_env_to_the_learner_batch_and_through_shared_memory():
    env = make_env(PixelGoalEnv)
    model = ModelConfig(image_encoder="flatten")
    spec = _spec(model)
    actor = spec.build(0, SharedWeights(make_policy(env, model)))
    rollout = actor.rollout()
    actor.close()
    frames = rollout.trajectories[0].observations["observation"]
    assert frames.dtype == np.uint8 and frames.shape == (6, 3, 6, 6, 3)
    slots = RolloutSlots(1, estimate_rollout_bytes(env, spec))
    assert slots.write(0, rollout)
    batch = stack_step([slots.read(0)], 0, torch.device("cpu"))
    assert batch.observations["observation"].dtype == torch.uint8
    np.testing.assert_array_equal(batch.observations["observation"].numpy(), frames)


def test_a_uint8_frame_takes_a_quarter_of_the_bytes_of_a_float_one():
    images = make_env(PixelGoalEnv(size=32))
    floats = gym.wrappers.TransformObservation(
        PixelGoalEnv(size=32), lambda o: o.astype(np.float32), gym.spaces.Box(0, 255, (32, 32, 3), np.float32)
    )
    spec = _spec(ModelConfig(), envs=8, steps=32)
    uint8_bytes, float_bytes = estimate_rollout_bytes(images, spec), estimate_rollout_bytes(make_env(floats), spec)
    assert 3.5 < float_bytes / uint8_bytes < 4.0


@pytest.mark.parametrize("kind", ["impala", "nature", "small"])
def test_a_cnn_reads_hwc_and_chw_images_alike(kind):
    hwc, chw = gym.spaces.Box(0, 255, (40, 48, 4), np.uint8), gym.spaces.Box(0, 255, (4, 40, 48), np.uint8)
    assert not channels_first(hwc.shape) and channels_first(chw.shape)
    torch.manual_seed(0)
    a, b = ImageEncoder("frame", hwc, kind, 32), ImageEncoder("frame", chw, kind, 32)
    b.load_state_dict(a.state_dict())
    frames = torch.randint(0, 256, (5, 2, 40, 48, 4), dtype=torch.uint8)  # [T, N, H, W, C]
    out = a(frames, batch_dims=2)
    assert out.shape == (5, 2, 32)
    torch.testing.assert_close(out, b(frames.permute(0, 1, 4, 2, 3), batch_dims=2))
    # uint8 frames are scaled to [0, 1]: the same as the float frame divided by 255
    floats = ImageEncoder("frame", gym.spaces.Box(0.0, 1.0, (40, 48, 4), np.float32), kind, 32)
    floats.load_state_dict(a.state_dict())
    torch.testing.assert_close(out, floats(frames.float() / 255, batch_dims=2))


def test_the_impala_cnn_has_the_papers_layers():
    encoder = ImageEncoder("frame", gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), "impala", 256)
    convs = [m for m in encoder.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [16] * 5 + [32] * 5 + [32] * 5
    assert encoder.cnn.linear.in_features == 32 * 11 * 11 and encoder.cnn.linear.out_features == 256


def test_the_small_cnn_has_minatars_layers():
    encoder = ImageEncoder("frame", gym.spaces.Box(0, 1, (10, 10, 4), np.bool_), "small", 128)
    (conv,) = [m for m in encoder.modules() if isinstance(m, torch.nn.Conv2d)]
    assert (conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride) == (4, 16, (3, 3), (1, 1))
    assert encoder.cnn.linear.in_features == 16 * 8 * 8 and encoder.cnn.linear.out_features == 128


def test_an_image_too_small_for_the_nature_cnn_names_the_fix():
    with pytest.raises(ValueError, match=r"too small for model.image_encoder=nature.*impala"):
        ObservationEncoder(gym.spaces.Dict({"map": gym.spaces.Box(0, 255, (10, 10, 4), np.uint8)}), "nature")


def test_a_flattened_frame_is_scaled_and_acts_in_numpy_as_in_torch():
    env = make_env(PixelGoalEnv)
    policy = make_policy(env, ModelConfig(image_encoder="flatten"))
    assert isinstance(make_acting(policy), NumpyActing) and numpy_form_of(policy) is not None
    frame = torch.full((1, 6, 6, 3), 255, dtype=torch.uint8)
    encoded = policy.network(0).encoder({"observation": frame}, 1)
    assert encoded.max().item() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("critic", "recurrent"),
    [(c, "none") for c in ("step", "shared", "delta")] + [(c, "lstm") for c in ("step", "shared")],
)
def test_an_image_beside_other_keys_works_with_every_critic_mask_and_the_recurrent_core(critic, recurrent):
    env = make_env(PixelGoalEnv(channels_first=True, dict_observation=True))
    model = ModelConfig(
        critic=critic, recurrent=recurrent, image_encoder="impala", image_features=16, hidden_units=[32]
    )
    policy = make_policy(env, model)
    assert policy.network(0).encoder.n_outputs == 16 + 1 + 4  # the CNN's features, "time" and "action_mask"
    acting = make_acting(policy)
    assert isinstance(acting, TorchActing), "a CNN acts in torch"
    obs, _ = env.reset(seed=0)
    batch = {k: np.stack([v] * 64) for k, v in obs.items()}
    state = {n: np.zeros((64, *s), np.float32) for n, s in acting.state_shapes(0).items()}
    actions, log_probs, _ = acting.act(0, batch, state, np.zeros(64, np.int64), StreamNoise(0))
    assert actions["action"].shape == (64,) and log_probs.shape == (64,)
    assert obs["action_mask"][actions["action"]].all(), "a masked move was taken"
    critic_net = make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    tensors = {k: torch.as_tensor(v)[None] for k, v in batch.items()}  # [T=1, N=64]
    memory = torch.zeros(1, 64, model.recurrent_units) if recurrent != "none" else None
    assert critic_net.values(0, tensors, 2, {}, memory).shape == (1, 64)


def test_auto_flattens_small_images_and_picks_the_cnn_by_the_learners_device():
    from maze_impala.config.model import FLATTEN_BELOW_PIXELS, auto_image_encoder, image_pixels

    assert image_pixels((3, 3, 2)) == 9 and image_pixels((4, 84, 84)) == 84 * 84 and FLATTEN_BELOW_PIXELS == 36 * 36
    assert auto_image_encoder([(3, 3, 2)], "cpu") == "flatten"  # tic-tac-toe's board
    assert auto_image_encoder([(10, 10, 4), (7, 7, 3)], "cuda") == "flatten"  # MinAtar, MiniGrid
    assert auto_image_encoder([(35, 35, 3)], "cpu") == "flatten"
    assert auto_image_encoder([(6, 6, 3), (4, 84, 84)], "cpu") == "nature"  # the largest image decides
    assert auto_image_encoder([(84, 84, 4)], "cuda:0") == "impala"
    assert auto_image_encoder([], "cpu") == "flatten"
    policy = make_policy(make_env(PixelGoalEnv), ModelConfig())
    assert not len(policy.network(0).encoder.images), "a 6x6 image goes into the MLP"
    policy = make_policy(make_env(PixelGoalEnv(cell_pixels=7)), ModelConfig())
    assert isinstance(policy.network(0).encoder.images["observation"].cnn, NatureCNN), "42x42 on a CPU"


def test_a_run_records_what_auto_became_and_keeps_it_on_resume(tmp_path):
    from maze_impala import ImpalaAlgorithmConfig, OutputConfig, RunnerConfig, load_policy, train
    from maze_impala.checkpoints import read_checkpoint

    quiet = OutputConfig(console=False, tensorboard=False, progress=False, plot=False)
    small = dict(epoch_length=1, envs_per_actor=2, n_rollout_steps=4, num_actors=1, n_sgd_passes=1)
    env = {"_target_": "maze_impala.envs.examples.PixelGoalEnv", "cell_pixels": 7}
    train(
        env, ImpalaAlgorithmConfig(n_epochs=1, **small), runner=RunnerConfig("dev"), output=quiet, output_dir=tmp_path
    )
    assert read_checkpoint(tmp_path / "model_last.pt")["config"]["model"]["image_encoder"] == "nature"
    assert "image_encoder: nature" in (tmp_path / "config.yaml").read_text()
    policy, _ = load_policy(tmp_path / "model_last.pt")
    assert isinstance(policy.network(0).encoder.images["observation"].cnn, NatureCNN)
    # a run of an earlier release recorded impala (then the default): auto resumes it with impala, unchanged
    earlier = tmp_path / "earlier"
    train(
        env,
        ImpalaAlgorithmConfig(n_epochs=1, **small),
        ModelConfig(image_encoder="impala"),
        runner=RunnerConfig("dev"),
        output=quiet,
        output_dir=earlier,
    )
    result = train(
        env, ImpalaAlgorithmConfig(n_epochs=2, **small), runner=RunnerConfig("dev"), output=quiet, resume_from=earlier
    )
    assert result.epochs == 2
    assert read_checkpoint(earlier / "model_last.pt")["config"]["model"]["image_encoder"] == "impala"
