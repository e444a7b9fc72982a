"""The words of the hang findings (FR001 never joined, FR005 not started, FR006 never posted,
FR008 no dump), from their typed evidence (``frtrace.detail.Waits`` and each kind's own)."""

from __future__ import annotations

from typing import assert_never

from frtrace.base.ranges import format_ranks
from frtrace.detail import (
    LastSeen,
    MarksStopped,
    MaybeElsewhere,
    NeverJoined,
    NeverPosted,
    NoDump,
    NotStarted,
    PgStatus,
    Waits,
)
from frtrace.model import Finding
from frtrace.report.words import Words, op_at, seconds, who
from frtrace.report.words_where import where_said

__all__ = ["HangDetail", "hang_words"]

HangDetail = NeverJoined | NotStarted | NeverPosted | NoDump


_ALL_DUMPED = "every rank involved has a dump that shows it"
_BASIS = {
    "dumps": _ALL_DUMPED,
    "inferred": "group membership was inferred from the entries (pg_config not usable)",
    "members_missing": "some members of the group have no dump",
    "unretired": "the named ranks' newest op is not retired while other members finished it; "
    "Gloo does not record whether they are still inside it",
    "unrecorded": "some named ranks may be blocked in a send/recv that Gloo does not record, "
    "waiting on another of them",
}


def _also(w: Waits) -> str:
    them = "them" if len(w.culprits) > 1 else "it"
    return f"; {w.blocked} rank{'s wait' if w.blocked != 1 else ' waits'} on {them}"


def _last_seen(s: LastSeen) -> str:
    e = s.entry
    if e is None:
        return f"rank {s.rank}: no entries in its dump"
    where = e.group.label if e.group is not None else f"pg {e.group_name}"
    return (
        f"rank {s.rank}: its newest entry is {e.op} #{e.seq} of {where} "
        f"({e.state or 'no state'}{', retired' if e.retired else ''})"
    )


def _common(f: Finding, w: Waits) -> list[str]:
    """Where the culprits were last seen, where the others wait, what shows the op failed."""
    where = op_at(f)
    lines = [_last_seen(s) for s in w.last_seen]
    lines.append(f"{who(w.waiting)}: inside {where} ({w.waiting_state or 'no state'})")
    if w.call_site:
        lines.append(f"the waiting ranks called it from {w.call_site}")
    failed = w.failed
    if failed is not None:
        reason = {
            "absent": f"rank(s) {format_ranks(failed.ranks)} never reached it",
            "late": f"rank(s) {format_ranks(failed.ranks)} entered it after the others' timeout",
            "stopped": f"rank(s) {format_ranks(failed.ranks)} left no dump and every other "
            "member stopped in it",
        }[failed.reason]
        lines.append(f"{where} cannot have completed: {reason}")
        if failed.retired_on:
            lines.append(
                f"{who(failed.retired_on)} dumped after {where} failed or timed out (their "
                "entry is retired: Gloo retires a failed op as it does a finished one)"
            )
    elif w.timed_out:
        lines.append(
            f"{who(w.timed_out)} dumped after {where} timed out or was aborted (retired "
            "without completing: the watchdog gave up on it)"
        )
    lines += [
        f"rank {h.rank} is itself blocked in {h.op} #{h.seq} of {h.group.label}, waiting on no "
        "one the dumps show (the entries that would say whom are not there): it may be held "
        "up there, before this op, not a cause; the dumps cannot tell"
        for h in w.held
    ]
    lines += [_stopped(m) for m in w.stopped]
    return lines


_MARKED_BY = {
    "entries": "their entries",
    "pg_status": "their pg_status",
    "both": "their entries and pg_status",
}


def _stopped(m: MarksStopped) -> str:
    """A culprit whose own completion marks stopped below what its peers completed."""
    after = f"after #{m.last_marked}" if m.last_marked > 0 else "before its first op"
    return (
        f"rank {m.rank}'s GPU stopped reporting completions {after} of "
        f"{m.group.label}: its own entries are not marked completed from {m.op} "
        f"#{m.first_unmarked} on, but {who(m.by)} completed #{m.peers_completed} of that group "
        f"({_MARKED_BY[m.source]}), which no member completes unless every member ran it: "
        f"rank {m.rank} ran those ops, only its completion marks stopped, then the job hung on "
        "it (not held up before the op)"
    )


_HELD = "the ranks named are blocked themselves, on no one the dumps show: cannot tell"


def _pg_status(p: PgStatus, seq: int | None) -> str:
    agrees = p.last_enqueued is not None and seq is not None and p.last_enqueued < seq
    return (
        f"rank {p.rank}'s pg_status for this group: last enqueued #{p.last_enqueued}, last "
        f"completed #{p.last_completed}" + (f" (it never enqueued #{seq})" if agrees else "")
    )


def _doubt(m: MaybeElsewhere) -> str:
    if m.neighbours:
        return (
            f"rank {m.rank} has no Python stack and Gloo counted no send/recv of it, but "
            f"{who(m.neighbours)}, absent from the same op of groups like this one, "
            f"{'wait' if len(m.neighbours) > 1 else 'waits'} in a send/recv behind "
            f"{who(m.behind)}, seen stuck elsewhere: a pipeline stage held up by another looks "
            f"exactly so; the dumps cannot tell whether rank {m.rank} waits too (its Python "
            "stack would)"
        )
    if m.behind:
        return (
            f"rank {m.rank} has no Python stack and Gloo counted no send/recv of it, and "
            f"{who(m.behind)}, absent from the same op of a group like this one, "
            f"{'are' if len(m.behind) > 1 else 'is'} seen stuck elsewhere: a pipeline stage "
            f"held up by another looks exactly so; the dumps cannot tell whether rank {m.rank} "
            "waits behind it or is stuck too (its Python stack would)"
        )
    if m.in_call is not None:
        making = m.making_group
        what = "a group being made, which waits on its other members" if making else "a send/recv"
        return (
            f"rank {m.rank}'s Python stack is inside a torch.distributed call "
            f"({m.in_call.library_call or where_said(m.in_call)}), not "
            f"in host code: it is blocked in an op its buffer does not show ({what}), "
            "waiting too"
        )
    n = m.unrecorded
    return (
        f"rank {m.rank} ran {n} send/recv op{'s' if n != 1 else ''} that Gloo does not record: "
        "it may be blocked in one, waiting too (its Python stack would tell)"
    )


def _never_joined(f: Finding, d: NeverJoined) -> Words:
    w = d.waits
    named, where = who(w.culprits), op_at(f)
    if d.late:
        summary = (
            f"{named} joined {where} {seconds(d.late_by_s)} after its peers, past their "
            f"{seconds(d.timeout_s)} timeout: it was held up before it{_also(w)}"
        )
    else:
        summary = f"{named} never joined {where}{_also(w)}"
    lines = _common(f, w)
    lines += [_pg_status(p, f.seq) for p in d.pg_status]
    if d.unretired:
        lines.append(
            f"{who(d.unretired)}: newest op {d.unretired_op} not retired, though other "
            "members finished it: stuck in host code after it (if Gloo retired it late), or "
            "still inside it (an op its members disagree on can finish on some of them only, "
            "e.g. a broadcast from another root: the recorder does not record the root)"
        )
    if d.host:
        lines.append(
            f"{who(d.host)} finished every op it recorded: it is stuck in host code (data "
            "loading, a Python loop, an exception handler) before this collective"
        )
        lines += [
            f"rank {i.rank} dumped {seconds(i.idle_s)} after its newest entry: stuck, not "
            "between two ops"
            for i in d.idle
        ]
        if d.no_dump_time:
            lines.append(
                "the dumps do not record when they were written, and nothing shows the op "
                "timed out: read as taken while the job was stuck. If it was running, "
                f"{who(d.host)} may just be between ops; a second snapshot a few seconds "
                "later settles it"
            )
    if d.hidden:
        lines.append(
            f"{who(d.hidden)} finished every op it recorded, but also runs send/recv, which "
            "Gloo does not record: it is stuck in host code or blocked in a send/recv; the "
            "dumps cannot tell which (py-spy dump --pid <pid> shows it)"
        )
    lines += [_doubt(m) for m in d.doubts]
    why = (
        "the ranks named may be blocked in an unrecorded op, not in host code"
        if d.doubts
        else _HELD
        if w.held
        else _BASIS[d.basis]
    )
    return Words(summary, why, tuple(lines))


def _no_dump(f: Finding, d: NoDump) -> Words:
    w = d.waits
    named, where = who(w.culprits), op_at(f)
    has = f"ha{'ve' if len(w.culprits) > 1 else 's'}"
    lines = _common(f, w)
    also = _also(w)
    if d.failed_it:
        also += f"; {len(d.failed_it)} more failed it (Gloo shows a failed op as finished)"
        lines.append(
            f"{who(d.failed_it)} show {where} as finished although the op could not "
            f"complete without {format_ranks(w.culprits)}: Gloo retires an op that failed (a "
            "peer crashed, a connection reset) like one that finished; their logs show the error"
        )
    if d.stopped:
        return Words(
            f"{named} {has} no dump, and every other member stopped in {where}: if the job hung, "
            "look there first (it may also have finished and lost its dump)",
            "Gloo retires a failed op as it does a finished one, so the dumps cannot tell a "
            f"death of {named} in {where} from a job that finished it; {named}'s log or exit "
            "status settles it",
            tuple(lines),
        )
    them = "them" if len(w.culprits) > 1 else "it"
    return Words(
        f"{named} {has} no dump, and {where} waits on {them}{also}",
        "inferred from missing data: every member with a dump is inside the op or failed it; "
        "the rank(s) without a dump are the only ones that may not be",
        tuple(lines),
    )


def hang_words(f: Finding, d: HangDetail) -> Words:
    """The summary, why and evidence of a hang finding."""
    if isinstance(d, NeverJoined):
        return _never_joined(f, d)
    if isinstance(d, NoDump):
        return _no_dump(f, d)
    w = d.waits
    named, where = who(w.culprits), op_at(f)
    lines = _common(f, w)
    if isinstance(d, NotStarted):
        lines.append("its GPU stream is busy with other work that the recorder does not see")
        summary = f"{named} enqueued {where} but never started it while its peers did{_also(w)}"
        return Words(summary, _ALL_DUMPED, tuple(lines))
    if isinstance(d, NeverPosted):
        peers = ", ".join(f"{a}->{b}" for a, b in d.pairs)
        summary = f"{named} never posted the p2p op matching {where} ({peers}){_also(w)}"
        return Words(summary, _HELD if w.held else _ALL_DUMPED, tuple(lines))
    assert_never(d)
