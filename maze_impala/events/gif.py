"""Animated GIFs of frames, for writers that show videos (TensorBoard): imageio, imported when one is made."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from maze_impala.config import ConfigError


def imageio() -> Any:
    """``imageio.v2``, or a :class:`ConfigError` naming the extra that brings it."""
    try:
        import imageio.v2 as module
    except ImportError:
        raise ConfigError('videos need imageio, which is not installed: pip install "maze_impala[video]"') from None
    return module


def gif_bytes(frames: list[np.ndarray], fps: int) -> bytes:
    """An animated GIF of ``frames`` (what TensorBoard shows as a video)."""
    buffer = io.BytesIO()
    imageio().mimwrite(buffer, frames, format="GIF", duration=1000 / fps, loop=0)
    return buffer.getvalue()
