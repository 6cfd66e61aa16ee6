"""Keyword arguments to a stage's config, written once for every method of the Warehouse.

A method's keywords are its CLI command's flags with underscores: the fields of the stage's config
class, and the fields of a config nested in it (``TransformConfig.agl1``'s ``level``...) given
flat, as the command line gives them. The CLI passes what it parsed, so a script and the command
build the same config.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, TypeVar

from tracebank.core.errors import UsageError

C = TypeVar("C")


def _nested(cls: type) -> dict[str, type]:
    """The fields of ``cls`` that are config dataclasses themselves, with their classes."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: hints[f.name]
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if isinstance(hints.get(f.name), type) and dataclasses.is_dataclass(hints[f.name])
    }


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]


def build_config(cls: type[C], options: dict[str, Any], command: str) -> C:
    """``cls`` from ``options``: its own fields, and a nested config's fields given flat; a list
    where the field holds a tuple is taken as one; an unknown keyword is one line naming them all."""
    own, nested = _field_names(cls), _nested(cls)
    top: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {name: {} for name in nested}
    for key, value in options.items():
        value = tuple(value) if isinstance(value, list) else value
        if key in own:
            top[key] = value
            continue
        owners = [name for name, sub in nested.items() if key in _field_names(sub)]
        if not owners:
            known = sorted((own - set(nested)) | {n for sub in nested.values() for n in _field_names(sub)})
            raise UsageError(f"{command} takes no option {key!r}", f"it takes {', '.join(known)}")
        if len(owners) > 1:  # putting it in one of them would be a guess
            raise UsageError(
                f"{command}'s option {key!r} belongs to {' and '.join(owners)}",
                f"pass {owners[0]}=dataclasses.replace(..., {key}=...) for the one you mean",
            )
        groups[owners[0]][key] = value
    for name, values in groups.items():
        if values:
            base = top.get(name) or _default(cls, name)
            top[name] = dataclasses.replace(base, **values)
    return cls(**top)


def _default(cls: type, name: str) -> Any:
    """The default of ``cls``'s field ``name`` (a demo's train settings are not TrainConfig's)."""
    fld = {f.name: f for f in dataclasses.fields(cls)}[name]  # type: ignore[arg-type]
    if fld.default_factory is not dataclasses.MISSING:
        return fld.default_factory()
    return fld.default
