"""The ``numpy`` backend's files: the policy's numpy form (:mod:`maze_impala.nn.numpy_forms`, the one training's
actors run) as JSON, and its weights as one flat array in ``weights.npy``. Neither needs torch to read or run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from maze_impala.nn.numpy_acting import NumpyActing
from maze_impala.nn.numpy_forms import CoreForm, HeadForm, NetworkForm, NormalizerForm, NumpyPolicyForm, StepForm

FORM = "numpy_form.json"
WEIGHTS = "weights.npy"


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "dtype": value.dtype.name}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def form_to_json(form: NumpyPolicyForm) -> dict[str, Any]:
    """The form as plain data (step keys kept as they are, int or str)."""
    steps = [[key, _plain(dataclasses.asdict(step))] for key, step in form.steps.items()]
    return {"steps": steps, "layout": [[name, list(shape), offset] for name, shape, offset in form.layout]}


def _array(value: dict[str, Any]) -> np.ndarray:
    return np.asarray(value["array"], dtype=value["dtype"])


def _step(data: dict[str, Any]) -> StepForm:
    net = data["network"]
    core = CoreForm(**net["core"]) if net["core"] else None
    network = NetworkForm(
        encoder=[tuple(part) for part in net["encoder"]],
        hidden=[tuple(layer) for layer in net["hidden"]],
        activation=net["activation"],
        core=core,
        output=tuple(net["output"]),
        scalings={k: (_array(low), _array(scale)) for k, (low, scale) in net["scalings"].items()},
    )
    norm = data["normalizer"]
    normalizer = (
        None
        if norm is None
        else NormalizerForm([tuple(k) for k in norm["keys"]], norm["clip"], norm["eps"], list(norm["counts"]))
    )
    heads = [HeadForm(**{**h, "nvec": list(h["nvec"]), "shape": tuple(h["shape"])}) for h in data["heads"]]
    return StepForm(normalizer, network, heads, dict(data["masks"]))


def form_from_json(data: dict[str, Any]) -> NumpyPolicyForm:
    layout = [(name, tuple(shape), int(offset)) for name, shape, offset in data["layout"]]
    return NumpyPolicyForm({key: _step(step) for key, step in data["steps"]}, layout)


def load_numpy_acting(folder: Path) -> NumpyActing:
    """The folder's policy as :class:`~maze_impala.nn.numpy_acting.NumpyActing`, with its weights."""
    acting = NumpyActing(form_from_json(json.loads((folder / FORM).read_text())))
    acting.load(np.load(folder / WEIGHTS, allow_pickle=False))
    return acting
