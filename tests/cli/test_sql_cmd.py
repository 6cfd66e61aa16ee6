"""`tracebank sql`: readable tables that say what they cut, vertical rows, ISO times, --param,
statements from a file or stdin, internal tables hidden; machine formats complete."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from tracebank.warehouse.query import TABLES

from tests.fixtures.bronze import commit_collection
from tests.fixtures.proxy_spans import plain_span
from tracebank.cli.main import cli

LONG = "x" * 100 + "\nsecond line"


@pytest.fixture
def filled(wh):
    spans = [
        plain_span(
            f"ro-{i}", f"at-{i}", 1, "note", {"text": LONG if i == 0 else f"n{i}"}, 1_700_000_000.0 + i
        )
        for i in range(3)
    ]
    commit_collection(wh, spans)
    return wh


def _sql(wh, *args, **kw):
    return CliRunner().invoke(cli, ["sql", "-w", str(wh.root), *args], **kw)


def test_show_tables_lists_the_warehouse_tables_only(wh):
    out = _sql(wh, "SHOW TABLES", "--format", "jsonl")
    assert out.exit_code == 0, out.output
    assert sorted(json.loads(line)["name"] for line in out.stdout.splitlines()) == sorted(TABLES)


def test_table_caps_rows_and_widths_and_says_so(filled):
    sql = "SELECT rollout_id, attributes ->> 'text' AS text, start_time FROM spans ORDER BY 1"
    out = _sql(filled, sql, "--max-rows", "2", "--max-width", "12")
    assert out.exit_code == 0, out.output
    assert out.stdout == (
        "rollout_id  text          start_time\n"
        "----------  ------------  -------------------------\n"
        "ro-0        xxxxxxxxxxx…  2023-11-14T22:13:20+00:00\n"
        "ro-1        n1            2023-11-14T22:13:21+00:00\n"
        "(3 rows; showing the first 2 (--max-rows 0 shows all); 1 value cut to 12 characters "
        "(--max-width 0, --format vertical or --format json shows them whole))\n"
    )


def test_machine_formats_are_complete_with_iso_times(filled):
    sql = (
        "SELECT json_extract_string(attributes, '$.text') AS text, start_time FROM spans ORDER BY start_time"
    )
    out = _sql(filled, sql, "--format", "jsonl", "--max-rows", "1")
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert rows[0] == {"text": LONG, "start_time": "2023-11-14T22:13:20+00:00"}
    assert len(rows) == 3
    csv = _sql(filled, sql, "--format", "csv")
    assert csv.stdout.splitlines()[0] == "text,start_time"
    assert "2023-11-14T22:13:22+00:00" in csv.stdout


def test_vertical_shows_one_field_a_line_with_newlines_kept(filled):
    sql = "SELECT rollout_id, attributes ->> 'text' AS text FROM spans WHERE rollout_id = 'ro-0'"
    out = _sql(filled, sql, "--format", "vertical")
    assert out.stdout == (
        "-[ row 1 ]-----------------\n"
        "rollout_id | ro-0\n"
        f"text       | {'x' * 100}\n"
        "           | second line\n"
        "(1 row)\n"
    )


def test_params_file_and_stdin(filled, tmp_path):
    query = tmp_path / "q.sql"
    query.write_text("SELECT rollout_id FROM spans WHERE rollout_id = $rid")
    out = _sql(filled, "-f", str(query), "-p", "rid=ro-2", "--format", "jsonl")
    assert out.stdout == '{"rollout_id": "ro-2"}\n'
    piped = _sql(filled, "-p", "n=1", "--format", "jsonl", input="SELECT count(*) > $n AS more FROM spans")
    assert piped.stdout == '{"more": true}\n'


def test_a_bad_param_is_one_line(filled):
    out = _sql(filled, "SELECT 1", "-p", "oops")
    assert out.exit_code == 2
    assert out.output == "Error: invalid --param 'oops' (use NAME=VALUE and $NAME in the statement)\n"


# Issue 18: bounds, refusals and interrupts of `sql`, each one line. ------------------------------


@pytest.mark.parametrize("option", ["--max-rows", "--max-width"])
def test_negative_limits_are_refused_at_parse_time(filled, option):
    out = _sql(filled, "SELECT 1", option, "-1")
    assert out.exit_code == 2 and "-1 is not in the range x>=0" in out.output, out.output


def _committed_files(wh):
    return {p: p.read_bytes() for p in wh.root.rglob("*.parquet")}


@pytest.mark.parametrize(
    "statement",
    [
        "EXPLAIN /*x*/ ANALYZE COPY (SELECT 42) TO '{path}'",
        "EXPLAIN -- note\n ANALYZE COPY (SELECT 42) TO '{path}'",
        # DuckDB nests comments: it runs EXPLAIN ANALYZE COPY here, behind what looks like a SELECT.
        "/* /* */ EXPLAIN SELECT 1 -- */ EXPLAIN ANALYZE COPY (SELECT 42) TO '{path}' (FORMAT parquet)",
        "EXPLAIN /* /* */ SELECT 1 -- */ ANALYZE COPY (SELECT 42) TO '{path}' (FORMAT parquet)",
    ],
)
def test_explain_analyze_of_a_write_is_refused_in_one_line(filled, statement):
    before = _committed_files(filled)
    target = next(iter(before))
    out = _sql(filled, statement.format(path=target))
    assert out.exit_code == 1, out.output
    assert out.output.startswith("Error: refusing a EXPLAIN COPY statement") or out.output.startswith(
        "Error: refusing a unrecognised EXPLAIN statement"
    ), out.output
    assert out.output.count("\n") == 1
    assert _committed_files(filled) == before


def test_explain_analyze_of_a_select_with_comments_still_runs(filled):
    out = _sql(
        filled, "EXPLAIN /* plan */ ANALYZE -- and time it\n SELECT count(*) FROM spans", "--format", "json"
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)[0]["explain_key"] == "analyzed_plan"


@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [
        (signal.SIGINT, 130, "Interrupted; nothing partial was committed.\n"),
        (signal.SIGTERM, 143, "Terminated by SIGTERM; nothing partial was committed.\n"),
    ],
)
def test_ctrl_c_and_sigterm_end_a_long_query_in_one_line(filled, signum, code, line):
    """A query that would run for hours ends at once with one line and 130 / 143 (DuckDB looks
    for signals only now and then: SIGTERM used to end in a 40-line `Query interrupted` traceback)."""
    import psutil

    endless = "SELECT count(*) FROM range(100000000) a, range(100000000) b"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracebank.cli.main", "sql", endless, "-w", str(filled.root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    try:
        # Running the query: DuckDB's worker threads are up and the CPU is busy.
        watched = psutil.Process(proc.pid)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (
            watched.num_threads() >= 3 and watched.cpu_times().user > 3
        ):
            time.sleep(0.2)
        proc.send_signal(signum)
        started = time.monotonic()
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == code and err == line, err[-2000:]
    assert time.monotonic() - started < 10


def test_sql_imports_neither_pyarrow_nor_pandas(filled):
    """`tracebank sql` builds its views and prints its result from DuckDB alone: pyarrow, numpy and
    pandas (0.1-0.5 s of a fresh process's start) stay unimported, and the answer is still right."""
    probe = (
        "import sys\n"
        "from tracebank.cli.main import cli\n"
        "try:\n"
        f"    cli(['-w', {str(filled.root)!r}, 'sql', 'SELECT count(*) AS n FROM spans', '--format', 'json'],"
        " prog_name='tracebank')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in ('pyarrow', 'numpy', 'pandas', 'polars') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    *result, imported = out.stdout.strip().splitlines()
    assert json.loads("\n".join(result)) == [{"n": 3}]
    assert imported == "[]"
