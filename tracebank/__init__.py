"""tracebank: a durable, SQL-queryable warehouse and standalone trainer for Agent Lightning traces.

The repository keeps each stage in a top-level folder (``collect/``, ``transform/``,
``train/``, ``warehouse/``, ...); installation maps them into this namespace
(``tracebank.collect``, ...) so a user's own ``train.py`` can never shadow them.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tracebank")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
