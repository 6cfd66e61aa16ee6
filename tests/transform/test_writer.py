"""The write path of a warm transform: what a fresh `tracebank transform` process pays for."""

from __future__ import annotations

import subprocess
import sys

from tracebank.warehouse.location import Warehouse

from tests.fixtures.bronze import commit_collection
from tests.transform.oracle import scenario

# pyarrow.compute generates its kernels' wrappers at import (~0.08 s), numpy.ma comes with
# np.quantile (~0.01 s), pandas with several pyarrow conversions (~0.3 s), DuckDB only builds silver.
NOT_IN_A_WARM_TRANSFORM = ("pyarrow.compute", "numpy.ma", "pandas", "duckdb")


def test_a_warm_transform_imports_nothing_it_does_not_need(tmp_path):
    wh = Warehouse(tmp_path / "warehouse").init()
    sc = scenario(seed=4, n_random=12)
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts, collection_id="c1")
    code = (
        "import sys\n"
        "from tracebank.cli.main import main\n"
        f"sys.argv = ['tracebank', '--warehouse', {str(wh.root)!r}, 'transform', '--dataset', 'ds']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        f"print(sorted(m for m in {NOT_IN_A_WARM_TRANSFORM!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "wrote ds@v1" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
