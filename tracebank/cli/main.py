"""The `tracebank` command: one group, one module per command family.

Every command is a thin wrapper over a public library function. Stages are
imported inside the commands so `tracebank --help` and `tracebank sql` start
fast. This is the only place that turns a TracebankError into a message and an
exit code.
"""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys
from typing import Any, NoReturn

import click

from tracebank.cli import warn
from tracebank.cli.options import warehouse_option
from tracebank.core.errors import TracebankError
from tracebank.core.text import visible

# LiteLLM (pulled in by agentlightning) fetches a price map from the internet at
# import time and stalls without network; the bundled copy is enough.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


#: The module that defines each command, and the one-line summary `tracebank --help` lists for
#: it: the module is imported only when that command runs (or shows its own help), so neither a
#: command nor the top-level help pays for every command's stage at start-up. A test keeps each
#: summary equal to the one click takes from the command's docstring.
COMMAND_MODULES = {
    "collect": "collect_cmd",
    "rebuild-silver": "collect_cmd",
    "receive": "receive_cmd",
    "repair-duplicates": "collect_cmd",
    "datasets": "transform_cmd",
    "demo": "demo_cmd",
    "export": "view_cmd",
    "gc": "gc_cmd",
    "inspect": "train_cmd",
    "report": "view_cmd",
    "rescore": "rescore_cmd",
    "round": "demo_cmd",
    "runs": "train_cmd",
    "show": "view_cmd",
    "sql": "sql_cmd",
    "train": "train_cmd",
    "transform": "transform_cmd",
    "verify": "verify_cmd",
}
COMMAND_SUMMARIES = {
    "collect": "Copy new rollouts, attempts and spans from the store at URL into one new collection.",
    "datasets": "List dataset versions, or show one.",
    "demo": "Run the whole loop locally: store, LLM proxy, agent, collect, transform, train.",
    "export": "Export dataset version NAME[@vN] as chat data (OpenAI JSONL, TRL rows or an HF folder).",
    "gc": "Remove scratch, half-saved staging models and temp files of runs and writers that ended "
    "without cleaning up; mark runs whose process is gone as failed.",
    "inspect": "Decode a row of DATASET (NAME or NAME@vN): masked vs trained tokens, length and reward "
    "histograms.",
    "rebuild-silver": "Build the silver tables (llm_calls, rewards, messages) of committed collections "
    "again.",
    "receive": "Receive OpenTelemetry traces (OTLP/HTTP) and commit their LLM calls until stopped.",
    "repair-duplicates": "Keep one copy of every attempt that collects running at once stored twice.",
    "report": "Write a self-contained HTML report (plots and conversations, no network needed).",
    "rescore": "Score every archived rollout with a function of yours, without running the agents again.",
    "round": "One serving round: serve --base-model, proxy it, enqueue --tasks, wait, stop, optionally "
    "train.",
    "runs": "Training runs recorded in the warehouse.",
    "show": "Show a ROLLOUT (or the best/worst N, or a dataset row) as a conversation.",
    "sql": "Run a read-only SQL STATEMENT (or --file PATH, or stdin) over the warehouse views.",
    "train": "Train a LoRA adapter on a dataset version and record the run.",
    "transform": "Build the next version of a dataset (--dataset NAME) from collected spans.",
    "verify": "Check every committed file against the size and sha256 its manifest records (like `git "
    "fsck`); name each damaged file.",
}


class TracebankGroup(click.Group):
    """Runs a command and reports TracebankError as one line (traceback with --debug).

    The line is printed with its control characters made visible and on one line whatever
    it quotes (an id or a message from a trace). Ctrl-C and SIGTERM end any command with one
    line and exit 130 / 143, also when a library turned the interrupt into an error of its own
    (DuckDB answers a SIGTERM during a query with ``RuntimeError: Query interrupted``).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMAND_MODULES, *super().list_commands(ctx)})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, from COMMAND_SUMMARIES: no command module is imported for it."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        # A bare Command cuts a summary exactly as the real one cuts its docstring.
        rows = [(n, click.Command(n, help=COMMAND_SUMMARIES[n]).get_short_help_str(limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(name)
        if module is None:
            return super().get_command(ctx, name)
        commands = importlib.import_module(f"tracebank.cli.{module}").COMMANDS
        return next(c for c in commands if c.name == name)

    def invoke(self, ctx: click.Context) -> Any:
        with warn.shown_as_lines():
            return self._invoke(ctx)

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            # A bad subcommand flag: one line, like every other bad input (click prints three).
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            _fail(exc.format_message() + where, exc.exit_code)
        except KeyboardInterrupt as exc:
            _interrupted(ctx, sigterm=str(exc) == "SIGTERM" or signal.SIGTERM in _RECEIVED)
        except Exception as exc:
            if _RECEIVED and not ctx.meta.get("tracebank.debug"):
                _interrupted(ctx, sigterm=signal.SIGTERM in _RECEIVED)
            known = exc if isinstance(exc, TracebankError) else _reader_error(exc)
            if known is not None:
                if ctx.meta.get("tracebank.debug"):
                    raise
                _fail(known.one_line(), known.exit_code)
            if not isinstance(exc, OSError) or not disk_full(exc) or ctx.meta.get("tracebank.debug"):
                raise
            where = f" writing {exc.filename}" if exc.filename else ""
            _fail(
                f"no space left on the device{where} (free some space and rerun; "
                "nothing partial was committed, `tracebank gc` removes the temp files)",
                1,
            )


def _fail(message: str, exit_code: int) -> NoReturn:
    click.echo(f"Error: {visible(message, keep='')}", err=True)
    sys.exit(exit_code)


def _interrupted(ctx: click.Context, sigterm: bool) -> NoReturn:
    if sigterm:
        click.echo("Terminated by SIGTERM; nothing partial was committed.", err=True)
    else:
        click.echo("Interrupted; nothing partial was committed.", err=True)
    code = 128 + signal.SIGTERM if sigterm else 130
    if ctx.meta.get("tracebank.exit_at_once"):  # a read left running in a thread (`sql`): do not wait
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _reader_error(exc: BaseException) -> TracebankError | None:
    """A DuckDB failure while a command read the warehouse views (a damaged file), as the
    warehouse's own error; None for anything else (a bug: its traceback is shown)."""
    if type(exc).__module__.split(".")[0].lstrip("_") != "duckdb":
        return None
    from tracebank.warehouse.query import duckdb_error

    return duckdb_error(exc)  # type: ignore[arg-type]


def disk_full(exc: OSError) -> bool:
    """Whether ``exc`` says the disk (or quota) is full; pyarrow puts the errno only in its text."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT) or f"[errno {errno.ENOSPC}]" in str(exc)


#: The signals that asked this process to stop (the CLI's exit code and line follow them).
_RECEIVED: list[int] = []


def _terminate_like_ctrl_c(signum: int, frame: Any) -> None:
    """SIGTERM (docker stop, Slurm preemption, `timeout`) ends a command the way Ctrl-C does:
    the run is recorded failed, children stopped, temporary files removed."""
    _RECEIVED.append(signum)
    raise KeyboardInterrupt("SIGTERM" if signum == signal.SIGTERM else "")


@click.group(cls=TracebankGroup, context_settings={"help_option_names": ["-h", "--help"]})
@warehouse_option
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="tracebank")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Durable, SQL-queryable warehouse and trainer for Agent Lightning traces.

    --warehouse/-w goes before or after the command.
    """
    ctx.meta["tracebank.debug"] = debug


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate_like_ctrl_c)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where SIGINT is ignored
        signal.signal(signal.SIGINT, _terminate_like_ctrl_c)
    cli(prog_name="tracebank")


if __name__ == "__main__":
    main()
