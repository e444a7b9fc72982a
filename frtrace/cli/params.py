"""What every ``frtrace`` command shares: the dump-set arguments and one-line usage errors.

A wrong command line (an unknown option, a bad ``--format``, a missing value) is one line on
stderr, ``error: ...``, exit code 2, like every other error: click's usage box would bury
the one line that matters.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core
from typer.core import TyperGroup

from frtrace.base.printable import printable
from frtrace.base.progress import Progress
from frtrace.errors import InputError
from frtrace.gate.exitcodes import EXIT_INPUT

if TYPE_CHECKING:
    from frtrace.model import Report
    from frtrace.report.select import Selection

# The click that typer runs on: its own copy since typer 0.2x, the click package before.
_click: Any = getattr(typer.core, "_click", None) or importlib.import_module("click")

__all__ = [
    "AttemptOption",
    "DirArgument",
    "DirOption",
    "EnvFormat",
    "Format",
    "JobsOption",
    "NoCacheOption",
    "OneLineErrors",
    "OnlyOption",
    "PgOption",
    "RanksOption",
    "SchedulerOption",
    "dump_source",
    "end_progress",
    "progress_display",
    "unexpected",
]

# Where an unexpected error is to be reported (printed with it).
REPORT_TO = (
    "please report it to the frtrace maintainers (the issue tracker of the project you "
    "installed it from) with the command and the output of the same command run with "
    "FRTRACE_DEBUG=1"
)


class Format(StrEnum):
    """Output formats of ``analyze``."""

    TEXT = "text"
    JSON = "json"
    MARKDOWN = "markdown"
    HTML = "html"


def renderer(fmt: Format) -> Callable[[Report, Selection | None], str]:
    """The renderer of an output format (imported when asked for)."""
    if fmt == Format.JSON:
        from frtrace.report.json import render_json

        return render_json
    if fmt == Format.MARKDOWN:
        from frtrace.report.markdown import render_markdown

        return render_markdown
    if fmt == Format.HTML:
        from frtrace.report.html import render_html

        return render_html
    from frtrace.report.text import render_text

    return render_text


class EnvFormat(StrEnum):
    """Output formats of ``env``."""

    SHELL = "shell"
    ENV = "env"


DirArgument = Annotated[
    Path | None,
    typer.Argument(
        metavar="[DIR]",
        help="The dumps: a directory with one Flight Recorder dump per rank (searched "
        "recursively), or a .tar, .tar.gz, .tgz or .zip of them. Same as -d.",
        show_default=False,
    ),
]
DirOption = Annotated[
    Path | None,
    typer.Option(
        "--dir",
        "-d",
        help="The dumps, as DIR (for scripts that prefer an option).",
        show_default=False,
    ),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option("--scheduler", help="Read the files on this Dask cluster (tcp://HOST:8786)."),
]
NoCacheOption = Annotated[
    bool, typer.Option("--no-cache", help="Read every dump again; neither use nor fill the cache.")
]
JobsOption = Annotated[
    int | None,
    typer.Option("--jobs", "-j", help="Worker processes for loading (default: all CPUs)."),
]
PgOption = Annotated[
    str | None,
    typer.Option(
        "--pg",
        help="Show only this process group (name, description or label, e.g. 3 or tp).",
    ),
]
RanksOption = Annotated[
    str | None,
    typer.Option("--ranks", help="Show only these ranks, e.g. 0-7,12."),
]
AttemptOption = Annotated[
    int | None,
    typer.Option(
        "--attempt",
        min=0,
        help="Of a restarted job (torchrun --max-restarts, a requeue), analyse this attempt "
        "(0 the first; default the newest): its dumps and its attempt_N logs only.",
    ),
]
OnlyOption = Annotated[
    str | None,
    typer.Option(
        "--only",
        help="Read one dump set of several under DIR: a set name as frtrace prints it "
        "(e.g. 'incident1/rank_*'), or a pattern of paths under DIR (e.g. '*.json').",
    ),
]


# The command's progress displays (frtrace.base.progress), ended before an error line is printed.
_SHOWN: list[Progress] = []


def progress_display(enabled: bool = True) -> Progress:
    """The phases of this command on stderr (none where ``enabled`` is False: -q)."""
    shown = Progress(enabled=enabled)
    _SHOWN[:] = [p for p in _SHOWN if p.enabled]  # (those closed already: nothing to end)
    _SHOWN.append(shown)
    return shown


def end_progress() -> None:
    while _SHOWN:
        _SHOWN.pop().close()


def dump_source(positional: Path | None, option: Path | None) -> Path:
    """The dump directory or archive, given as DIR or as -d DIR (not two different ones)."""
    if positional is not None and option is not None and positional != option:
        raise InputError(
            f"two dump sets given: {positional} and -d {option}; give one (DIR or -d DIR)."
        )
    source = positional if positional is not None else option
    if source is None:
        raise InputError(
            "no dumps given: pass the directory (or .tar.gz/.zip) that holds them, e.g. "
            "frtrace analyze /tmp/dumps"
        )
    return source


def unexpected(exc: BaseException) -> None:
    """Say in one line on stderr that ``exc`` was not expected, and where to report it; the
    traceback too where ``FRTRACE_DEBUG=1``. Never raises (stdout or stderr may be the
    failure: a full disk, a closed pipe, an encoding that cannot show a file name)."""
    debug = os.environ.get("FRTRACE_DEBUG", "").strip().lower() not in ("", "0", "false")
    if debug:
        with contextlib.suppress(Exception):
            traceback.print_exception(exc, file=sys.stderr)
    what = " ".join(str(exc).split())[:300]
    where = "" if debug else f"; {REPORT_TO}"
    _say(f"error: unexpected {type(exc).__name__}: {what}{where}")
    _quiet_stdout()


def _say(line: str) -> None:
    """Write ``line`` to stderr in whatever encoding it has (unencodable text as escapes)."""
    with contextlib.suppress(Exception):
        encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
        text = printable(line).encode(encoding, "backslashreplace").decode(encoding)
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def _quiet_stdout() -> None:
    """Where stdout cannot take what is pending (``> /dev/full``, a closed pipe), point it at
    /dev/null, so that flushing it at exit prints no second error."""
    try:
        sys.stdout.flush()
    except Exception:
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


class OneLineErrors(TyperGroup):
    """A command group whose usage errors are one line on stderr (exit code 2)."""

    def invoke(self, ctx: Any) -> Any:
        """The command; Ctrl-C during it says "interrupted" (exit code 130), where typer
        would end with that code and nothing said."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise typer.Abort() from None

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            code = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except _click.exceptions.NoArgsIsHelpError as exc:  # `frtrace` alone: the help
            if not standalone_mode:
                raise
            _click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message(), err=True)
            sys.exit(exc.exit_code)
        except _click.exceptions.UsageError as exc:
            if not standalone_mode:
                raise
            where = exc.ctx.command_path if exc.ctx else "frtrace"
            message = " ".join(exc.format_message().replace("Value error, ", "").split())
            _click.echo(f"error: {message} (`{where} --help` shows the options)", err=True)
            sys.exit(exc.exit_code)
        except _click.exceptions.ClickException as exc:
            if not standalone_mode:
                raise
            _click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:  # (typer's own class: its bundled click has none)
            if not standalone_mode:
                raise
            end_progress()  # (a terminal's live display would draw over the line)
            _click.echo("interrupted", err=True)
            sys.exit(130)
        except Exception as exc:  # a bug, or a failure nobody foresaw: one line, exit 2
            if not standalone_mode:
                raise
            unexpected(exc)
            sys.exit(EXIT_INPUT)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)
