"""Videos of the policy: the rollout CLI and training film episodes of any env that renders rgb_array frames."""

import imageio.v2 as imageio
import pandas as pd
import pytest
from clitools import TINY, maze_run

pytestmark = pytest.mark.slow


def _frames(path) -> int:
    return sum(1 for _ in imageio.get_reader(str(path)))


@pytest.mark.parametrize("fmt", ["mp4", "gif"])
def test_the_rollout_cli_films_the_first_episodes_frame_by_frame(tmp_path, fmt):
    proc = maze_run(
        tmp_path,
        ("-cn conf_rollout policy=random_policy env=gym_env env.name=CartPole-v1 n_episodes=3 video.episodes=2"),
        f"video.format={fmt}",
        out=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "error" not in proc.stderr.lower(), "a headless machine films without SDL's display errors"
    assert "kpis_summary.csv, rollout.log, stats.csv, videos/)" in proc.stdout, proc.stdout
    steps = pd.read_csv(tmp_path / "kpis.csv")["steps"].tolist()
    films = sorted((tmp_path / "videos").iterdir())
    assert [f.name for f in films] == [f"episode_0.{fmt}", f"episode_1.{fmt}"]
    for film, length in zip(films, steps):
        if fmt == "mp4":
            assert _frames(film) == length + 1, "the first observation's frame, then one per step"
        else:  # a GIF's encoder merges frames that look the same after its 256-colour quantisation
            assert 1 < _frames(film) <= length + 1


def test_a_pettingzoo_game_is_filmed_move_by_move(tmp_path):
    proc = maze_run(
        tmp_path,
        (
            "-cn conf_rollout policy=random_policy env=pettingzoo "
            "env.name=pettingzoo.classic.tictactoe_v3 n_episodes=2 video.episodes=1"
        ),
        out=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    moves = pd.read_csv(tmp_path / "kpis.csv")["steps"].iloc[0]
    assert _frames(tmp_path / "videos" / "episode_0.mp4") == moves + 1


def test_training_films_its_evaluation_into_the_run_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    proc = maze_run(
        tmp_path,
        "-cn conf_train runner=dev",
        *TINY,
        "algorithm.n_epochs=3",
        "output.video.episodes=1",
        "output.video.every=2",
        out=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    films = sorted(p.name for p in (tmp_path / "videos").iterdir())
    assert films == ["epoch_2_episode_0.mp4", "epoch_3_episode_0.mp4"], "every 2nd epoch and the last"
    kpis = pd.read_csv(tmp_path / "kpis.csv")
    last = kpis[(kpis["epoch"] == 3) & (kpis["episode_id"] == 0)]["steps"].iloc[0]
    assert _frames(tmp_path / "videos" / "epoch_3_episode_0.mp4") == last + 1
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    assert "eval/video/episode_0" in events.Tags()["images"]
    assert len(events.Images("eval/video/episode_0")) == 2


def test_an_env_that_cannot_render_is_named_before_anything_runs(tmp_path):
    proc = maze_run(
        tmp_path, "-cn conf_rollout policy=random_policy env=cutting video.episodes=1", out=tmp_path / "out"
    )
    assert proc.returncode == 2
    assert "video.episodes=1: CuttingEnv does not render: implement render()" in proc.stderr


def test_the_adapters_render_the_wrapped_envs_frames():
    from pettingzoo.classic import tictactoe_v3

    from maze_impala.envs.factory import make_env
    from maze_impala.envs.gym_adapter import make_gym_env

    gym_env = make_gym_env("CartPole-v1", render_mode="rgb_array")
    gym_env.reset(seed=0)
    assert gym_env.render().shape == (400, 600, 3)
    game = make_env(tictactoe_v3.env(render_mode="rgb_array"))
    game.reset(seed=0)
    assert game.render().ndim == 3


def test_connect_fours_odd_sized_frames_make_an_mp4_that_decodes(tmp_path):
    """Connect four renders 891x774 frames; H.264 encodes even sizes only, so a row and a column are padded."""
    proc = maze_run(
        tmp_path, ("-cn conf_rollout policy=random_policy env=connect_four n_episodes=1 video.episodes=1"), out=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "broken pipe" not in proc.stderr.lower() and "could not be written" not in proc.stderr, proc.stderr
    film = tmp_path / "videos" / "episode_0.mp4"
    frames = [frame for frame in imageio.get_reader(str(film))]  # list() would ask its length: inf for an MP4
    assert len(frames) == pd.read_csv(tmp_path / "kpis.csv")["steps"].iloc[0] + 1
    assert frames[0].shape[0] % 2 == 0 and frames[0].shape[1] % 2 == 0


def test_a_video_that_cannot_be_written_is_reported_and_the_episode_goes_on(tmp_path, caplog):
    import numpy as np

    from maze_impala.evaluate.video import VideoFile

    video = VideoFile(tmp_path / "episode_0.mp4", fps=30)

    class Broken:
        def append_data(self, frame):
            raise OSError(32, "Broken pipe")

        def close(self):
            raise OSError(32, "Broken pipe")

    video._writer = Broken()
    with caplog.at_level("WARNING", logger="maze_impala"):
        video(np.zeros((5, 7, 3), np.uint8))
        video(np.zeros((5, 7, 3), np.uint8))  # nothing more is tried, nothing raised
        video.close()
    assert video.failed is not None and "Broken pipe" in video.failed
    assert not video.path.exists(), "no 0-byte file is left behind"
    assert sum("could not be written" in r.getMessage() for r in caplog.records) == 1
