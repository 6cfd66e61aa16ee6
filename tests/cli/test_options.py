"""The options written once: --warehouse anywhere, --format, options built from config fields."""

from __future__ import annotations

import dataclasses
import json

import click
import pyarrow as pa
import pytest
from click.testing import CliRunner
from tracebank.loop.config import DemoConfig, RoundConfig, ServerConfig, StagesConfig
from tracebank.train.config import TrainConfig
from tracebank.transform.config import TransformConfig
from tracebank.warehouse.location import Warehouse

from tests.cli_args import cli_args
from tracebank.cli.main import cli
from tracebank.cli.options import config_option, field_docs, pass_warehouse
from tracebank.cli.output import render


def test_sql_takes_the_warehouse_before_or_after(wh, warehouse_position):
    out = CliRunner().invoke(
        cli, cli_args(wh.root, warehouse_position, "sql", "SELECT 1 AS n", "--format", "jsonl")
    )
    assert out.exit_code == 0, out.output
    assert out.stdout == '{"n": 1}\n'


def test_the_warehouse_after_the_command_wins(wh, tmp_path):
    seen = []

    @click.command()
    @pass_warehouse
    def show(warehouse):
        seen.append(warehouse.root)

    group = click.Group(commands={"show": show})
    from tracebank.cli.options import warehouse_option

    group = warehouse_option(group)
    CliRunner().invoke(group, ["--warehouse", str(tmp_path / "a"), "show", "-w", str(wh.root)])
    CliRunner().invoke(group, ["show"], env={"TRACEBANK_WAREHOUSE": str(tmp_path / "env")})
    assert seen == [wh.root, (tmp_path / "env").resolve()]


def _table() -> pa.Table:
    return pa.table({"id": [1, 2], "doc": [{"k": "x" * 80}, None]})


def test_render_formats_exactly():
    long = json.dumps({"k": "x" * 80})
    assert render(_table(), "jsonl") == f'{{"id": 1, "doc": {long}}}\n{{"id": 2, "doc": null}}'
    assert render(_table(), "json") == f'[{{"id": 1, "doc": {long}}},\n {{"id": 2, "doc": null}}]'
    assert render(_table(), "csv") == f'id,doc\n1,"{long.replace(chr(34), 2 * chr(34))}"\n2,'
    shown = long[:57] + "..."
    assert render(_table(), "table") == (
        f"id  doc{' ' * 57}\n--  {'-' * 60}\n1   {shown}\n2\n(2 rows)".replace(f"doc{' ' * 57}", "doc")
    )


def test_render_of_no_rows():
    empty = pa.table({"id": pa.array([], pa.int64())})
    assert (render(empty, "jsonl"), render(empty, "json"), render(empty, "csv")) == ("", "[]", "id")


@pytest.mark.parametrize(
    "cls", [TransformConfig, TrainConfig, ServerConfig, StagesConfig, RoundConfig, DemoConfig]
)
def test_every_config_field_has_a_one_line_doc(cls):
    docs = field_docs(cls)
    assert {f.name for f in dataclasses.fields(cls)} <= set(docs)
    assert all(docs.values()) and not any("\n" in d for d in docs.values())


def test_config_option_takes_default_and_help_from_the_field():
    @click.command()
    @config_option(TransformConfig, "top_fraction")
    @config_option(TransformConfig, "dedup")
    def cmd(top_fraction, dedup):
        click.echo(f"{top_fraction} {dedup}")

    assert CliRunner().invoke(cmd, []).stdout == "1.0 False\n"
    assert CliRunner().invoke(cmd, ["--top-fraction", "0.5", "--dedup"]).stdout == "0.5 True\n"
    text = CliRunner().invoke(cmd, ["--help"]).stdout
    assert "Keep the top max(1, int(n*F)) rows" in " ".join(text.split())


def test_every_option_of_every_command_has_help():
    def commands(group, path=()):
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                yield from commands(command, (*path, name))
            else:
                yield (*path, name), command

    missing = [
        (path, p.name)
        for path, command in commands(cli)
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden and not p.help
    ]
    assert missing == []


def test_every_command_is_routed_to_the_module_that_defines_it():
    """The lazy command table names each command of every ``*_cmd`` module, and only those."""
    import importlib
    from pathlib import Path

    from tracebank.cli.main import COMMAND_MODULES

    folder = Path(importlib.import_module("tracebank.cli").__file__).parent
    defined = {
        command.name: path.stem
        for path in sorted(folder.glob("*_cmd.py"))
        for command in importlib.import_module(f"tracebank.cli.{path.stem}").COMMANDS
    }
    assert defined == COMMAND_MODULES


@pytest.mark.parametrize("limit", [45, 80, 10_000])
def test_the_help_summaries_are_the_commands_own(limit):
    """`tracebank --help` lists each command with the summary click takes from its docstring,
    cut at the same width, although it imports no command module to do so."""
    from tracebank.cli.main import COMMAND_SUMMARIES

    group = cli
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        summary = click.Command(name, help=COMMAND_SUMMARIES[name]).get_short_help_str(limit)
        assert summary == command.get_short_help_str(limit), name


def test_top_level_help_lists_every_command():
    out = CliRunner().invoke(cli, ["--help"], terminal_width=100)
    assert out.exit_code == 0
    listed = out.output.split("Commands:\n", 1)[1]
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    assert names == sorted(cli.list_commands(click.Context(cli)))


BAD_NUMBERS = [
    (["transform", "--dataset", "d", "--max-length", "99999999999999999999999"], "--max-length", "64 bits"),
    (["transform", "--dataset", "d", "--per-task", "-99999999999999999999999"], "--per-task", "64 bits"),
    (["transform", "--dataset", "d", "--top-fraction", "lots"], "--top-fraction", "not a valid float"),
    (["collect", "--concurrency", "1" + "0" * 30], "--concurrency", "64 bits"),
    (["collect", "--read-timeout", "0"], "--read-timeout", "x>0"),
    (["sql", "--max-rows", "-1", "SELECT 1"], "--max-rows", "x>=0"),
    (["demo", "--rollouts", "0"], "--rollouts", "x>=1"),
]


@pytest.mark.parametrize(("args", "flag", "why"), BAD_NUMBERS, ids=[b[1] for b in BAD_NUMBERS])
def test_a_number_out_of_range_is_one_line_at_parse_time(wh, args, flag, why):
    out = CliRunner().invoke(cli, ["--warehouse", str(wh.root), *args])
    assert out.exit_code == 2 and out.stdout == "" and "Traceback" not in out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"Error: Invalid value for '{flag}': ") and why in line
    assert line.endswith(f" {args[0]} --help`)")


def test_a_declared_range_is_shown_in_help_and_read_from_the_field():
    @click.command()
    @config_option(DemoConfig, "rollouts")
    def show(rollouts):
        click.echo(rollouts)

    fields = {f.name: f for f in dataclasses.fields(DemoConfig)}
    assert fields["rollouts"].metadata["range"] == {"min": 1}
    assert "x>=1" in CliRunner().invoke(show, ["--help"]).stdout
    assert CliRunner().invoke(show, ["--rollouts", "3"]).stdout == "3\n"
    assert CliRunner().invoke(show, ["--rollouts", "0"]).exit_code == 2


def test_a_config_file_head_shows_control_characters_visibly():
    """The comment atop `runs show` / `datasets show --format yaml` quotes manifest fields, which a
    bucket neighbour may have written: an escape sequence there is shown, not sent to the terminal."""
    from tracebank.cli.options import config_yaml

    out = config_yaml(cli, {}, "content hash \x1b]0;owned\x07\x1b[2J")
    assert out == "# content hash \u241b]0;owned\u2407\u241b[2J\n{}\n"


def _with_config(wh, tmp_path, command, text, *args):
    config = tmp_path / "f.yaml"
    config.write_text(text)
    return CliRunner().invoke(cli, ["-w", str(wh.root), command, "--config", str(config), *args])


def _one_error_line(result, *parts):
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    assert all(part in lines[0] for part in parts), lines[0]


@pytest.mark.parametrize("key", ["warehouse", "address", "rdzv-endpoint"])
def test_a_config_file_cannot_choose_the_warehouse_or_where_to_connect(wh, tmp_path, monkeypatch, key):
    """A config file's `warehouse:` beat -w and $TRACEBANK_WAREHOUSE; a replayed file may not
    name a Ray address or a rendezvous either: the command line and the environment choose those."""
    elsewhere = Warehouse(tmp_path / "elsewhere").init()
    monkeypatch.setenv("TRACEBANK_WAREHOUSE", str(wh.root))
    before = sorted(elsewhere.root.rglob("*"))
    command = "train" if key == "rdzv-endpoint" else "transform"
    value = {"warehouse": str(elsewhere.root), "address": "127.0.0.1:1", "rdzv-endpoint": "127.0.0.1:1"}[key]
    result = _with_config(wh, tmp_path, command, f"dataset: d\n{key}: {value}\n")
    _one_error_line(result, f"sets {key}, which only the command line chooses")
    assert sorted(elsewhere.root.rglob("*")) == before


def test_yaml_aliases_in_a_config_file_are_refused_at_once(wh, tmp_path):
    """A billion laughs under real option keys took ~3 GB and a minute (the nested lists were
    joined into one option value); an alias is refused in one line before anything else."""
    plain = _with_config(wh, tmp_path, "transform", "dataset: d\ncollection: &c [c1]\nseed: 1\n")
    assert plain.exit_code != 0 and "YAML alias" not in plain.output  # an anchor alone is harmless
    laughs = "dataset: d\ncollection: &a0 [lol, lol]\n" + "".join(
        f"{key}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n"
        for i, key in enumerate(("dedup", "merge", "seed", "per-task", "max-length"), start=1)
    )
    _one_error_line(_with_config(wh, tmp_path, "transform", laughs), "uses a YAML alias (line 3)")


def test_a_config_file_over_a_megabyte_is_refused_in_one_line(wh, tmp_path):
    result = _with_config(wh, tmp_path, "transform", "dataset: d\n" + "# padding\n" * 120_000)
    _one_error_line(result, "is over 1024 KB")
