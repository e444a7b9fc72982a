"""``frtrace --version``: what is installed, and whether the C reader is used.

Registered on :data:`frtrace.cli.app.app` by :mod:`frtrace.cli` (the group's callback).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from frtrace.cli.app import _echo, app
from frtrace.gate.exitcodes import EXIT_OK

__all__ = ["versions"]


def versions() -> str:
    """frtrace's version, whether its C reader is used (and why not), and the versions of
    Python, pyarrow and torch (torch's read from its metadata: never imported)."""
    import importlib.metadata
    import importlib.util
    import platform

    from frtrace import __version__
    from frtrace.load.hooks import c_reader

    def version_of(name: str) -> str:
        try:
            found = importlib.util.find_spec(name) is not None  # (finds it, imports nothing)
        except (ImportError, ValueError):
            found = False
        if not found:
            return "not installed"
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "installed (version unknown)"

    reason, where = c_reader()
    reader = f"active ({where})" if reason is None else f"off: {reason}"
    python = f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})"
    return "\n".join(
        (
            f"frtrace {__version__}",
            f"C reader: {reader}",
            f"Python: {python}",
            f"pyarrow: {version_of('pyarrow')}",
            f"torch: {version_of('torch')}",
        )
    )


def _print_versions(value: bool) -> None:
    if value:
        _echo(versions())
        raise typer.Exit(code=EXIT_OK)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version, whether the C reader is used, and the versions of "
            "Python, pyarrow and torch.",
            is_eager=True,
            callback=_print_versions,
        ),
    ] = False,
) -> None:
    """Which rank hung the job, and why: analyse PyTorch Flight Recorder dumps."""
