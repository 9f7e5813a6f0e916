"""TensorBoard's event files, written with TensorBoard's own protocol buffers but without ``torch.utils.tensorboard``.

``torch.utils.tensorboard`` took half a second to import into every run, and its hparams summary as much again at
the end; the protocol buffers take 0.06 s. The files are the same: TFRecords (a length, its masked CRC-32C, the
serialised ``Event``, its masked CRC-32C) that TensorBoard's own reader reads (tests/test_tensorboard.py).
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

_COUNTER = itertools.count()
_CRC_TABLE: list[int] = []


def _crc32c_table() -> list[int]:
    if not _CRC_TABLE:
        for byte in range(256):
            crc = byte
            for _ in range(8):
                crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
            _CRC_TABLE.append(crc)
    return _CRC_TABLE


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of TFRecords."""
    table, crc = _crc32c_table(), 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The CRC as TFRecords store it (rotated and offset, so that a CRC of CRCs stays sound)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class EventFile:
    """One ``events.out.tfevents.*`` file of ``log_dir``; ``purge_step``: TensorBoard hides the events of earlier
    files from that step on (a resumed run's first step)."""

    def __init__(self, log_dir: Path, purge_step: int | None = None):
        from tensorboard.compat.proto import event_pb2

        self._event = event_pb2.Event
        log_dir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_COUNTER)}"
        self.path = log_dir / name
        self._file = open(self.path, "ab")
        step = {} if purge_step is None else {"step": purge_step}
        self._write(self._event(wall_time=time.time(), file_version="brain.Event:2", **step))
        if purge_step is not None:
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self._write(self._event(wall_time=time.time(), step=purge_step, session_log=start))

    def summary(self, summary: Any, step: int) -> None:
        """A ``Summary`` protocol buffer at ``step``."""
        self._write(self._event(wall_time=time.time(), step=step, summary=summary))

    def _write(self, event: Any) -> None:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._file.write(
            header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))
        )

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def scalars(row: dict[str, float]) -> Any:
    """A ``Summary`` of one scalar per column."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary(value=[Summary.Value(tag=name, simple_value=float(value)) for name, value in row.items()])


HPARAMS_PLUGIN, HPARAMS_DATA_VERSION = "hparams", 0
HPARAMS_TAGS = {part: f"_hparams_/{part}" for part in ("experiment", "session_start_info", "session_end_info")}
"""The HParams plugin's name, data version and tags, as ``tensorboard.plugins.hparams.metadata`` has them: that
module imports TensorBoard's tensor utilities (0.2 s) for three strings and a number (tests/test_tensorboard.py
reads them back through it)."""


def hparams_summaries(hparams: dict[str, Any], metrics: dict[str, float]) -> list[Any]:
    """The three summaries of TensorBoard's HParams view (experiment, session start, session end), as
    ``torch.utils.tensorboard``'s ``add_hparams`` writes them."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    infos, start = [], plugin_data_pb2.SessionStartInfo()
    for name, value in hparams.items():
        if value is None:
            continue
        if isinstance(value, int | float):  # a bool too, as a number: as torch writes it
            start.hparams[name].number_value = value
            kind = "DATA_TYPE_FLOAT64"
        elif isinstance(value, str):
            start.hparams[name].string_value = value
            kind = "DATA_TYPE_STRING"
        else:
            raise ValueError(f"hparam {name}: an int, float, str or bool, got {type(value).__name__}")
        infos.append(api_pb2.HParamInfo(name=name, type=api_pb2.DataType.Value(kind)))
    experiment = api_pb2.Experiment(
        hparam_infos=infos, metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in metrics]
    )
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.Status.Value("STATUS_SUCCESS"))

    def summary(tag: str, **content: Any) -> Any:
        data = plugin_data_pb2.HParamsPluginData(version=HPARAMS_DATA_VERSION, **content)
        plugin = SummaryMetadata.PluginData(plugin_name=HPARAMS_PLUGIN, content=data.SerializeToString())
        return Summary(value=[Summary.Value(tag=tag, metadata=SummaryMetadata(plugin_data=plugin))])

    return [
        summary(HPARAMS_TAGS["experiment"], experiment=experiment),
        summary(HPARAMS_TAGS["session_start_info"], session_start_info=start),
        summary(HPARAMS_TAGS["session_end_info"], session_end_info=end),
    ]
