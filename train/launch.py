"""``python -m tracebank.train.launch TORCHRUN_ARGS...``: torchrun for the training child.

It is torchrun (``torch.distributed.run``) with one addition: it ends its process group when
the tracebank process that started it is gone, as the single child does. Each rank then runs
``tracebank.train.child`` and ends when this launcher is gone, so a killed ``tracebank train``
leaves no rank behind.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    from tracebank.train.child import end_with_parent

    end_with_parent(os.getppid())
    from torch.distributed.run import main as torchrun

    torchrun(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
