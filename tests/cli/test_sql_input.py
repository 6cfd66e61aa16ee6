"""The SQL statement from an argument, a file or stdin, and --param values."""

from __future__ import annotations

import io

import pytest
from tracebank.core.errors import UsageError

from tracebank.cli.sql_input import parse_params, read_statement


def test_statement_from_argument_file_or_stdin(tmp_path, monkeypatch):
    assert read_statement("SELECT 1", None) == "SELECT 1"
    path = tmp_path / "q.sql"
    path.write_text("SELECT 2")
    assert read_statement(None, str(path)) == "SELECT 2"
    monkeypatch.setattr("sys.stdin", io.StringIO("SELECT 3"))
    assert read_statement(None, None) == "SELECT 3"
    monkeypatch.setattr("sys.stdin", io.StringIO("SELECT 4"))
    assert read_statement("-", None) == "SELECT 4"


def test_statement_errors_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="not both"):
        read_statement("SELECT 1", "x.sql")
    with pytest.raises(UsageError, match=r"cannot read .*missing.sql"):
        read_statement(None, str(tmp_path / "missing.sql"))


def test_params_are_typed_like_json_else_text():
    assert parse_params(("v=3", "name=demo", "r=0.5", "flag=true", "none=null", "list=[1]")) == {
        "v": 3,
        "name": "demo",
        "r": 0.5,
        "flag": True,
        "none": None,
        "list": "[1]",
    }
    assert parse_params(()) is None
    with pytest.raises(UsageError, match="invalid --param 'x'"):
        parse_params(("x",))
