"""`tracebank receive`: parses its flags, makes one call on the Warehouse (which serves until
stopped) and prints what it committed."""

from __future__ import annotations

from typing import Any

import click

from tracebank.cli.options import config_option, pass_warehouse
from tracebank.cli.output import say
from tracebank.collect.config import ReceiveConfig


@click.command()
@config_option(ReceiveConfig, "port", metavar="N")
@config_option(ReceiveConfig, "host", metavar="ADDR")
@config_option(ReceiveConfig, "allow_remote")
@config_option(ReceiveConfig, "token_env", metavar="VAR")
@config_option(ReceiveConfig, "batch_seconds", metavar="S")
@config_option(ReceiveConfig, "max_body", metavar="BYTES")
@config_option(ReceiveConfig, "spool", metavar="DIR")
@pass_warehouse
def receive(wh: Any, **options: Any) -> None:
    """Receive OpenTelemetry traces (OTLP/HTTP) and commit their LLM calls until stopped.

    Point an OTLP/HTTP exporter at http://HOST:PORT/v1/traces (protobuf or JSON). Every trace's
    LLM spans (GenAI semantic conventions or OpenInference) become one conversation, committed
    through collect once the trace was quiet for --batch-seconds; Ctrl-C or SIGTERM commits what
    is held, then exits.
    """

    def ready(url: str) -> None:
        say(f"receiving OTLP traces at {url} (Ctrl-C to stop)")

    result = wh.receive(on_ready=ready, **options)
    for warning in result.warnings:
        say(f"Warning: {warning}", err=True)
    for line in result.summary_lines():
        say(line)


COMMANDS = [receive]
