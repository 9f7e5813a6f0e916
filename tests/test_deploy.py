"""A deployed policy acts as the trained one: export, then the runtime (numpy and onnxruntime) in a process where
importing torch fails, on the decisions of whole episodes the torch policy played: the same greedy actions, logits
within 1e-5.

Each model kind trains one short epoch (its weights then scaled up so that its logits are far from ties: a parity
test of near-uniform logits would pass by luck), and plays a few episodes greedily in torch, recording every
decision; the runtime then decides on the same observations, each actor from its own recurrent state.
"""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from tiny import tiny_algorithm

from maze_impala import ModelConfig, OutputConfig, RunnerConfig, train
from maze_impala.checkpoints import save_checkpoint
from maze_impala.deploy.export import ExportError, export_policy
from maze_impala.envs.factory import make_env
from maze_impala.play.spec import PolicySpec

pytest.importorskip("onnxruntime")

NO_TORCH = textwrap.dedent(
    """
    import importlib.abc, sys
    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is not installed here (the deploy tests' guard)")
    sys.meta_path.insert(0, NoTorch())
    """
)
REPLAY = NO_TORCH + textwrap.dedent(
    """
    import json, numpy as np
    from maze_impala.deploy import DeployedPolicy
    folder, data, out = sys.argv[1:4]
    policy = DeployedPolicy.load(folder)
    recorded = np.load(data, allow_pickle=False)
    states, logits, actions = {}, [], []
    for i, (key, agent, new) in enumerate(json.loads(str(recorded["keys"]))):
        actor = (key, agent)
        if new:
            states = {}
        obs = {name.split("/", 2)[2]: recorded[name] for name in recorded.files if name.startswith(f"obs/{i}/")}
        state = states.get(actor)
        found, states[actor] = policy.logits({k: v[None] for k, v in obs.items()}, key, state, [agent])
        action, _ = policy.act(obs, actor, state)
        logits.append(found[0].tolist())
        actions.append({k: np.asarray(v).tolist() for k, v in action.items()})
    assert "torch" not in sys.modules
    with open(out, "w") as file:
        json.dump({"logits": logits, "actions": actions}, file)
    """
)

KINDS = {
    "cartpole-mlp": ("CartPole-v1", {}),
    "pixel-goal-impala": ({"_target_": "maze_impala.envs.examples.PixelGoalEnv"}, {"image_encoder": "impala"}),
    "stateless-cartpole-lstm-normalized": (
        {"_target_": "maze_impala.envs.examples.StatelessCartPole"},
        {"recurrent": "lstm", "normalize_observations": True},
    ),
    "cutting-two-sub-steps": ({"_target_": "maze_impala.envs.examples.CuttingEnv"}, {}),
    "pendulum-squashed": ("Pendulum-v1", {"action_bounds": "squash"}),
    "coordination-per-agent": (
        {"_target_": "maze_impala.envs.examples.CoordinationEnv", "n_agents": 3, "n_steps": 10},
        {"per_agent_networks": True},
    ),
    "tictactoe-masked": (
        {
            "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
            "name": "pettingzoo.classic.tictactoe_v3",
            "api": "aec",
        },
        {},
    ),
    "jobshop-row-attention": (  # model.networks: a network of the user's kind, attention over padded rows
        {"_target_": "maze_impala.envs.jobshop.JobShopEnv", "n_jobs": 5, "n_machines": 4, "max_jobs": 7},
        {"normalize_observations": False, "networks": {"_target_": "maze_impala.nn.sets.RowScoringNet", "hidden": 16}},
    ),
}


def _trained(tmp_path, env, model):
    """A checkpoint of one short epoch, its policy's weights scaled so that its logits are decisive."""
    out = tmp_path / "run"
    algorithm = tiny_algorithm()
    train(
        env,
        algorithm,
        ModelConfig(**model),
        RunnerConfig("dev"),
        output_dir=out,
        output=OutputConfig(console=False, tensorboard=False, progress=False, plot=False),
    )
    state = torch.load(out / "model_last.pt", weights_only=True)
    generator = torch.Generator().manual_seed(0)
    for name, tensor in state["policy"].items():
        if tensor.is_floating_point() and "normalizers" not in name and "log_std" not in name:
            tensor.add_(torch.randn(tensor.shape, generator=generator) * 0.3)
    save_checkpoint(out / "model_last.pt", state)
    return out / "model_last.pt"


def _torch_episodes(checkpoint, n_episodes=2, max_decisions=200):
    """The torch policy's greedy decisions over whole episodes: (step key, agent, new episode), observation, logits,
    greedy actions."""
    spec = PolicySpec.from_checkpoint(checkpoint)
    env = make_env(spec.env)
    policy = spec.policy(env)
    decisions = []
    for episode in range(n_episodes):
        obs, _ = env.reset(seed=episode)
        states, done, new = {}, False, True
        while not done and len(decisions) < max_decisions * (episode + 1):
            key, agent = tuple(env.actor_id())
            batch = {
                k: torch.as_tensor(np.asarray(v)[None])
                for k, v in obs.items()
                if k in policy.observation_spaces[key].spaces
            }
            with torch.no_grad():
                inputs = policy.normalize(key, batch)
                state = states.get((key, agent)) or policy.initial_state(key, 1)
                out, states[(key, agent)] = policy.network(key).step(inputs, state, torch.tensor([agent]))
                logits = policy.mask_logits(key, out, inputs)
                actions, _ = policy.distribution(key).sample_with_log_prob(logits, None)
            decisions.append(
                (
                    (key, agent, new),
                    {k: v.numpy()[0] for k, v in batch.items()},
                    logits.numpy()[0],
                    {k: v.numpy()[0] for k, v in actions.items()},
                )
            )
            new = False
            action = {k: v.item() if v.ndim == 0 else v for k, v in decisions[-1][3].items()}
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
    env.close()
    return decisions


def _replay(tmp_path, folder, decisions):
    data = {"keys": json.dumps([list(d[0]) for d in decisions])}
    for i, (_, obs, _, _) in enumerate(decisions):
        data.update({f"obs/{i}/{k}": v for k, v in obs.items()})
    np.savez(tmp_path / "decisions.npz", **data)
    script = tmp_path / "replay.py"
    script.write_text(REPLAY)
    out = tmp_path / "found.json"
    proc = subprocess.run(
        [sys.executable, str(script), str(folder), str(tmp_path / "decisions.npz"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(out.read_text())
    return found["logits"], found["actions"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("fmt", ["onnx", "numpy"])
def test_the_exported_policy_decides_as_the_torch_policy_without_torch(tmp_path, kind, fmt):
    env, model = KINDS[kind]
    checkpoint = _trained(tmp_path, env, model)
    folder = tmp_path / "export"
    try:
        export_policy(checkpoint, folder, fmt)
    except ExportError as error:
        assert fmt == "numpy" and "no numpy form" in str(error), error
        assert not folder.exists(), "a refused export writes nothing"
        pytest.skip(f"{kind} has no numpy form: {error}")
    decisions = _torch_episodes(checkpoint)
    found, found_actions = _replay(tmp_path, folder, decisions)
    assert len(found) == len(decisions) > 5
    for (actor, _, expected, actions), logits, action in zip(decisions, found, found_actions):
        np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-5, err_msg=f"decision of {actor}")
        assert sorted(actions) == sorted(action), actor
        for key, value in actions.items():  # discrete actions exactly, Box actions to float32's rounding
            np.testing.assert_allclose(np.asarray(action[key]), np.asarray(value), rtol=0, atol=1e-5, err_msg=actor)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["backend"] == fmt and len(manifest["source"]["sha256"]) == 64


def test_the_runtime_imports_neither_torch_nor_gymnasium_nor_hydra():
    code = "import sys, maze_impala.deploy; print(sorted({'torch', 'gymnasium', 'hydra'} & set(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


@pytest.mark.slow
def test_the_cartpole_export_is_small_and_its_cli_names_its_files(tmp_path):
    from clitools import maze_run

    checkpoint = _trained(tmp_path, "CartPole-v1", {})
    proc = maze_run(
        tmp_path,
        "-cn conf_export",
        f"input_dir={checkpoint.parent}",
        "checkpoint=model_last.pt",
        out=tmp_path / "export",
    )
    assert proc.returncode == 0, proc.stderr
    assert "manifest.json, step_0.onnx" in proc.stdout, proc.stdout
    size = sum(p.stat().st_size for p in (tmp_path / "export").iterdir())
    assert size < 200_000, size
    manifest = json.loads((tmp_path / "export" / "manifest.json").read_text())
    assert manifest["step_keys"][0]["observation_space"]["spaces"]["observation"]["shape"] == [4]
    assert manifest["source"]["config"]["env"] == "CartPole-v1"


@pytest.mark.slow
def test_a_network_with_an_op_onnx_lacks_is_refused_naming_it_and_nothing_is_written(tmp_path):
    checkpoint = _trained(tmp_path, "CartPole-v1", {"networks": {"_target_": "maze_impala.testing.fft_net"}})
    with pytest.raises(ExportError, match=r"maze_impala\.testing\.fft_net\) to ONNX: the op aten::fft_rfft"):
        export_policy(checkpoint, tmp_path / "export", "onnx")
    with pytest.raises(ExportError, match="no numpy form"):
        export_policy(checkpoint, tmp_path / "export", "numpy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"], "a refused export leaves nothing"


@pytest.mark.slow
def test_the_documented_install_without_torch_runs_an_exported_policy(tmp_path):
    """docs/deploying.md's lines, in a fresh virtual environment: the package without its dependencies, then numpy
    and onnxruntime; an exported CartPole policy acts there."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    folder = tmp_path / "export"
    export_policy(_trained(tmp_path, "CartPole-v1", {}), folder, "onnx")
    venv = tmp_path / "deploy-env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    for line in (["--no-deps", str(root)], ["numpy", "onnxruntime"]):
        proc = subprocess.run(
            [python, "-m", "pip", "install", "-q", *line], capture_output=True, text=True, timeout=600, cwd=tmp_path
        )
        assert proc.returncode == 0, proc.stderr
    code = (
        "import sys, numpy as np; from maze_impala.deploy import DeployedPolicy; "
        f"p = DeployedPolicy.load({str(folder)!r}); "
        "a, _ = p.act({'observation': np.zeros(4, np.float32)}, 0, None); "
        "import importlib.util as u; print(a['action'] in (0, 1), u.find_spec('torch') is None)"
    )
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"], proc.stdout
