"""The TensorBoard files a run writes (without ``torch.utils.tensorboard``) read back by TensorBoard's own reader, as
``torch.utils.tensorboard`` would have written them."""

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata

from maze_impala.events.tensorboard import crc32c, masked_crc32c
from maze_impala.events.writers import TensorBoardWriter


def _read(directory):
    events = EventAccumulator(str(directory), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    return events


def test_the_checksum_is_crc32c():
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C (Castagnoli)
    assert masked_crc32c(b"") == 0xA282EAD8  # the mask of the empty string's CRC, 0


def test_scalars_hparams_and_videos_read_back_as_torchs_writer_writes_them(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    rows = [(1, 100, {"train/return": 1.5, "eval/return": 2.0}), (2, 200, {"train/return": 3.25})]
    hparams, metrics = {"algorithm.lr": 0.003, "env": "CartPole-v1", "output.csv": True}, {"hparam/best": 2.0}
    ours = TensorBoardWriter(tmp_path / "ours")
    for epoch, steps, row in rows:
        ours.write(epoch, steps, row)
    ours.video("eval/video/episode_0", [np.zeros((4, 6, 3), np.uint8), np.full((4, 6, 3), 255, np.uint8)], 200, 30)
    ours.hparams(hparams, metrics)
    ours.close()
    theirs = SummaryWriter(str(tmp_path / "theirs"))
    for _, steps, row in rows:
        for name, value in row.items():
            theirs.add_scalar(name, value, global_step=steps)
    theirs.add_hparams(hparams, metrics, run_name=".")
    theirs.close()

    read, expected = _read(tmp_path / "ours"), _read(tmp_path / "theirs")
    assert set(read.Tags()["scalars"]) == set(expected.Tags()["scalars"])
    for tag in expected.Tags()["scalars"]:
        assert [(e.step, e.value) for e in read.Scalars(tag)] == [(e.step, e.value) for e in expected.Scalars(tag)]
    assert read.Tags()["images"] == ["eval/video/episode_0"]
    content = read.PluginTagToContent(metadata.PLUGIN_NAME)
    assert content.keys() == expected.PluginTagToContent(metadata.PLUGIN_NAME).keys()
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    assert start.hparams["algorithm.lr"].number_value == 0.003 and start.hparams["env"].string_value == "CartPole-v1"
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    assert [m.name.tag for m in experiment.metric_infos] == ["hparam/best"]


def test_a_resumed_runs_first_step_hides_what_the_interrupted_run_logged_after_it(tmp_path):
    first = TensorBoardWriter(tmp_path)
    for steps in (100, 200, 300):  # 300: logged after the checkpoint the run resumes from
        first.write(0, steps, {"x": float(steps)})
    first.close()
    resumed = TensorBoardWriter(tmp_path, purge_step=201)
    resumed.write(0, 250, {"x": 250.0})
    resumed.close()
    assert [e.step for e in _read(tmp_path).Scalars("x")] == [100, 200, 250]
