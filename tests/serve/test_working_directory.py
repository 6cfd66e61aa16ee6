"""The CPU server child starts from a project folder that holds its own serve.py, train.py, ..."""

from __future__ import annotations

import json
import urllib.request

from tracebank.serve.process import start_cpu_server

from tests.fixtures.shadow import shadowing_project


def test_cpu_server_starts_from_a_folder_with_a_serve_py(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(shadowing_project(tmp_path / "project"))
    with (
        start_cpu_server(
            tiny_model_dir, served_model_name="tiny", log_path=tmp_path / "log", threads=1
        ) as server,
        urllib.request.urlopen(f"{server.base_url}/models", timeout=10) as reply,
    ):
        models = json.load(reply)
    assert [m["id"] for m in models["data"]] == ["tiny"]
