"""CpuServerConfig owns the CPU server's flags: the command line is written from it and parsed back."""

from __future__ import annotations

from pathlib import Path

from tracebank.serve.config import CpuServerConfig
from tracebank.serve.cpu_server import parse_args
from tracebank.serve.process import cpu_server_command


def test_the_command_line_parses_back_to_the_same_config():
    config = CpuServerConfig(
        model=Path("/m/v0"), port=8123, served_model_name="toy", max_model_len=64, threads=1
    )
    cmd = cpu_server_command(config)
    assert cmd[1:4] == ["-P", "-m", "tracebank.serve.cpu_server"]
    assert cmd[4:] == [
        "--model", "/m/v0", "--host", "127.0.0.1", "--port", "8123", "--served-model-name", "toy",
        "--max-model-len", "64", "--default-max-tokens", "256", "--threads", "1",
    ]  # fmt: skip
    assert parse_args(cmd[4:]) == config


def test_unset_flags_take_the_config_defaults():
    assert parse_args(["--model", "m"]) == CpuServerConfig(model=Path("m"))
