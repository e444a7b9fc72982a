"""frtrace: which rank hung the job, and why, from PyTorch Flight Recorder dumps.

The public API, imported lazily so that ``import frtrace.recorder`` in a training script loads
neither the analysis nor pandas::

    import frtrace
    report = frtrace.analyze("dumps/")        # load, match, diagnose -> Report
    dumps = frtrace.load_dumps("dumps/")      # the Arrow tables only
    report = frtrace.analyze_dumps(dumps)

``frtrace.testing`` (pytest helpers) and ``frtrace.recorder`` (the job-side dump helper) are
modules of their own. Errors a user can be shown are ``frtrace.FrtraceError`` and its subclasses.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from frtrace.errors import FrtraceError, InputError
    from frtrace.load.dumpset import DumpSet
    from frtrace.load.tables import load_dumps
    from frtrace.model import Report, Verdict
    from frtrace.pipeline import analyze, analyze_dumps

__version__ = "0.1.0"

__all__ = [
    "DumpSet",
    "FrtraceError",
    "InputError",
    "Report",
    "Verdict",
    "__version__",
    "analyze",
    "analyze_dumps",
    "load_dumps",
]

# name -> the module that defines it
_LAZY = {
    "analyze": "frtrace.pipeline",
    "analyze_dumps": "frtrace.pipeline",
    "load_dumps": "frtrace.load.tables",
    "DumpSet": "frtrace.load.dumpset",
    "Report": "frtrace.model",
    "Verdict": "frtrace.model",
    "FrtraceError": "frtrace.errors",
    "InputError": "frtrace.errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'frtrace' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
