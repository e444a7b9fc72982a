"""The recorder's exception hooks: a rank dumps when an exception ends it (the main thread's
or another thread's), then the hooks that were there run as before."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType

__all__ = ["install_excepthooks"]

# (why, a line saying the exception, the frame it was raised in)
OnException = Callable[[str, str, FrameType | None], None]


def install_excepthooks(
    on_exception: OnException, max_detail: int
) -> tuple[Callable[..., object], Callable[..., object]]:
    """Hook ``sys.excepthook`` and ``threading.excepthook`` (KeyboardInterrupt and
    SystemExit aside); return the hooks they replace, to put back."""
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if not issubclass(exc_type, KeyboardInterrupt):
            detail = _exception_detail(exc_type, exc, max_detail)
            on_exception(f"unhandled {exc_type.__name__}", detail, _innermost(tb))
        previous(exc_type, exc, tb)

    sys.excepthook = hook
    previous_threading = threading.excepthook

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit:
            name = args.thread.name if args.thread else "?"
            detail = _exception_detail(args.exc_type, args.exc_value, max_detail)
            reason = f"unhandled {args.exc_type.__name__} in thread {name}"
            on_exception(reason, detail + f" (thread {name})", None)
        previous_threading(args)

    threading.excepthook = thread_hook
    return previous, previous_threading


def _exception_detail(exc_type: type[BaseException], exc: BaseException | None, limit: int) -> str:
    text = f"{exc_type.__name__}: {exc}" if exc is not None and str(exc) else exc_type.__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _innermost(tb: TracebackType | None) -> FrameType | None:
    """The frame the exception was raised in: the main thread's stack as it failed."""
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame
