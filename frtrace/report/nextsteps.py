"""What to do next, specific to each finding: the command to run, the file to open.

Advice names ranks, ops and call sites from the finding itself; nothing here is generic
enough to print for every report.
"""

from __future__ import annotations

from frtrace.detail import OpOrder, StuckInCollective
from frtrace.model import Finding, FindingKind, Report, Severity
from frtrace.pystack.where import call_site
from frtrace.report.common import (
    compact_ranks,
    idle_in_host_code,
    ranks_phrase,
    short_frame,
    unfinished_ops,
)

__all__ = ["DUMP_LOCATIONS", "MAX_STEPS", "NEXT_DUMP", "finding_steps", "next_steps"]

MAX_STEPS = 8  # steps listed in text, markdown and HTML; the JSON report lists all (None)

DUMP_LOCATIONS = (
    "torch writes each rank's dump to <prefix><rank> on that rank's host: "
    "$XDG_CACHE_HOME or $HOME/.cache/torch/comm_lib_trace_rank_<rank> (torch 2.9+), "
    "$HOME/.cache/torch/nccl_trace_rank_<rank> (2.6-2.8), /tmp/nccl_trace_rank_<rank> (2.2-2.5); "
    "TORCH_FR_DUMP_TEMP_FILE (2.8+) or TORCH_NCCL_DEBUG_INFO_TEMP_FILE sets the prefix"
)

# No dump was read, only the ranks' stacks: what makes the next collect get every rank's dump
# (``frtrace collect`` prints the one line for the job's backend and torch)
NEXT_DUMP = (
    "no rank's dump was read: next time start the job with `eval \"$(frtrace env --dir DIR "
    "--watch 300)\"` (torch 2.5+, the job's Python able to import frtrace) or call "
    "`frtrace.recorder.enable(DIR)` in the script before init_process_group: `frtrace collect` "
    "can then ask every rank for its dump (it prints the line for the job's backend and torch)"
)

_PY_SPY = (
    "on the host of {who}, run `py-spy dump --pid <PID>` on its training process (find the PID "
    "with `pgrep -af python` and RANK={first} in /proc/<PID>/environ; add --native for C++ "
    "frames): its Python stack shows where it is stuck"
)


def _site(stack: tuple[str, ...]) -> str | None:
    site = call_site(stack)
    return None if site is None else short_frame(site, parts=3)


def _sites(finding: Finding) -> tuple[str | None, dict[int, str | None]]:
    majority = _site(finding.expected.stack) if finding.expected else None
    return majority, {r: _site(s.stack) for r, s in sorted(finding.actual.items())}


def finding_steps(finding: Finding, report: Report) -> list[str]:
    """Next steps for one finding, most useful first."""
    culprits = finding.culprit_ranks
    who = ranks_phrase(culprits) if culprits else "the stuck ranks"
    kind = finding.kind
    if kind == FindingKind.NEVER_JOINED:
        return _never_joined_steps(finding, report, who)
    if kind in (FindingKind.SIZE_MISMATCH, FindingKind.DTYPE_MISMATCH, FindingKind.OP_MISMATCH):
        return _mismatch_steps(finding)
    if kind == FindingKind.SEQUENCE_SHIFT:
        return [
            f"{who} skipped or added a collective: diff its call sites with a peer's in "
            f"`frtrace show --ranks {compact_ranks(culprits)},<a peer> --stacks`"
        ]
    if kind == FindingKind.NOT_STARTED:
        return [
            f"{who} queued the op but its GPU never started it: the kernel before it is stuck "
            "or slow; on its host check `nvidia-smi`, `dmesg` (GPU Xid errors) and "
            "`py-spy dump --native --pid <PID>`"
        ]
    if kind == FindingKind.P2P_UNMATCHED:
        return [
            f"{who} never posted the matching send/recv: check the pipeline schedule on both "
            "ends (same micro-batch count, same order of send and recv)"
        ]
    if kind == FindingKind.DEADLOCK:
        ring = " → ".join(str(r) for r in (*finding.cycle, *finding.cycle[:1]))
        return [
            f"ranks wait in a cycle ({ring}): make every rank enter the shared groups in one "
            f"order; the rank that changed order is {who}"
        ]
    if kind == FindingKind.MISSING_DUMP:
        return [
            f"get the dump of {who}: {DUMP_LOCATIONS}",
            "Gloo never dumps on its own, and a rank that crashed writes nothing: use "
            "`frtrace.recorder` in the job, and `frtrace env` for the settings",
        ]
    if kind == FindingKind.STUCK_IN_COLLECTIVE:
        return [_stuck_step(list(finding.waiting_ranks), unstarted=_unstarted(finding))]
    if kind == FindingKind.GROUP_ORDER:
        return [
            f"find where {who} creates its process groups: a loop over a set or a dict whose "
            "order varies between processes (set PYTHONHASHSEED for every rank, or iterate "
            "sorted(...)); every rank must call new_group in one order"
        ]
    if isinstance(finding.detail, OpOrder):
        return [
            f"see the ops in their order, side by side: `frtrace show --ranks "
            f"{compact_ranks(sorted({*finding.detail.odd, *finding.detail.majority[:1]}))} "
            "--last 8`; where two threads issue "
            "collectives on one group, order them alike on every rank, or give one its own group"
        ]
    if kind == FindingKind.STACK_OUTLIER:
        return [
            f"open {w.file}:{w.line} (`{w.function}`): rank {w.rank}'s main thread is there; "
            f"its stack is in {w.file_name}"
            for w in finding.where
            if w.function is not None and not report.ranks_loaded
        ]
    return []


def _never_joined_steps(finding: Finding, report: Report, who: str) -> list[str]:
    """Where each culprit's stack puts it, what else it left unfinished, then why."""
    culprits = finding.culprit_ranks
    steps: list[str] = []
    idle = [r for r in culprits if idle_in_host_code(report, r)]
    placed = {w.rank: w for w in finding.where}
    for w in finding.where:
        if w.function is not None:
            call = f", inside {w.library_call}" if w.library_call else ""
            steps.append(
                f"open {w.file}:{w.line} (`{w.function}`): rank {w.rank}'s main thread "
                f"is there{call}; its stack is in {w.file_name}"
            )
    unplaced = [r for r in culprits if r not in placed or placed[r].function is None]
    elsewhere, earlier, unseen = _open_ops(finding, report, [r for r in culprits if r not in idle])
    lost = [r for r in unplaced if r in idle or r in unseen]
    if lost:
        steps.append(_PY_SPY.format(who=ranks_phrase(lost), first=lost[0]))
    if elsewhere:
        ranks = sorted(elsewhere)
        labels = sorted({label for r in ranks for label in elsewhere[r]})
        shown = ", ".join(labels[:3]) + (f" +{len(labels) - 3} more" if len(labels) > 3 else "")
        steps.append(
            f"{ranks_phrase(ranks)} still {'have' if len(ranks) > 1 else 'has'} an unfinished "
            f"op of another group ({shown}): `frtrace show` with --ranks "
            f"{compact_ranks(ranks)} shows it, and who that op waits on"
        )
    if earlier:
        label = finding.group.label if finding.group is not None else "its group"
        steps.append(
            f"{ranks_phrase(earlier)} did not finish an earlier op of {label}: `frtrace "
            f"show` with --ranks {compact_ranks(earlier)} shows it, and whether the others "
            "finished it"
        )
    steps.append(
        f"find why {who} went another way than its peers: a rank-dependent branch, an "
        "exception caught and skipped, a data loader that ran out early on that rank; its "
        "log shows the last step it began"
    )
    return steps


def _mismatch_steps(finding: Finding) -> list[str]:
    """Both call sites, and what to make equal."""
    kind = finding.kind
    steps: list[str] = []
    majority, theirs = _sites(finding)
    what = {
        FindingKind.SIZE_MISMATCH: "tensor sizes",
        FindingKind.DTYPE_MISMATCH: "dtypes",
        FindingKind.OP_MISMATCH: "collectives",
    }[kind]
    if finding.expected is None and any(theirs.values()):  # no majority: side against side
        steps.append(
            "compare the call sites: "
            + "; ".join(f"rank {r} at {site or '(no stack)'}" for r, site in theirs.items())
        )
        theirs = {}
    for rank, site in theirs.items():
        if site and site == majority and kind != FindingKind.OP_MISMATCH:
            steps.append(
                f"rank {rank} calls it from the same place as the majority ({site}): the "
                f"{what} differ in the data, not the code path; check what sets them on "
                f"rank {rank}"
            )
        elif site or majority:
            steps.append(
                f"compare the two call sites: the majority at {majority or '(no stack)'}, "
                f"rank {rank} at {site or '(no stack)'}"
            )
    if not steps and not majority and finding.actual:  # (no op seen: no call site to show)
        steps.append(
            "the dumps carry no Python stacks (JSON dumps never do): dump pickles with "
            "stack traces to see both call sites"
        )
    at = f" at #{finding.seq}" if finding.seq is not None else ""
    steps.append(
        f"make every member pass the same {what}{at}: look for shapes or "
        "branches that depend on the rank (uneven last batch, rank-local config)"
    )
    return steps


def _open_ops(
    finding: Finding, report: Report, ranks: list[int]
) -> tuple[dict[int, list[str]], list[int], list[int]]:
    """What is true of culprits that are not idle in host code: those with an op of another
    group they neither completed nor retired (rank -> those groups' labels), those whose only
    unfinished op is an earlier one of the finding's group, and those with no collective
    recorded at all."""
    here = finding.group.name if finding.group is not None else None
    elsewhere: dict[int, list[str]] = {}
    earlier: list[int] = []
    unseen: list[int] = []
    for r in ranks:
        ops = unfinished_ops(report, r)
        other = [f"#{seq} of {g.label}" for g, seq in ops if g.name != here]
        if other:
            elsewhere[r] = other
        elif ops:
            earlier.append(r)
        else:
            unseen.append(r)
    return elsewhere, earlier, unseen


def next_steps(report: Report, *, limit: int | None = MAX_STEPS) -> list[str]:
    """The report's next steps: per root-cause finding, then what is missing; deduplicated.

    Findings of one kind that differ only in their ranks (hundreds of stuck groups) give one
    step naming all their ranks; past ``limit`` (None: no limit) the rest are counted.
    """
    steps: list[str] = []
    stuck: list[int] = []
    unstarted: list[int] = []
    for finding in report.findings:
        if finding.severity < Severity.WARNING:
            continue
        if finding.kind == FindingKind.STUCK_IN_COLLECTIVE:
            (unstarted if _unstarted(finding) else stuck).extend(finding.waiting_ranks)
            continue
        steps.extend(finding_steps(finding, report))
    if stuck:
        steps.append(_stuck_step(stuck, unstarted=False))
    if unstarted:
        steps.append(_stuck_step(unstarted, unstarted=True))
    absent = sorted(set(report.ranks_missing) | set(report.ranks_unreadable))
    if not report.ranks_loaded and report.stacks is not None and not report.timeline:
        steps.append(NEXT_DUMP)  # (the stacks alone: collect's next run should get dumps)
    elif absent and not any(f.kind == FindingKind.MISSING_DUMP for f in report.findings):
        steps.append(f"get the dump of {ranks_phrase(absent)}: {DUMP_LOCATIONS}")
    if report.stragglers:
        late = [s.rank for s in report.stragglers]
        steps.append(
            f"{ranks_phrase(late)} arrived last most of the time: compare "
            f"{'its' if len(late) == 1 else 'their'} host's load (data loading, CPU contention, "
            "thermal throttling) with a peer's"
        )
    unique = list(dict.fromkeys(steps))
    if limit is not None and len(unique) > limit:
        cut = len(unique) - limit + 1
        unique = [*unique[: limit - 1], f"… {cut} more steps in the JSON report (next_steps)"]
    return unique


def _unstarted(finding: Finding) -> bool:
    """A stuck op no member's GPU started (NCCL with timing on)."""
    return isinstance(finding.detail, StuckInCollective) and finding.detail.on_gpu == "not_started"


def _stuck_step(ranks: list[int], *, unstarted: bool) -> str:
    if unstarted:
        return (
            f"no GPU of {ranks_phrase(sorted(set(ranks)))} started the op: find the kernel "
            "before it that does not end, or the wait on another stream (nvidia-smi shows the "
            "GPU busy; py-spy dump --native shows where the host waits), and check `dmesg` for "
            "GPU Xid errors"
        )
    return (
        "every member is inside the op, so look below the recorder: rerun with "
        f"NCCL_DEBUG=INFO, check the network between {ranks_phrase(sorted(set(ranks)))} and "
        "`dmesg` for GPU Xid errors"
    )
