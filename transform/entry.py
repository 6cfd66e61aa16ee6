"""`transform`: committed collections to a new, immutable dataset version ``NAME@vN``.

The one entry of the stage. ``config.engine`` says where the rows are built (``local``: this
process; ``ray``: Ray Data jobs on a cluster) and ``config.rules`` which rows (``recipe``: 0.3's
recipe; ``agl1``: 1.0's RolloutAdapter). :data:`BUILDERS` is the one table of which engine
builds which rule set; a pair not in it is refused before anything is read. Every builder
ends in the same tail (``transform.version``: reserve, hash, "identical to vN", commit or
abandon).

This module is the top of the stage: it imports the builders, and nothing in the stage imports it.
"""

from __future__ import annotations

from collections.abc import Callable

from tracebank.transform.agl1_build import build_agl1
from tracebank.transform.config import TransformConfig
from tracebank.transform.errors import TransformUsageError
from tracebank.transform.inputs import Chosen, choose_collections
from tracebank.transform.local_engine import build_recipe_locally
from tracebank.transform.preference_build import build_preference
from tracebank.transform.ray_engine import build_recipe_on_ray
from tracebank.transform.version import TransformResult
from tracebank.warehouse.location import Warehouse

Builder = Callable[[Warehouse, TransformConfig, Chosen], TransformResult]

#: (engine, rule set) -> what builds and commits that version: the one place a pair is declared.
BUILDERS: dict[tuple[str, str], Builder] = {
    ("local", "recipe"): build_recipe_locally,
    ("local", "agl1"): build_agl1,
    ("ray", "recipe"): build_recipe_on_ray,
    ("local", "preference"): build_preference,  # --kind preference: pairs instead of a rule set's rows
}


def check(config: TransformConfig) -> Builder:
    """The builder of ``config``'s engine and rule set; TransformUsageError on a bad option or an
    engine that does not build the rule set."""
    config.validate()
    rows = "preference" if config.kind == "preference" else config.rules
    builder = BUILDERS.get((config.engine, rows))
    if builder is None:
        engines = [e for e, r in BUILDERS if r == rows]
        what = "--kind preference" if config.kind == "preference" else f"--rules {config.rules}"
        raise TransformUsageError(
            f"--engine {config.engine} does not build {what}",
            f"use --engine {' or '.join(engines)}",
        )
    return builder


def transform(wh: Warehouse, config: TransformConfig) -> TransformResult:
    """Build and commit the next version of ``config.name`` (see the module docstring)."""
    wh.check_format()
    build = check(config)
    return build(wh, config, choose_collections(wh, config.collections))
