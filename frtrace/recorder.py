"""The job-side dump helper (public path; the code lives in ``frtrace.job.recorder``).

``import frtrace.recorder`` imports neither torch nor the analysis.
"""

from __future__ import annotations

from frtrace.job.recorder import RecorderState, disable, dump, dump_path, enable, phase, state

__all__ = ["RecorderState", "disable", "dump", "dump_path", "enable", "phase", "state"]
