"""``python scripts/slim_wheel.py WHEEL PATTERN...``: drop the members matching any PATTERN from WHEEL.

The GPU machine takes at most 64 MiB of wheels and tree per call, and some wheels carry what the
train stage never loads (unsloth's web studio, bitsandbytes' libraries for other CUDA versions).
The wheel is rewritten in place with its RECORD listing only what is left, so pip installs it as
any other wheel.
"""

from __future__ import annotations

import fnmatch
import sys
import zipfile
from pathlib import Path


def slim(wheel: Path, patterns: list[str]) -> list[str]:
    """Rewrite ``wheel`` without the members matching ``patterns``; return what was dropped."""
    with zipfile.ZipFile(wheel) as source:
        members = source.infolist()
        dropped = [m.filename for m in members if any(fnmatch.fnmatch(m.filename, p) for p in patterns)]
        record = next(m.filename for m in members if m.filename.endswith(".dist-info/RECORD"))
        partial = wheel.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as target:
            for member in members:
                if member.filename in dropped:
                    continue
                data = source.read(member)
                if member.filename == record:
                    gone = set(dropped)
                    lines = data.decode().splitlines(keepends=True)
                    data = "".join(line for line in lines if line.split(",", 1)[0] not in gone).encode()
                target.writestr(member, data)
    partial.replace(wheel)
    return dropped


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    wheel = Path(argv[0])
    dropped = slim(wheel, argv[1:])
    print(f"{wheel.name}: dropped {len(dropped)} files, {wheel.stat().st_size / 2**20:.1f} MiB left")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
