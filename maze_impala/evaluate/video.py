"""Videos of played episodes: MP4 or GIF files written frame by frame as the episodes are played.

An env renders (``render_mode="rgb_array"``) after its reset and after every structured step of an episode that is
recorded; the frames go straight into the file (an episode of 500 CartPole frames is 360 MB as arrays). Needs
imageio (``pip install "maze_impala[video]"``; MP4 through its ffmpeg plugin, GIF through pillow).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from maze_impala.config import ConfigError
from maze_impala.events.gif import imageio

log = logging.getLogger("maze_impala")


class VideoFile:
    """One video file, written as frames arrive; with ``thumbnails`` it also keeps every second frame at half size
    (for TensorBoard).

    MP4 frames of an odd height or width are padded by a black row or column (H.264 encodes even sizes only). A
    file that cannot be written (the encoder fails, the disk is full) is reported once, as a warning, and removed:
    the episode, and a training run that films it, go on without it (:attr:`failed` says why)."""

    def __init__(self, path: Path, fps: int, thumbnails: bool = False):
        writers = imageio()
        path.parent.mkdir(parents=True, exist_ok=True)
        options: dict[str, Any] = {"fps": fps}
        if path.suffix == ".gif":
            options = {"duration": 1000 / fps, "loop": 0}
        else:
            options["macro_block_size"] = 1  # any frame size, not only multiples of 16
        self.path, self.frames = path, 0
        self._even = path.suffix != ".gif"
        self.failed: str | None = None
        self.thumbnails: list[np.ndarray] | None = [] if thumbnails else None
        try:
            self._writer = writers.get_writer(str(path), **options)
        except Exception as error:  # no encoder, no room: the film is lost, not the run
            self._fail(error)

    def __call__(self, frame: np.ndarray) -> None:
        frame = check_frame(frame)
        if self.failed is not None:
            return
        if self._even and (frame.shape[0] % 2 or frame.shape[1] % 2):
            frame = np.pad(frame, ((0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0)))
        try:
            self._writer.append_data(frame)
        except Exception as error:
            self._fail(error)
            return
        self.frames += 1
        if self.thumbnails is not None and self.frames % 2 == 1:
            self.thumbnails.append(frame[::2, ::2])

    def close(self) -> None:
        if self.failed is None:
            try:
                self._writer.close()
            except Exception as error:
                self._fail(error)

    def _fail(self, error: BaseException) -> None:
        self.failed = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        log.warning("the video %s could not be written (%s); going on without it", self.path, self.failed)
        try:
            if hasattr(self, "_writer"):
                self._writer.close()
        except Exception:  # the writer's own failure: already reported
            pass
        self.path.unlink(missing_ok=True)
        self.thumbnails = None


class Videos:
    """Opens a :class:`VideoFile` per recorded episode in ``directory``, named ``<prefix>episode_<id>.<format>``."""

    def __init__(self, directory: Path, format: str, fps: int, prefix: str = "", thumbnails: bool = False):
        self.directory, self.format, self.fps, self.prefix = directory, format, fps, prefix
        self.thumbnails = thumbnails
        self.written: list[VideoFile] = []

    def open(self, episode_id: int) -> VideoFile:
        video = VideoFile(
            self.directory / f"{self.prefix}episode_{episode_id}.{self.format}", self.fps, self.thumbnails
        )
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
