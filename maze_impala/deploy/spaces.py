"""The spaces of a deployed policy as plain JSON data, and the checks of the observations it is given.

A space is a dict: ``{"type": "Dict", "spaces": {name: space}}`` of ``Box`` (``shape``, ``dtype``, ``low``,
``high``: a number where every entry shares it, else nested lists; infinities as the strings ``"inf"`` and
``"-inf"``), ``Discrete`` (``n``, ``start``), ``MultiDiscrete`` (``nvec``, ``start``) and ``MultiBinary`` (``n``).
Nothing here imports Gymnasium: :func:`space_to_json` reads a space's attributes only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

STORAGE = {"Discrete": "int64", "MultiDiscrete": "int64", "MultiBinary": "int8"}
"""The dtype in which a non-Box observation enters the graph (a Box keeps its own: uint8 frames stay uint8)."""


def _number(x: float) -> float | str:
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _bounds(values: np.ndarray) -> Any:
    flat = values.reshape(-1)
    if flat.size and bool((flat == flat[0]).all()):
        return _number(float(flat[0]))
    return np.vectorize(_number, otypes=[object])(values.astype(np.float64)).tolist()


def space_to_json(space: Any) -> dict[str, Any]:
    """A Gymnasium space (Dict, Box, Discrete, MultiDiscrete, MultiBinary) as plain data."""
    kind = type(space).__name__
    if kind == "Dict":
        return {"type": "Dict", "spaces": {name: space_to_json(s) for name, s in space.spaces.items()}}
    if kind == "Box":
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).name,
            "low": _bounds(space.low),
            "high": _bounds(space.high),
        }
    if kind == "Discrete":
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if kind == "MultiDiscrete":
        return {
            "type": "MultiDiscrete",
            "nvec": np.asarray(space.nvec).tolist(),
            "start": np.asarray(space.start).tolist(),
        }
    if kind == "MultiBinary":
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    raise TypeError(
        f"cannot export a {kind} space: observations and actions are Dicts of Box, Discrete, "
        "MultiDiscrete and MultiBinary"
    )


def shape_of(space: dict[str, Any]) -> tuple[int, ...]:
    """The shape of one value of a (non-Dict) space."""
    kind = space["type"]
    if kind == "Box":
        return tuple(space["shape"])
    if kind == "Discrete":
        return ()
    if kind == "MultiDiscrete":
        return tuple(np.shape(space["nvec"]))
    return tuple(np.atleast_1d(space["n"]).tolist())


def dtype_of(space: dict[str, Any]) -> np.dtype:
    """The dtype a value of the space enters the graph in."""
    return np.dtype(space["dtype"] if space["type"] == "Box" else STORAGE[space["type"]])


def check_observation(observation: Any, space: dict[str, Any], step_key: Any, batch: int | None) -> dict:
    """``observation`` as the graph takes it: each key of ``space`` as an array of its dtype, with a leading axis of
    ``batch`` rows (None: one observation, no batch axis; the result has one row). A ValueError names the step key,
    the observation key and the expected shape of a missing or misshapen one; keys the space lacks are left out."""
    if not isinstance(observation, dict):
        raise ValueError(
            f"step key {step_key!r}: the observation must be a dict of {sorted(space['spaces'])}, got "
            f"{type(observation).__name__}"
        )
    checked = {}
    for name, sub in space["spaces"].items():
        if name not in observation:
            raise ValueError(
                f"step key {step_key!r}: the observation has no {name!r} (it has "
                f"{sorted(observation)}; the policy reads {sorted(space['spaces'])})"
            )
        value = np.asarray(observation[name])
        expected = shape_of(sub)
        lead = () if batch is None else (batch,)
        if value.shape != (*lead, *expected):
            rows = "" if batch is None else f"{batch} rows of "
            raise ValueError(
                f"step key {step_key!r}: observation {name!r} has shape {value.shape}, expected "
                f"{rows}{expected} ({sub['type']} {expected})"
            )
        value = value.astype(dtype_of(sub), copy=False)
        checked[name] = value[None] if batch is None else value
    return checked


def action_value(value: np.ndarray, space: dict[str, Any]) -> Any:
    """One row's action of a head as the env takes it: an int for a Discrete, an array of the space's dtype."""
    if space["type"] == "Discrete":
        return int(value)
    if space["type"] == "Box":
        return np.asarray(value, dtype=space["dtype"])
    return np.asarray(value, dtype=STORAGE[space["type"]])
