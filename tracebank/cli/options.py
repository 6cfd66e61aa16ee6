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
    """Adds ``--warehouse``/``-w`` to a command and passes it the resolved Warehouse first."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from tracebank.warehouse.location import Warehouse

        path = click.get_current_context().meta.get(_WAREHOUSE_KEY)
        return f(Warehouse.resolve(path), *args, **kwargs)

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


def show_format_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--format text|json`` of every command that shows one record."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="text: readable; json: the whole record as one JSON document.",
    )(f)


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
