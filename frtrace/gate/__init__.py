"""Gating: a ``Report`` in, a pass/fail answer out.

``exitcodes`` maps a report to the CLI's exit code (and the rule for partial dump sets);
``check`` compares a report with pinned expectations (``frtrace check``) and renders the diff;
``testing`` offers the same as pytest helpers (``frtrace.testing``).
"""
