"""Observation encoders: a step key's (normalised) observations as one feature vector per decision.

Images (rank-3 Box keys, channels first or last, uint8 or float) go through a CNN chosen by ``model.image_encoder``:
the IMPALA ResNet (Espeholt et al., 2018), the Nature CNN (Mnih et al., 2015) or ``flatten``; every other key is
flattened (one-hot for discrete parts), and the parts are joined, as Stable-Baselines3's CombinedExtractor does.
uint8 images travel and are stored as uint8 and become floats in [0, 1] here, on the device that runs the model,
by the bounds their space declares: ``(x - low) / (high - low)``, i.e. ``x / 255`` for camera frames
(:class:`~maze_impala.envs.wrappers.ObservationBounds` declares tighter ones, e.g. MiniGrid's cell codes).
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from maze_impala.config.model import IMAGE_ENCODERS, auto_image_encoder
from maze_impala.envs.spaces import is_image_space, storage_dtype
from maze_impala.nn.names import module_key


def channels_first(shape: tuple[int, ...]) -> bool:
    """Whether an image of ``shape`` is CHW: its channel axis is the smaller of its first and last (else HWC)."""
    return shape[0] < shape[-1]


def image_scaling(space: gym.spaces.Box) -> tuple[np.ndarray, np.ndarray] | None:
    """``(low, 1 / (high - low))`` of a uint8 image, as float32 arrays of its shape (scalars where uniform): how
    it enters a network, ``(x - low) / (high - low)``; None for a float image, which enters as it is."""
    if space.dtype != np.uint8:
        return None
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    scale = np.where(high > low, 1.0 / np.maximum(high - low, 1.0), 1.0).astype(np.float32)
    if (low == low.flat[0]).all() and (scale == scale.flat[0]).all():
        return np.float32(low.flat[0]), np.float32(scale.flat[0])
    return low, scale


class Scaling(nn.Module):
    """``(x - low) * scale`` in float32, from a space's bounds (buffers outside the state dict: they follow the
    module's device and are rebuilt from the space, never saved)."""

    def __init__(self, low: np.ndarray, scale: np.ndarray):
        super().__init__()
        self.register_buffer("low", torch.as_tensor(np.asarray(low, np.float32)), persistent=False)
        self.register_buffer("scale", torch.as_tensor(np.asarray(scale, np.float32)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() - self.low) * self.scale


class _Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class ImpalaCNN(nn.Module):
    """IMPALA's deep residual encoder: per stack a 3x3 conv, a 3/2 max-pool and two residual blocks (16, 32, 32
    channels), then ReLU, a linear layer to ``features`` and ReLU."""

    CHANNELS = (16, 32, 32)

    def __init__(self, in_channels: int, features: int):
        super().__init__()
        stacks: list[nn.Module] = []
        for channels in self.CHANNELS:
            stacks += [
                nn.Conv2d(in_channels, channels, 3, padding=1),
                nn.MaxPool2d(3, stride=2, padding=1),
                _Residual(channels),
                _Residual(channels),
            ]
            in_channels = channels
        self.stacks = nn.Sequential(*stacks)
        self.linear = nn.LazyLinear(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.linear(F.relu(self.stacks(x)).flatten(1)))


class NatureCNN(nn.Module):
    """The DQN Nature paper's encoder: 32 8x8/4, 64 4x4/2, 64 3x3/1 convolutions, then a linear layer to
    ``features``, each followed by ReLU."""

    def __init__(self, in_channels: int, features: int):
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(in_channels, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
        )
        self.linear = nn.LazyLinear(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.linear(self.convs(x).flatten(1)))


class SmallCNN(nn.Module):
    """MinAtar's encoder (Young and Tian, 2019): one 3x3 convolution of 16 channels, stride 1, then a linear layer
    to ``features``, each followed by ReLU. For small frames whose every pixel counts (MinAtar's 10x10)."""

    def __init__(self, in_channels: int, features: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, 3, stride=1)
        self.linear = nn.LazyLinear(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.linear(F.relu(self.conv(x)).flatten(1)))


CNNS: dict[str, type[nn.Module]] = {"impala": ImpalaCNN, "nature": NatureCNN, "small": SmallCNN}


class ImageEncoder(nn.Module):
    """One image key through a CNN: scaled to floats, moved to CHW, encoded to ``features``."""

    def __init__(self, key: str, space: gym.spaces.Box, kind: str, features: int):
        super().__init__()
        shape = tuple(int(n) for n in space.shape)
        self.chw = channels_first(shape)
        scaling = image_scaling(space)
        self.scaling = Scaling(*scaling) if scaling is not None else None
        chw = shape if self.chw else (shape[2], shape[0], shape[1])
        self.cnn = CNNS[kind](chw[0], features)
        try:
            with torch.no_grad():  # materialises the lazy linear layer
                self.cnn(torch.zeros(1, *chw))
        except RuntimeError:
            raise ValueError(
                f"observation {key!r}: an image of shape {shape} is too small for model.image_encoder={kind} "
                f"(it needs at least 36x36); use model.image_encoder=impala or small (any size) or flatten"
            ) from None
        # Channels-last convolutions: 1.45-1.65x faster updates of the IMPALA CNN on a CPU, 1.5x of the Nature CNN
        # on 84x84 frames (docs/benchmarks.md). The weights keep their logical shapes: state dicts do not change.
        self.cnn.to(memory_format=torch.channels_last)
        self.n_outputs = features

    def forward(self, x: torch.Tensor, batch_dims: int) -> torch.Tensor:
        lead = x.shape[:batch_dims]
        x = x.reshape(-1, *x.shape[batch_dims:])
        x = self.scaling(x) if self.scaling is not None else x.float()
        if not self.chw:
            x = x.permute(0, 3, 1, 2)
        return self.cnn(x.contiguous(memory_format=torch.channels_last)).reshape(*lead, -1)


class ObservationEncoder(nn.Module):
    """Flattens a Dict observation into one float vector (one-hot for discrete parts), images through a CNN.

    :attr:`n_outputs` is its width; :meth:`numpy_form` describes it as plain data for acting in numpy (none with
    a CNN: such a policy acts in torch).
    """

    def __init__(self, space: gym.spaces.Dict, image_encoder: str = "auto", image_features: int = 256):
        super().__init__()
        if image_encoder not in IMAGE_ENCODERS:
            raise ValueError(f"model.image_encoder must be one of {IMAGE_ENCODERS}, got {image_encoder!r}")
        if image_encoder == "auto":  # a run resolves it for every step key and its learner's device beforehand
            images = [tuple(sub.shape) for sub in space.spaces.values() if is_image_space(sub)]
            image_encoder = auto_image_encoder(images, "cpu")
        self.space = space
        self.n_outputs = 0
        self.images = nn.ModuleDict()
        self.scalings = nn.ModuleDict()
        """uint8 images entering flattened (``flatten``), scaled to [0, 1]."""
        for key, sub in space.spaces.items():
            storage_dtype(sub)  # rejects unsupported spaces early
            if is_image_space(sub) and image_encoder != "flatten":
                encoder = ImageEncoder(key, sub, image_encoder, image_features)
                self.images[module_key(key)] = encoder
                self.n_outputs += encoder.n_outputs
            elif isinstance(sub, gym.spaces.Discrete):
                self.n_outputs += int(sub.n)
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                self.n_outputs += int(sub.nvec.sum())
            else:
                self.n_outputs += int(np.prod(sub.shape))
                scaling = image_scaling(sub) if is_image_space(sub) else None
                if scaling is not None:
                    self.scalings[module_key(key)] = Scaling(*scaling)

    def forward(self, obs: Mapping[str, torch.Tensor], batch_dims: int) -> torch.Tensor:
        parts = []
        for key, sub in self.space.spaces.items():
            x = obs[key]
            name = module_key(key)
            if name in self.images:
                parts.append(self.images[name](x, batch_dims))
            elif isinstance(sub, gym.spaces.Discrete):
                # clamped: padding entries (zeros) of a space that starts above 0 must not fail
                parts.append(F.one_hot((x.long() - int(sub.start)).clamp(0, int(sub.n) - 1), int(sub.n)).float())
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                for i, n in enumerate(int(n) for n in sub.nvec.flat):
                    parts.append(F.one_hot(x[..., i].long().clamp(0, n - 1), n).float())
            elif name in self.scalings:
                parts.append(self.scalings[name](x).reshape(*x.shape[:batch_dims], -1))
            else:
                parts.append(x.reshape(*x.shape[:batch_dims], -1).float())
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]

    def numpy_scalings(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per flattened uint8 image, its ``(low, scale)`` flattened (see :class:`Scaling`)."""
        scalings = {}
        for key, sub in self.space.spaces.items():
            if module_key(key) in self.scalings:
                shape = (int(np.prod(sub.shape)),)
                low, scale = image_scaling(sub)  # type: ignore[misc]
                scalings[key] = (
                    np.broadcast_to(low, sub.shape).reshape(shape),
                    np.broadcast_to(scale, sub.shape).reshape(shape),
                )
        return scalings

    def numpy_form(self) -> list[tuple[str, int | None, int, int | None]] | None:
        """Per encoded part: (observation key, column of a MultiDiscrete or None, first code, one-hot size or None
        for a Box): see :class:`~maze_impala.nn.numpy_acting.NetworkForm`; None with a CNN."""
        if len(self.images):
            return None
        parts: list[tuple[str, int | None, int, int | None]] = []
        for key, space in self.space.spaces.items():
            if isinstance(space, gym.spaces.Discrete):
                parts.append((key, None, int(space.start), int(space.n)))
            elif isinstance(space, gym.spaces.MultiDiscrete):
                parts += [(key, i, 0, int(n)) for i, n in enumerate(space.nvec.flat)]
            else:
                parts.append((key, None, 0, None))
        return parts
