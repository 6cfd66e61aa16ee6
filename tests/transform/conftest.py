"""Fixtures of the collect tests: a real Agent Lightning 1.0 server and trainer round."""

from tests.fixtures.agl1_server import agl1_env, agl1_model_server, agl1_round, agl1_server  # noqa: F401
