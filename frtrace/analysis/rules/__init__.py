"""The rules of the diagnosis: each a module with ``check(facts) -> list[Finding]``.

A rule reads the ``Facts`` (``analysis.facts``) and says what it sees, with its evidence; it
never reads another rule's findings and no rule imports another. Which findings win when
they disagree is decided in one place, ``analysis.verdict``.

From the Flight Recorder entries: ``desync`` (mismatched op, sizes, dtypes, a shifted
sequence), ``group_order`` (a rank made its groups in another order), ``op_order`` (a rank
ran a group's ops in another order: two threads), ``split_sizes`` (all_to_all splits that
disagree), ``hang`` (a member never joined, a p2p peer never posted, a GPU never started,
a dump is missing), ``deadlock``, ``stuck`` (every member entered, nothing finished),
``in_flight`` (a running job's ops), ``unrecorded`` (Gloo's send/recv), ``unseen`` (blocked
in a group no other member recorded), ``snapshot`` (a running job dumped at one instant, no
dump time), ``nothing_recorded`` (empty buffers). From the rest of the evidence: ``first_failure``
(which rank failed first, and with a cause), ``named`` (an error message naming ranks),
``torch_said`` (torch's own collective check under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, and
Gloo's size check: a desync torch saw), ``silent`` (every rank with a dump failed waiting: the
ranks without one, suspected), ``stack_outlier`` (the ranks' Python stacks, where the entries
are silent).

How to add a rule: docs/architecture.md, "Adding a rule".
"""

from __future__ import annotations

from collections.abc import Callable

from frtrace.analysis.facts import Facts
from frtrace.analysis.rules import (
    deadlock,
    desync,
    first_failure,
    group_order,
    hang,
    in_flight,
    named,
    nothing_recorded,
    op_order,
    silent,
    snapshot,
    split_sizes,
    stack_outlier,
    stuck,
    torch_said,
    unrecorded,
    unseen,
)
from frtrace.model import Finding

__all__ = ["RULES", "Rule"]

Rule = Callable[[Facts], list[Finding]]
RULES: tuple[Rule, ...] = (
    desync.check,
    group_order.check,
    op_order.check,
    split_sizes.check,
    hang.check,
    deadlock.check,
    stuck.check,
    in_flight.check,
    unrecorded.check,
    unseen.check,
    snapshot.check,
    nothing_recorded.check,
    first_failure.check,
    named.check,
    torch_said.check,
    silent.check,
    stack_outlier.check,
)
