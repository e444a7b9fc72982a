"""``frtrace env``: the environment recipe that makes a job record and dump.

Registered on :data:`frtrace.cli.app.app` by :mod:`frtrace.cli`; the recipe itself is
:mod:`frtrace.job.env` (one list with ``frtrace.recorder.enable()``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from frtrace.cli.app import _echo, _fail, app
from frtrace.cli.params import EnvFormat
from frtrace.job.env import DEFAULT_BUFFER_SIZE, DEFAULT_DUMP_DIR

__all__ = ["env"]


@app.command()
def env(
    dump_dir: Annotated[
        str,
        typer.Option("--dir", "-d", help="Where the job's ranks write their dumps (yours alone)."),
    ] = DEFAULT_DUMP_DIR,
    torch_version: Annotated[
        str | None,
        typer.Option(
            "--torch",
            help="Only the names this torch version reads, e.g. 2.4 (default: the torch "
            "installed here; none: every name).",
        ),
    ] = None,
    buffer_size: Annotated[
        int, typer.Option("--buffer-size", help="Ring buffer entries per process.", min=1)
    ] = DEFAULT_BUFFER_SIZE,
    watch: Annotated[
        int | None,
        typer.Option(
            "--watch",
            help="Add FRTRACE_WATCH=SECONDS: an op pending this long makes every rank dump "
            "and writes the report (torch 2.5+).",
            min=1,
        ),
    ] = None,
    fmt: Annotated[
        EnvFormat, typer.Option("--format", "-f", help="shell: export lines; env: KEY=VALUE.")
    ] = EnvFormat.SHELL,
) -> None:
    """Print the environment that makes a job record and dump what frtrace needs.

    \b
    Example:
      eval "$(frtrace env --dir /shared/fr_dumps)"     # then start the job from this shell
      frtrace env --torch 2.4 --format env > fr.env    # KEY=VALUE lines, for docker or k8s
      frtrace env --dir /shared/fr_dumps --watch 300   # the job watches itself for stalls
    """
    from frtrace.job.env import WATCH_SINCE, installed_torch, parse_version, render_env

    try:
        version = parse_version(torch_version) if torch_version else installed_torch()
    except ValueError as exc:
        raise _fail(f"--torch: {exc}") from None
    if watch is not None and version is not None and version < WATCH_SINCE:
        raise _fail(f"--watch: FRTRACE_WATCH needs torch 2.5 or later, not {torch_version}")
    text = render_env(
        dump_dir,
        torch_version=version,
        buffer_size=buffer_size,
        fmt=str(fmt),
        watch=watch,
        installed=version is not None and not torch_version,
    )
    _echo(text, nl=False)
