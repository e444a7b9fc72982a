"""pytest helpers for captured dumps (public path; the code lives in ``frtrace.gate.testing``)."""

from __future__ import annotations

from frtrace.gate.testing import assert_culprits, assert_expected, assert_healthy

__all__ = ["assert_culprits", "assert_expected", "assert_healthy"]
