"""Exit codes of every command, and the rule that picks one for an analysis.

=====  =====================================================================================
code   meaning
=====  =====================================================================================
0      no problem found (stragglers alone are a warning: still 0); ``check``: the analysis
       matches the expectation
1      a problem found: a hang, a desync, or stuck ranks nobody can be blamed for; or some
       ranks have no readable dump and ``--allow-partial`` was not given; ``check``: the
       analysis differs from the expectation
2      the input cannot be analysed (no directory, no dumps, nothing readable) or the
       command line is wrong; the message is one line on stderr
=====  =====================================================================================

Missing dumps make the exit code 1 by default because a set with a rank missing cannot show
that the job was healthy: the missing rank is the usual suspect. A CI job that keeps partial
dumps of a past incident on purpose passes ``--allow-partial``; then the code is the
analysis' alone.
"""

from __future__ import annotations

from frtrace.model import Report

__all__ = ["EXIT_INPUT", "EXIT_OK", "EXIT_PROBLEM", "analysis_exit_code", "incomplete_ranks"]

EXIT_OK, EXIT_PROBLEM, EXIT_INPUT = 0, 1, 2


def incomplete_ranks(report: Report) -> tuple[int, ...]:
    """Ranks of the job without a readable dump."""
    return tuple(sorted(set(report.ranks_missing) | set(report.ranks_unreadable)))


def analysis_exit_code(report: Report, *, allow_partial: bool) -> int:
    """0, or 1 for a problem, or 1 for missing dumps unless ``allow_partial``."""
    if report.has_problems:
        return EXIT_PROBLEM
    if incomplete_ranks(report) and not allow_partial:
        return EXIT_PROBLEM
    return EXIT_OK
