"""Videos of played episodes: MP4 or GIF files written frame by frame as the episodes are played.

An env renders (``render_mode="rgb_array"``) after its reset and after every structured step of an episode that is
recorded; the frames go straight into the file (an episode of 500 CartPole frames is 360 MB as arrays). Needs
imageio (``pip install "maze_impala[video]"``; MP4 through its ffmpeg plugin, GIF through pillow).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from maze_impala.config import ConfigError
from maze_impala.events.gif import imageio

VIDEO_DIR = "videos"


class VideoFile:
    """One video file, written as frames arrive; with ``thumbnails`` it also keeps every second frame at half size
    (for TensorBoard)."""

    def __init__(self, path: Path, fps: int, thumbnails: bool = False):
        writers = imageio()
        path.parent.mkdir(parents=True, exist_ok=True)
        options: dict[str, Any] = {"fps": fps}
        if path.suffix == ".gif":
            options = {"duration": 1000 / fps, "loop": 0}
        else:
            options["macro_block_size"] = 1  # any frame size, not only multiples of 16
        self.path, self.frames = path, 0
        self._writer = writers.get_writer(str(path), **options)
        self.thumbnails: list[np.ndarray] | None = [] if thumbnails else None

    def __call__(self, frame: np.ndarray) -> None:
        frame = check_frame(frame)
        self._writer.append_data(frame)
        self.frames += 1
        if self.thumbnails is not None and self.frames % 2 == 1:
            self.thumbnails.append(frame[::2, ::2])

    def close(self) -> None:
        self._writer.close()


class Videos:
    """Opens a :class:`VideoFile` per recorded episode in ``directory``, named ``<prefix>episode_<id>.<format>``."""

    def __init__(self, directory: Path, format: str, fps: int, prefix: str = "", thumbnails: bool = False):
        self.directory, self.format, self.fps, self.prefix = directory, format, fps, prefix
        self.thumbnails = thumbnails
        self.written: list[VideoFile] = []

    def open(self, episode_id: int) -> VideoFile:
        video = VideoFile(self.directory / f"{self.prefix}episode_{episode_id}.{self.format}", self.fps,
                          self.thumbnails)  # fmt: skip
        self.written.append(video)
        return video


def check_frame(frame: Any) -> np.ndarray:
    """``frame`` as an ``[H, W, 3]`` uint8 array; a clear error for what an env without ``rgb_array`` rendering
    returns instead (None, a string, a list of frames)."""
    array = np.asarray(frame) if frame is not None else None
    if array is None or array.ndim != 3 or array.shape[-1] not in (3, 4):
        raise ConfigError(
            f"videos need an env that renders rgb_array frames ([H, W, 3] arrays), but render() returned "
            f"{type(frame).__name__}{'' if array is None else f' of shape {array.shape}'}: make the env with "
            "render_mode='rgb_array' (maze-run does for env ids and _target_ configs that take it)"
        )
    return array[..., :3].astype(np.uint8, copy=False)


def check_renders(env: Any, setting: str) -> None:
    """``env`` (a structured env made to render) renders ``[H, W, 3]`` frames; else a :class:`ConfigError` that names
    ``setting`` and the fix, before anything is played."""
    env.reset(seed=0)
    try:
        check_frame(env.render())
    except NotImplementedError as error:
        raise ConfigError(f"{setting}: {error}") from None
    except ConfigError as error:
        raise ConfigError(f"{setting}: {error}") from None
