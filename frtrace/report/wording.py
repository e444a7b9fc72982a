"""A finding's words: its one-line summary, what its confidence rests on, its evidence lines.

The analysis fills each finding's typed evidence (``Finding.detail``, ``frtrace.detail``) and
writes no sentence; every sentence a finding is shown with is made here, from that evidence,
so text, markdown, HTML, JSON and the gate say the same thing. A culprit's Python stack,
joined to the finding (``Finding.stacks``), adds where it is to the summary and its frames to
the evidence.
"""

from __future__ import annotations

from typing import assert_never

from frtrace.base.ranges import format_ranks
from frtrace.detail import (
    CulpritStack,
    Disagreement,
    FirstFailure,
    InFlight,
    LaterFailure,
    NamedApart,
    NamedByError,
    NothingRecorded,
    RasRunning,
    RunningOps,
    RunningSnapshot,
    SkippedUnrecorded,
    StackOutlier,
    StuckInCollective,
    UnrecordedOps,
    UnseenMembers,
    WaitedOnTheSilent,
)
from frtrace.evidence.model import Failure, FailureKind
from frtrace.model import Finding, Severity
from frtrace.report.words import Words, held_too, op_at, who
from frtrace.report.words_desync import DesyncDetail, desync_words
from frtrace.report.words_hang import HangDetail, hang_words
from frtrace.report.words_order import OrderDetail, order_words
from frtrace.report.words_ras import ras_running
from frtrace.report.words_stacks import outlier_summary
from frtrace.report.words_where import where_said

__all__ = ["MAX_WHERE_IN_SUMMARY", "disagreement", "evidence", "summary", "why"]

MAX_WHERE_IN_SUMMARY = 2  # culprits whose place is added to a finding's one-line summary


def summary(f: Finding) -> str:
    """The finding in one line, with where its culprits' stacks say they are."""
    text = _summary(f)
    if not f.stacks:
        return text
    clauses = [
        f"rank {s.where.rank}: {where_said(s.where)}" for s in f.stacks[:MAX_WHERE_IN_SUMMARY]
    ]
    if len(f.stacks) > MAX_WHERE_IN_SUMMARY:
        clauses.append(f"+{len(f.stacks) - MAX_WHERE_IN_SUMMARY} more in the evidence")
    return f"{text}; {'; '.join(clauses)}"


def disagreement(d: Disagreement) -> str:
    """Where two kinds of evidence name different ranks, in one sentence."""
    if isinstance(d, LaterFailure):
        return (
            f"rank(s) {format_ranks(d.failed)} also failed on their own, but at a time no file "
            f"says or after ranks were already waiting on rank(s) {format_ranks(d.named)}, whom "
            "the Flight Recorder entries name: a later event, not where the hang began"
        )
    if isinstance(d, NamedApart):
        return (
            f"the job's own failures name rank(s) {format_ranks(d.by_job)}; the Flight Recorder "
            f"entries name rank(s) {format_ranks(d.by_entries)}: both are shown"
        )
    if isinstance(d, RasRunning):
        return ras_running(d)
    assert_never(d)


def why(f: Finding) -> str:
    """What the finding's confidence rests on (and the stacks, where they raised it)."""
    text = _why(f)
    if f.stacks_agree is None:
        return text
    if f.stacks_agree == "waiting":  # (that they wait, not on whom: the confidence stays)
        return f"{text}; the Python stacks show the waiting ranks in the op"
    culprits = who(f.culprit_ranks)
    many = len(f.culprit_ranks) > 1
    theirs = f"{culprits}'s stack{'s are' if many else ' is'}"
    said = (
        f"{theirs} where the entries put {'them' if many else 'it'}"
        if f.stacks_agree == "culprits"
        else f"the waiting ranks' stacks are in the op, and {culprits}'s where the entries put it"
    )
    return f"{text}; the Python stacks confirm it: {said}"


def _why(f: Finding) -> str:
    d = f.detail
    if isinstance(d, HangDetail):
        return hang_words(f, d).why
    if isinstance(d, DesyncDetail | OrderDetail):
        return _desync_or_order(f, d).why
    if isinstance(d, FirstFailure):
        return (
            "its failure is the earliest, and of its own making; the others' are timeouts "
            "and closed connections that follow from it"
            if d.sure
            else "the files that report the failures do not all say when"
        )
    if isinstance(d, NamedByError):
        return "an error message written by the job names the ranks"
    if isinstance(d, StackOutlier) and d.stacks_only:
        return (
            "no Flight Recorder dump was read: every rank's Python stack, its own outside the "
            "call all the others wait in; its ring buffer would confirm which op it never joined"
        )
    if isinstance(d, StackOutlier):
        return "read from the ranks' Python stacks; the Flight Recorder entries do not say"
    if isinstance(d, UnseenMembers):
        return "Gloo's pg_config does not say who the other members are"
    if isinstance(d, WaitedOnTheSilent):
        return (
            f"read from the job's own failures: every {'other' if d.lost else 'rank with a dump'}"
            " failed waiting, none with a cause; the entries do not say whom they waited on"
        )
    if isinstance(d, RunningSnapshot):
        return (
            "no dump says when it was written; the waits began within "
            f"{d.window_s:.0f} s of the newest entry of the job"
        )
    if isinstance(d, NothingRecorded):
        return "an empty ring buffer says nothing of where a rank is"
    if isinstance(d, InFlight):
        if d.because == "running":
            return "the dump times show nobody had waited long (a running job)"
        return (
            "Gloo marks an op retired a moment after it finishes, so the newest op can "
            "look unfinished in a healthy job"
        )
    if isinstance(d, RunningOps):
        return (
            "the recorder wrote each dump moments after the rank's newest entry, well "
            "within the job's own gaps between ops: nobody had waited long"
        )
    if isinstance(d, StuckInCollective):
        if d.on_gpu == "not_started":
            return (
                "all members joined and no member's GPU started it (the recorder times "
                "starts): earlier work on their streams has not finished"
            )
        return "all members joined; the cause is below the collective layer"
    if isinstance(d, UnrecordedOps) and d.skipped:
        k = d.skipped[0]
        return (
            f"Gloo counts send/recv in op_id but writes no entry for them: {who(k.peers)} ran "
            f"{k.others} before #{k.seq}, as rank {k.rank} did itself before #{k.before}; a "
            "send or recv left out leaves its peer blocked in the other half"
        )
    if isinstance(d, UnrecordedOps):
        return "Gloo counts send/recv in op_id but writes no entry for them"
    assert_never(d)


def evidence(f: Finding) -> tuple[str, ...]:
    """Facts a user can check in the dumps, the culprits' stacks first."""
    return (*(_stack_line(s) for s in f.stacks), *_evidence(f))


def _desync_or_order(f: Finding, d: DesyncDetail | OrderDetail) -> Words:
    """A desync's words, or an order's (a rank's groups or a group's ops in another order)."""
    return order_words(f, d) if isinstance(d, OrderDetail) else desync_words(f, d)


def _stack_line(s: CulpritStack) -> str:
    cw = s.where
    chain = " <- ".join(s.frames)
    if s.more_frames:
        chain += f" <- … (+{s.more_frames} frames)"
    how = f"{cw.source}, {cw.file_name}"
    if cw.trigger:
        how += f", {cw.trigger}"
    return f"rank {cw.rank}'s Python stack ({how}): {cw.thread}: {chain or 'no Python frames'}"


def _summary(f: Finding) -> str:
    d = f.detail
    if isinstance(d, HangDetail):
        return hang_words(f, d).summary
    if isinstance(d, DesyncDetail | OrderDetail):
        return _desync_or_order(f, d).summary
    if isinstance(d, FirstFailure):
        if f.severity < Severity.ERROR:  # the verdict found it later than the hang it began
            return (
                f"{who(d.ranks)} also failed on its own ({_first_what(d)}), at a time no file "
                "says or after its peers were already waiting on another rank: a later event, "
                "not where the hang began"
            )
        return _first_failure(d)
    if isinstance(d, NamedByError):
        by = f" (rank {format_ranks(d.reporters)} says so)" if d.reporters else ""
        return (
            f"{who(d.named)} failed to reach the barrier its peers waited in{by}: "
            f"{d.messages[0].message}"
        )
    if isinstance(d, StackOutlier):
        return outlier_summary(d)
    if isinstance(d, UnseenMembers):
        ranks = tuple(b.rank for b in d.blocked)
        several = len(ranks) > 1
        return (
            f"{who(ranks)} {'are' if several else 'is'} blocked in ops of groups that no other "
            "member recorded: the other members never entered them"
            + (
                ": every rank is blocked, so they wait on each other (a cross-group deadlock)"
                if d.nobody_free
                else " (each rank in a different group: a cross-group deadlock?)"
                if several
                else ""
            )
        )
    if isinstance(d, WaitedOnTheSilent):
        return _silent_summary(d)
    if isinstance(d, RunningSnapshot):
        label = f.group.label if f.group is not None else "?"
        return (
            f"rank {d.behind} is one op behind {who(d.ahead)} in {label} (#{f.seq}), as "
            f"{d.groups - 1} other group{'s are' if d.groups > 2 else ' is'} "
            "at the same moment: a running job dumped at one instant looks so"
        )
    if isinstance(d, InFlight):
        how = (
            "the last of them moments before its dump"
            if d.because == "running"
            else "and Gloo retires an op a moment after it finishes"
        )
        return f"{op_at(f)} was in flight when the dumps were taken: every member entered it, {how}"
    if isinstance(d, RunningOps):
        return (
            f"{who(d.waiting)} entered {op_at(f)}, which {who(d.behind)} had not finished or "
            f"entered yet: a running job, dumped at most {d.idle_s * 1000:.0f} ms after the "
            "waiting ranks' newest op"
        )
    if isinstance(d, StuckInCollective):
        return _stuck_summary(f, d)
    if isinstance(d, NothingRecorded):
        return (
            f"no rank recorded any op (dumps of {who(d.loaded)} are empty): the job is stuck "
            "before its first collective, or runs only ops the recorder does not write (Gloo's "
            "send/recv)"
        )
    if isinstance(d, UnrecordedOps) and d.skipped:
        return "; ".join(_skipped(k, f) for k in d.skipped)
    if isinstance(d, UnrecordedOps):
        return (
            f"{who(d.ranks)} ran {d.total} op{'s' if d.total != 1 else ''} that Gloo does not "
            "record (send/recv): a rank blocked in one looks exactly like a rank that finished "
            "everything it recorded"
        )
    assert_never(d)


def _skipped(k: SkippedUnrecorded, f: Finding) -> str:
    where = f"#{k.seq} of {f.group.label}" if f.group is not None else f"#{k.seq}"
    fewer = "fewer" if k.ran < k.others else "more"
    held = f": {who(k.behind)} never reached it, presumably blocked there" if k.behind else ""
    return (
        f"rank {k.rank} ran {fewer} send/recv than its peers before {where} ({k.ran} where "
        f"{who(k.peers)} ran {k.others}): it left one {'out' if fewer == 'fewer' else 'over'}"
        f"{held}"
    )


def _first_what(d: FirstFailure) -> str:
    lead = d.first[0]
    if lead.kind == FailureKind.RETRYING:
        return "a step it retried to the end of its log"
    return lead.exc_type or str(lead.kind).replace("_", " ")


def _first_failure(d: FirstFailure) -> str:
    lead = d.first[0]
    text = f"{who(d.ranks)} failed first with {_first_what(d)}"
    if lead.where:
        text += f" at {lead.where}"
    if d.victims:
        n = len(d.victims)
        text += f"; {n} other rank{'s' if n != 1 else ''} failed after it waiting on it"
    return text


def _failure_line(f: Failure) -> str:
    return f"rank {f.rank}: {f.role} ({f.kind}): {f.message} [{f.source}]"


def _evidence(f: Finding) -> tuple[str, ...]:
    d = f.detail
    if isinstance(d, HangDetail):
        return hang_words(f, d).evidence
    if isinstance(d, DesyncDetail | OrderDetail):
        return _desync_or_order(f, d).evidence
    if isinstance(d, FirstFailure):
        lines = [_failure_line(x) for x in (*d.first, *d.after)]
        if d.untimed_others:
            lines.append(
                f"rank(s) {format_ranks(d.untimed_others)} also failed on their own, at a time "
                "no file says: they may have failed first"
            )
        if d.later_causes:
            lines.append(f"rank(s) {format_ranks(d.later_causes)} also failed on their own, later")
        return tuple(lines)
    if isinstance(d, NamedByError):
        return tuple(f"{x.source}: {x.message}" for x in d.messages)
    if isinstance(d, StackOutlier):
        return tuple(f"rank {w.rank}: {where_said(w)} [{w.file_name}]" for w in d.host[:4])
    if isinstance(d, UnseenMembers):
        lines = [
            f"rank {b.rank}: blocked in {b.op}"
            + (f" #{b.seq}" if b.seq is not None else "")
            + f" of {b.group.label}, which no other rank recorded"
            for b in d.blocked
        ]
        if d.nobody_free:
            lines.append(
                f"every rank of the job ({d.loaded}: the world size is the {d.world_source}) "
                "has a dump and is blocked: the unseen members are blocked elsewhere, and no "
                "rank is free to join"
            )
        lines.append(
            "the members of each group (the ranks passed to new_group), and each rank's "
            "Python stack, would say who never entered"
        )
        return tuple(lines)
    if isinstance(d, WaitedOnTheSilent):
        return (
            *(_failure_line(x) for x in d.symptoms),
            f"the dumps or logs of {who(d.absent)} (its host's) would confirm it; its Python "
            "stack (py-spy dump) if it still runs",
        )
    if isinstance(d, RunningSnapshot):
        return (
            f"{d.groups} groups each have one member one op behind, holding up no one outside "
            "the group",
            "a dump time (frtrace.recorder), or a second snapshot a few seconds later "
            "(frtrace compare), tells a running job from a hang",
        )
    if isinstance(d, InFlight):
        return ()
    if isinstance(d, RunningOps):
        return tuple(
            f"rank {x.rank}: dumped {x.idle_s * 1000:.0f} ms after its newest entry "
            f"(running if under {x.limit_s * 1000:.0f} ms)"
            for x in d.dumped
        )
    if isinstance(d, StuckInCollective):
        return (_stuck_evidence(d),)
    if isinstance(d, NothingRecorded):
        return (
            "each rank's Python stack (py-spy dump, or frtrace.recorder's sidecar) and its "
            "log say where it is",
        )
    if isinstance(d, UnrecordedOps):
        lines = [
            f"rank {c.rank}: {c.ops} op{'s' if c.ops != 1 else ''} on {c.group.label} counted "
            "in op_id but not in its buffer"
            for c in d.counts
        ]
        if d.more:
            lines.append(f"... and {d.more} more (rank, group) pairs")
        lines.append(
            "to see where each rank is: py-spy dump --pid <pid> on every rank (a rank in "
            "send/recv shows it); the NCCL backend records send/recv"
        )
        return tuple(lines)
    assert_never(d)


def _stuck_summary(f: Finding, d: StuckInCollective) -> str:
    label = f.group.label if f.group is not None else "?"
    where = {
        "not_started": ", and no member's GPU started it",
        "started": ": it runs on the GPUs",
        None: "",
    }[d.on_gpu]
    return (
        f"every member of {label} entered {op_at(f)} with matching arguments and it did not "
        f"finish{where}" + held_too(d.held) + ": the Flight Recorder cannot name a rank"
    )


def _stuck_evidence(d: StuckInCollective) -> str:
    if d.on_gpu == "not_started":
        return (
            f"the GPUs of {who(d.entered)} never started it: look for a kernel that does not "
            "end, or a wait on another stream, before it (nvidia-smi shows the GPU busy; "
            "py-spy dump --native, compute-sanitizer), and GPU health (Xid errors in dmesg)"
        )
    return (
        "check the NCCL/transport logs (NCCL_DEBUG=INFO), the network between "
        f"ranks {format_ranks(d.entered)}, and GPU health (Xid errors in dmesg)"
    )


def _silent_summary(d: WaitedOnTheSilent) -> str:
    others = "every other rank" if d.lost else "every rank with a dump"
    lost = f"; {who(d.lost)} by their logs alone" if d.lost else ""
    return (
        f"{who(d.absent)} left no dump and said nothing, while {others} "
        f"({who(d.waited)}{lost}) failed waiting with no cause of its own: suspected, what "
        "they waited on"
    )
