"""The ``frtrace`` command line: thin, one library call per command.

``app`` holds the shared helpers and the analysis commands (``analyze``, ``check``,
``schema``); ``envcmd`` the job's environment recipe (``env``); ``tables`` the commands on the
loaded tables alone (``show``, ``summary``, ``export``); ``live`` the commands for a job that is
hung now (``collect``, ``compare``); ``params`` the arguments every command shares and the
one-line usage errors; ``coercion`` the values of typer's parameters coerced without pydantic
where they are plain.
"""

from __future__ import annotations

from frtrace.cli import coercion as _coercion
from frtrace.cli import envcmd as _envcmd  # noqa: F401 (registers env)
from frtrace.cli import tables as _tables  # noqa: F401 (registers show, summary, export)
from frtrace.cli import version as _version  # noqa: F401 (registers --version)
from frtrace.cli.app import app, main, run
from frtrace.cli.live import collect, compare

app.command()(collect)
app.command()(compare)
_coercion.install()  # (before any command runs: ~0.1 s of each start)

__all__ = ["app", "main", "run"]
