"""Options written once and shared by every command: the warehouse, ``--format``, config fields.

Click options built from a config dataclass take their default and help text from the
field and its one-line docstring, so neither is written a second time beside the CLI.
A numeric field's range is declared beside it, ``field(default=..., metadata={"range":
{"min": 1}})`` (the arguments of ``click.IntRange``/``FloatRange``), and checked at parse
time; any int option is at least kept to what a 64-bit column holds.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tracebank.core.text import visible

FORMATS = ("table", "vertical", "csv", "json", "jsonl")
_WAREHOUSE_KEY = "tracebank.warehouse"
_WAREHOUSE_HELP = "Warehouse folder, or s3://BUCKET/PREFIX (default: $TRACEBANK_WAREHOUSE, else ./warehouse)."


def _remember_warehouse(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    # Given after the subcommand, it wins over one given before it.
    if value is not None:
        ctx.meta[_WAREHOUSE_KEY] = value


def warehouse_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--warehouse``/``-w``, accepted on the group and on every command (before or after it)."""
    return click.option(
        "--warehouse",
        "-w",
        "warehouse_path",
        type=str,
        metavar="DIR|URI",
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_remember_warehouse,
        help=_WAREHOUSE_HELP,
    )(f)


def pass_warehouse(f: Callable[..., Any]) -> Callable[..., Any]:
    """Adds ``--warehouse``/``-w`` to a command and passes it the Warehouse (``tracebank.open``) first."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from tracebank.api.warehouse import open as open_warehouse

        path = click.get_current_context().meta.get(_WAREHOUSE_KEY)
        return f(open_warehouse(path), *args, **kwargs)

    return warehouse_option(wrapper)


def format_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--format table|vertical|csv|json|jsonl`` of every command that prints rows."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help=(
            "table: aligned text; vertical: one 'column | value' line per field; csv; "
            "json: one JSON array; jsonl: one JSON object a line."
        ),
    )(f)


def replay_format_option(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--format text|json|yaml`` of a show command whose record a ``command --config`` file replays."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["text", "json", "yaml"]),
        default="text",
        show_default=True,
        help=f"text: readable; json: the whole record; yaml: a `{command} --config` file that reproduces it.",
    )


@functools.cache
def _module_classes(path: str) -> dict[str, ast.ClassDef]:
    """The top-level classes of a source file, parsed once (``inspect.getsource`` per class costs
    more than the rest of the CLI's start)."""
    tree = ast.parse(Path(path).read_text())
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass ``cls``, joined into one line."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = _module_classes(inspect.getfile(klass))[klass.__name__].body
        for node, after in zip(body, body[1:], strict=False):
            is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and is_doc:
                docs[node.target.id] = " ".join(str(after.value.value).replace("``", "").split())  # type: ignore[attr-defined]
    return docs


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _click_type(annotation: Any) -> tuple[Any, bool]:
    """(click type, is_flag) of a field annotation such as ``int | None`` or ``bool``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    base = args[0]
    if base is bool:
        return None, True
    return {int: int, float: float, str: str}.get(base, str), False


class _Int64(click.ParamType):
    """An int a 64-bit column can hold: the type of an int option with no range of its own."""

    name = "integer"
    LIMIT = 2**63

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.INT.convert(value, param, ctx)
        if not -self.LIMIT <= number < self.LIMIT:
            self.fail(f"{value} does not fit in 64 bits (at most {self.LIMIT - 1} either way)", param, ctx)
        return number


def _ranged(click_type: Any, fld: dataclasses.Field[Any]) -> Any:
    """``click_type`` with the field's declared range (``metadata["range"]``) applied."""
    bounds = fld.metadata.get("range")
    if click_type is int:
        return click.IntRange(**bounds) if bounds else _Int64()
    if click_type is float and bounds:
        return click.FloatRange(**bounds)
    return click_type


def _is_optional(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def config_option(
    cls: type, name: str, *flags: str, help: str | None = None, **extra: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A click option for field ``name`` of ``cls``: default and help come from the field.

    ``flags`` default to ``--field-name``; ``help`` replaces the docstring where the
    CLI needs a different wording; ``extra`` goes to ``click.option`` as it is.
    """
    fld = {f.name: f for f in dataclasses.fields(cls)}[name]
    hints = _type_hints(cls)
    click_type, is_flag = _click_type(hints[name])
    default = fld.default if fld.default is not dataclasses.MISSING else None
    kwargs: dict[str, Any] = {
        "default": default,
        "help": help or field_docs(cls)[name],
        "show_default": default is not None and not is_flag,
    }
    if is_flag:
        kwargs["is_flag"] = True
    elif click_type is not None:
        kwargs["type"] = _ranged(click_type, fld)
    kwargs.update(extra)
    flag = "--" + name.removesuffix("_s").replace("_", "-")
    if is_flag and _is_optional(hints[name]):
        # None means "decide for me": --x/--no-x with no default of their own.
        kwargs.pop("is_flag")
        flag = f"{flag}/--no-{flag[2:]}"
    names = flags or (flag,)
    return click.option(*names, name, **kwargs)


CONFIG_FILE_KEY = "tracebank.config_file"


def config_file_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--config FILE.yaml``: a command's option values from a YAML mapping.

    Keys are the option names as on the command line (``base-model`` or ``base_model``;
    ``lr`` or ``learning_rate``); a list goes to a comma-separated option as ``a,b``. Values
    become the command's defaults, so a flag given on the command line wins over the file.
    """
    return click.option(
        "--config",
        "config_file",
        type=click.Path(dir_okay=False),
        metavar="FILE.yaml",
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_load_config_file,
        help="Option values from a YAML file (keys are the option names); flags given here win.",
    )(f)


def _load_config_file(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    values = config_file_values(ctx.command, read_config_file(value), value)
    ctx.default_map = {**(ctx.default_map or {}), **values}
    ctx.meta[CONFIG_FILE_KEY] = value


#: The largest config file read: option values fit in a few KB.
MAX_CONFIG_BYTES = 1 << 20


@functools.cache
def _loader() -> type:
    """A safe YAML loader that refuses aliases: expanding ``*name`` under an option (a billion
    laughs) would build gigabytes from a few lines, and an option file never needs one."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, "aliases are not allowed", mark)
            return super().compose_node(parent, index)

    return NoAliasLoader


def read_config_file(path: str) -> dict[str, Any]:
    """The mapping a YAML config file holds (an empty file is an empty mapping); a file over
    :data:`MAX_CONFIG_BYTES` or one using YAML aliases is refused in one line."""
    import yaml

    from tracebank.core.errors import UsageError

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_CONFIG_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UsageError(f"cannot read config file {path}: {reason or exc}") from exc
    if len(text) > MAX_CONFIG_BYTES:
        raise UsageError(f"config file {path} is over {MAX_CONFIG_BYTES >> 10} KB", "options fit in less")
    try:
        data = yaml.load(text, Loader=_loader())  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        if getattr(exc, "problem", None) == "aliases are not allowed":
            raise UsageError(
                f"config file {path} uses a YAML alias{line}", "write each value out: aliases are not allowed"
            ) from exc
        raise UsageError(f"config file {path} is not valid YAML{line}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must be a mapping of option names to values")
    return data


def option_names(command: click.Command) -> dict[str, click.Parameter]:
    """Every name a config file may use for each option of ``command`` (underscored)."""
    names: dict[str, click.Parameter] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.hidden or param.name in (None, "config_file"):
            continue  # a hidden option is an old name: files use the current one
        for alias in (param.name, *(opt.lstrip("-") for opt in param.opts if opt.startswith("--"))):
            names[alias.replace("-", "_")] = param
    return names


def config_file_values(command: click.Command, data: dict[str, Any], source: str) -> dict[str, Any]:
    """``data``'s values keyed by ``command``'s parameter names; unknown keys are refused."""
    from tracebank.core.errors import UsageError

    names = option_names(command)
    unknown = sorted(str(k) for k in data if str(k).replace("-", "_") not in names)
    if unknown:
        raise UsageError(
            f"config file {source} has unknown option(s) {', '.join(unknown)}",
            f"`tracebank {command.name} --help` lists the options",
        )
    _refuse_command_line_only(names, data, source)
    values: dict[str, Any] = {}
    for key, value in data.items():
        param = names[str(key).replace("-", "_")]
        if isinstance(value, list) and not param.multiple:
            value = ",".join(str(v) for v in value)
        elif param.multiple and not isinstance(value, list):
            value = [value]  # one value of a repeatable option
        elif isinstance(value, dict):
            import json

            value = json.dumps(value)
        values[str(param.name)] = value
    return values


def _refuse_command_line_only(names: dict[str, click.Parameter], data: dict[str, Any], source: str) -> None:
    """Refuse a key naming where tracebank reads or connects (`warehouse.replay.COMMAND_LINE_ONLY`):
    a config file may be a replayed record, and those come from the command line or the environment."""
    from tracebank.core.errors import UsageError
    from tracebank.warehouse.replay import COMMAND_LINE_ONLY

    for key in data:
        param = names[str(key).replace("-", "_")]
        aliases = {alias for alias, p in names.items() if p is param}
        for name in sorted(aliases & COMMAND_LINE_ONLY.keys()):
            raise UsageError(
                f"config file {source} sets {key}, which only the command line chooses",
                f"drop it from the file and pass {COMMAND_LINE_ONLY[name]}",
            )


def given_on_command_line(ctx: click.Context, names: list[str]) -> list[str]:
    """Which of ``names`` (parameter names) the command line set itself."""
    return [n for n in names if ctx.get_parameter_source(n) is click.core.ParameterSource.COMMANDLINE]


def flag_names(command: click.Command) -> dict[str, str]:
    """Each option's parameter name -> its flag without dashes (``learning_rate`` -> ``lr``)."""
    return {
        str(p.name): p.opts[0].lstrip("-")
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden
    }


def config_yaml(command: click.Command, settings: dict[str, Any], head: str) -> str:
    """A ``--config`` file of ``command``: ``settings`` (keyed by parameter name) under their flags'
    names in the command's option order, after the comment lines ``head``; unset values (None, {})
    and non-options are left out."""
    import yaml

    body = {  # in the command's option order, as --help lists them
        flag: settings[name]
        for name, flag in flag_names(command).items()
        if settings.get(name) is not None and settings[name] != {}
    }
    # The comment quotes manifest fields (a bucket's, maybe hostile): YAML escapes the values, not this.
    comments = "".join(f"# {visible(line, keep='')}\n" for line in head.splitlines())
    return comments + yaml.safe_dump(body, sort_keys=False)
