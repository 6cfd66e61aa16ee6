"""core: what every layer uses, below the warehouse and the stages.

The error hierarchy (``errors``), typed progress events (``events``), lazily loaded package
exports (``lazy``), terminal-safe text (``text``), the output guard (``outputs``), machine facts
(``machine``), the memory policy (``memory``), Arrow helpers (``arrowutil``) and installed
versions (``versions``). It imports no
other tracebank package, so the warehouse, every stage, the API and the CLI may all import it.
"""
