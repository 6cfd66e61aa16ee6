"""`make bench`: run every benchmark module and write BENCHMARKS.md.

Each module in SECTIONS exposes ``run() -> str`` returning a Markdown section
with its own numbers; this file adds the machine and the date.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import platform
import sys
from pathlib import Path

SECTIONS = (
    "bench.startup_bench",
    "bench.collect_bench",
    "bench.transform_bench",
    "bench.scale_bench",
    "bench.s3_bench",
    "bench.train_bench",
    "bench.serve_bench",
    "bench.agl1_bench",
    "bench.import_bench",
)


def machine() -> str:
    import psutil

    mem = psutil.virtual_memory().total / 2**30
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{mem:.0f} GiB RAM, Python {platform.python_version()}, {platform.system()}"
    )


def main(argv: list[str]) -> int:
    only = set(argv)
    parts = [
        "# Benchmarks",
        "",
        f"Written by `make bench` on {dt.date.today().isoformat()}; machine: {machine()}.",
        "Each section states what it compares; every number comes from one run of that section.",
        "",
    ]
    for name in SECTIONS:
        short = name.split(".")[-1].removesuffix("_bench")
        if only and short not in only:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        print(f"== {short}", flush=True)
        section = module.run()
        print(section, flush=True)
        parts += [section.rstrip(), ""]
    out = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"
    if only and out.exists():
        print("(partial run: BENCHMARKS.md left as is; numbers printed above)")
        return 0
    out.write_text("\n".join(parts))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
