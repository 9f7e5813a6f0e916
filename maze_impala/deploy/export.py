"""Export a trained policy into a folder that :class:`~maze_impala.deploy.DeployedPolicy` runs (torch is needed
here, not there): ``maze-run -cn conf_export input_dir=<run> [format=onnx|numpy]``, or :func:`export_policy`.

Per step key, ``format=onnx`` traces the policy's own forward pass (normalisation, encoder, recurrent core, output
layer, the action masks) into one graph with a batch axis: observations, agent ids and the recurrent state in, the
masked logits and the next state out. Each graph is checked against torch on the env's observations before the
folder is written; the folder appears whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maze_impala.checkpoints import Checkpoint
from maze_impala.deploy.numpy_form import FORM, WEIGHTS, form_to_json
from maze_impala.deploy.runtime import FORMAT, MANIFEST, DeployedPolicy
from maze_impala.deploy.spaces import dtype_of, space_to_json
from maze_impala.envs.factory import make_env
from maze_impala.nn.distributions import BernoulliHead, CategoricalHead
from maze_impala.nn.flat import flatten
from maze_impala.play.spec import PolicySpec

FORMATS = ("onnx", "numpy")
OPSET = 17
PARITY = 1e-4
"""Largest difference of a graph's logits from torch's on the export's check batch (float32 rounding is far less)."""


class ExportError(ValueError):
    """A policy this exporter cannot export, or a graph that does not reproduce torch's logits."""


class _StepGraph(torch.nn.Module):
    """One step key's forward pass with positional tensors: ``(*observations, agent_ids, *state)``."""

    def __init__(self, policy: Any, step_key: Any, obs_names: list[str], state_names: list[str]):
        super().__init__()
        self.policy, self.step_key, self.obs_names, self.state_names = policy, step_key, obs_names, state_names

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = len(self.obs_names)
        obs = dict(zip(self.obs_names, args[:n]))
        state = dict(zip(self.state_names, args[n + 1 :]))
        # traced: per-agent networks route rows without branching
        logits, state = self.policy.step_logits(self.step_key, obs, state, args[n], traced=True)
        return (logits, *(state[name] for name in self.state_names))


def _heads(distribution: Any) -> list[dict[str, Any]]:
    heads, offset = [], 0
    for key, head in distribution.items():
        entry: dict[str, Any] = {"key": key, "offset": offset, "size": head.n_inputs}
        if isinstance(head, CategoricalHead):
            entry.update(kind="categorical", nvec=list(head.nvec), squeeze=head.squeeze)
        elif isinstance(head, BernoulliHead):
            entry.update(kind="bernoulli")
        else:
            entry.update(kind="gaussian", shape=list(head.shape), log_std=head.log_std.detach().tolist())
            if head.squash is not None:
                entry.update(squash={"center": head.squash[0].tolist(), "half_width": head.squash[1].tolist()})
        heads.append(entry)
        offset += head.n_inputs
    return heads


def _examples(space: Any, masks: dict[str, str], rows: int, seed: int) -> dict[str, np.ndarray]:
    """``rows`` observations drawn from ``space``, each action mask allowing at least one action."""
    space.seed(seed)
    samples = [space.sample() for _ in range(rows)]
    obs = {
        name: np.stack([np.asarray(s[name]) for s in samples]).astype(dtype_of(space_to_json(sub)))
        for name, sub in space.spaces.items()
    }
    for mask in masks.values():
        none = ~(obs[mask] > 0.5).any(-1)
        obs[mask][none, ..., 0] = 1
    return obs


def _export_graph(policy: Any, key: Any, path: Path, obs: dict[str, np.ndarray]) -> None:
    names, state_names = list(obs), list(policy.state_shapes(key))
    rows = len(next(iter(obs.values())))
    state = {n: torch.randn(rows, *shape) * 0.1 for n, shape in policy.state_shapes(key).items()}
    args = (
        *(torch.as_tensor(obs[n]) for n in names),
        torch.zeros(rows, dtype=torch.int64),
        *(state[n] for n in state_names),
    )
    inputs = [*(f"obs_{i}" for i in range(len(names))), "agent_ids", *(f"state_{n}" for n in state_names)]
    outputs = ["logits", *(f"next_{n}" for n in state_names)]
    graph = _StepGraph(policy, key, names, state_names).eval()
    net = policy.network(key)
    network = getattr(net, "target", f"{type(net).__module__}.{type(net).__qualname__}")  # a network of yours: its own
    fastpath = torch.backends.mha.get_fastpath_enabled()
    try:
        # torch's fused attention kernels (its transformer layers' inference fast path) have no ONNX form; the
        # same layers' plain ops have
        torch.backends.mha.set_fastpath_enabled(False)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            axes = {name: {0: "batch"} for name in (*inputs, *outputs)}
            torch.onnx.export(
                graph,
                args,
                str(path),
                input_names=inputs,
                output_names=outputs,
                opset_version=OPSET,
                dynamic_axes=axes,
                dynamo=False,
            )
    except Exception as error:  # an op ONNX lacks, a forward that cannot be traced
        text = " ".join(str(error).split())
        op = re.search(r"operator '?([\w:.]+)'?", text)
        what = f"the op {op.group(1)}" if op else "its forward pass"
        raise ExportError(
            f"cannot export step key {key!r}'s network ({network}) "
            f"to ONNX: {what} has no ONNX form at opset {OPSET} ({text[:300]}). Rewrite that part "
            "with ops ONNX has, or keep the policy in torch (load_policy)"
        ) from None
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def export_policy(checkpoint: str | Path, out_dir: str | Path, fmt: str = "onnx") -> Path:
    """Export the policy of a training ``checkpoint`` into ``out_dir`` (made here; it must not exist or be empty);
    returns it. ``fmt``: onnx (any policy made of ops ONNX has) or numpy (MLP and recurrent policies without a CNN).
    Raises :class:`ExportError`, writing nothing, for what it cannot export."""
    if fmt not in FORMATS:
        raise ExportError(f"format must be one of {FORMATS}, got {fmt!r}")
    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    if out_dir.exists() and any(p.suffix != ".log" for p in out_dir.iterdir()):  # maze-run's own log may be there
        raise ExportError(f"{out_dir} is not empty: export into a new directory")
    read = Checkpoint.read(checkpoint)  # once, for the policy and the run's record
    spec = PolicySpec.from_checkpoint(read)
    config = read.state.get("config", {})
    env = make_env(spec.env)
    try:
        policy = spec.policy(env)
        agents = {name: [actor.step_key, int(actor.agent_id)] for name, actor in env.agents_dict.items()}
    finally:
        env.close()
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "backend": fmt,
        "step_keys": [],
        "agents": agents,
        "source": {"checkpoint": str(checkpoint), "sha256": _sha256(checkpoint), "config": config},
    }
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=out_dir.parent))
    staging.chmod(0o755)
    try:
        checks = {}
        for index, key in enumerate(policy.step_keys):
            space = policy.observation_spaces[key]
            obs = _examples(space, dict(policy.masks[key]), 5, seed=index)
            checks[key] = obs
            step = {
                "step_key": key,
                "file": f"step_{index}.onnx" if fmt == "onnx" else None,
                "inputs": list(obs),
                "observation_space": space_to_json(space),
                "action_space": space_to_json(policy.action_spaces[key]),
                "state": {n: list(s) for n, s in policy.state_shapes(key).items()},
                "heads": _heads(policy.distribution(key)),
                "masks": dict(policy.masks[key]),
            }
            if fmt == "onnx":
                _export_graph(policy, key, staging / step["file"], obs)
            manifest["step_keys"].append(step)
        if fmt == "numpy":
            form = policy.numpy_form()
            if form is None:
                raise ExportError(
                    "this policy has no numpy form (a CNN encoder, a network of your own, or networks "
                    "per agent): export it with format=onnx"
                )
            (staging / FORM).write_text(json.dumps(form_to_json(form)))
            np.save(staging / WEIGHTS, flatten(policy).numpy())
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str))
        _check(DeployedPolicy.load(staging), policy, checks)
        out_dir.mkdir(parents=True, exist_ok=True)
        for path in sorted(staging.iterdir(), key=lambda p: p.name == MANIFEST):  # the manifest last: until it is
            path.rename(out_dir / path.name)  # there, the folder is no export
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def export_run(input_dir: str, checkpoint: str, fmt: str, out_dir: Path) -> str:
    """``maze-run -cn conf_export``: the export of ``input_dir``'s ``checkpoint``; what the console says of it."""
    export_policy(Path(input_dir) / checkpoint, out_dir, fmt)
    files = sorted(p.name for p in out_dir.iterdir() if p.suffix != ".log")
    size = sum((out_dir / name).stat().st_size for name in files)
    return f"exported {Path(input_dir) / checkpoint} ({fmt}) into {out_dir}: {', '.join(files)} ({size / 1024:.0f} kB)"


def _check(deployed: DeployedPolicy, policy: Any, checks: dict[Any, dict[str, np.ndarray]]) -> None:
    """Refuse an export whose logits differ from torch's on the check batches."""
    for key, obs in checks.items():
        rows = len(next(iter(obs.values())))
        with torch.no_grad():
            inputs = {n: torch.as_tensor(v) for n, v in obs.items()}
            state = policy.initial_state(key, rows)
            expected, _ = policy.step_logits(key, inputs, state, torch.zeros(rows, dtype=torch.int64))
            expected = expected.numpy()
        found, _ = deployed.logits(obs, key)
        gap = float(np.abs(found - expected).max()) if expected.size else 0.0
        if not gap <= PARITY:
            raise ExportError(
                f"the exported graph of step key {key!r} gives logits {gap:.2e} away from torch's "
                f"(at most {PARITY} is right): this policy does not export faithfully"
            )
