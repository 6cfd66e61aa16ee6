"""`build_config`: a method's keywords to a stage's config, as the CLI's flags build it."""

from __future__ import annotations

import pytest
from tracebank.core.errors import UsageError
from tracebank.loop import DemoConfig
from tracebank.transform import TransformConfig
from tracebank.transform.config import Agl1Limits, PreferenceRules

from tracebank.api.options import build_config


def test_flat_nested_keywords_land_in_their_groups():
    config = build_config(
        TransformConfig, {"name": "d", "level": "trajectory", "min_margin": 0.5}, "transform"
    )
    assert config.agl1 == Agl1Limits(level="trajectory")
    assert config.preference == PreferenceRules(min_margin=0.5)
    assert config.name == "d"


def test_a_nested_default_of_the_outer_config_is_kept():
    import dataclasses

    demo_train = DemoConfig().train
    class_default = {f.name: f.default for f in dataclasses.fields(demo_train)}["max_steps"]
    assert demo_train.max_steps != class_default  # the case this test is about
    config = build_config(DemoConfig, {"learning_rate": 1e-3}, "demo")
    assert config.train.learning_rate == 1e-3
    assert config.train.max_steps == demo_train.max_steps
    assert config.train == dataclasses.replace(demo_train, learning_rate=1e-3)
    assert config.transform == DemoConfig().transform


def test_an_unknown_keyword_is_one_line_naming_the_method_and_every_valid_one():
    with pytest.raises(UsageError) as raised:
        build_config(TransformConfig, {"name": "d", "top_fractoin": 0.5}, "transform")
    line = raised.value.one_line()
    assert "\n" not in line and line.startswith("transform takes no option 'top_fractoin'")
    for valid in ("top_fraction", "level", "min_margin", "rewards"):
        assert valid in line
    assert "agl1" not in line.split("it takes", 1)[1].replace("agl1_", "")  # groups are not keywords


def test_lists_become_tuples():
    config = build_config(TransformConfig, {"name": "d", "collections": ["a", "b"]}, "transform")
    assert config.collections == ("a", "b")


def test_a_nested_keyword_that_the_config_names_twice_is_refused_not_guessed():
    """DemoConfig nests TransformConfig and TrainConfig: a keyword both hold (``max_length``)
    cannot be put in one of them silently."""
    shared = {f for f in vars(DemoConfig().transform)} & {f for f in vars(DemoConfig().train)}
    shared -= {f for f in vars(DemoConfig())}
    assert shared, "no keyword is shared: nothing to check"
    key = sorted(shared)[0]
    with pytest.raises(UsageError) as raised:
        build_config(DemoConfig, {key: getattr(DemoConfig().train, key)}, "demo")
    assert key in raised.value.one_line() and "\n" not in raised.value.one_line()
