"""What every reporter says the same way: the headline, compact rank lists, side-by-side columns.

The renderers (text, markdown, html) differ in markup only; the words and the limits that keep
a 4,096-rank report readable live here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from frtrace.base.ranges import format_ranks
from frtrace.detail import NeverJoined, NeverPosted, NoDump, NotStarted
from frtrace.detail.notes import GraphReplay, SkippedCollectives
from frtrace.model import (
    Basis,
    Finding,
    FindingKind,
    GroupRef,
    OpSignature,
    RankProcess,
    Report,
    Severity,
    StackEvidence,
    Verdict,
    suspected_why,
)
from frtrace.pystack.classes import StackClass
from frtrace.pystack.where import call_site, frame_label, is_library_text

__all__ = [
    "MAX_CULPRIT_COLUMNS",
    "MAX_DETAILED_FINDINGS",
    "MAX_EVIDENCE",
    "MAX_FRAMES",
    "MAX_HEADLINES",
    "MAX_STRAGGLERS",
    "MISMATCH_KINDS",
    "Column",
    "compact_ranks",
    "compare_rows",
    "culprits_phrase",
    "finding_columns",
    "headline",
    "headlines",
    "idle_in_host_code",
    "plural",
    "process_phrase",
    "ranks_phrase",
    "short_frame",
    "shorten_rank_lists",
    "stack_rows",
    "suspicions",
    "unfinished_ops",
]

# Limits that keep the report one screen per finding at any job size. Whatever they cut is
# counted where it was cut ("+12 more"); the JSON report always has everything.
MAX_HEADLINES = 5  # root causes listed at the top
MAX_DETAILED_FINDINGS = 10  # findings shown with tables; the rest as one line each
MAX_EVIDENCE = 12  # evidence lines per finding
MAX_CULPRIT_COLUMNS = 3  # distinct culprit behaviours side by side with the majority
MAX_FRAMES = 8  # stack frames per column
MAX_STRAGGLERS = 10  # straggler rows
MAX_RANGE_CHARS = 72  # a rank list longer than this is cut and counted


def plural(n: int, word: str, many: str | None = None) -> str:
    """``plural(1, "rank")`` -> "1 rank"; ``plural(3, "rank")`` -> "3 ranks"."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def compact_ranks(ranks: Iterable[int], *, max_chars: int = MAX_RANGE_CHARS) -> str:
    """Ranges like ``0-3,8,10-15``, cut to ``max_chars`` with a count of what was cut."""
    items = sorted(set(ranks))
    text = format_ranks(items)
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars].rsplit(",", 1)[0]
    shown = sum(_range_len(part) for part in cut.split(","))
    return f"{cut},… (+{len(items) - shown} more)"


def _range_len(part: str) -> int:
    lo, dash, hi = part.partition("-")
    return int(hi) - int(lo) + 1 if dash else 1


def ranks_phrase(ranks: Sequence[int], *, max_chars: int = MAX_RANGE_CHARS) -> str:
    """``rank 5`` / ``ranks 4,6-7``."""
    return f"rank{'s' if len(ranks) != 1 else ''} {compact_ranks(ranks, max_chars=max_chars)}"


# A run of 8 or more comma-separated ranks or ranges, as the analysis writes them in prose.
_RANK_LIST = re.compile(r"\b\d+(?:-\d+)?(?:,\d+(?:-\d+)?){7,}\b")


def shorten_rank_lists(text: str, *, max_chars: int = MAX_RANGE_CHARS) -> str:
    """Cut every long rank list inside a sentence to ``max_chars``, counting what was cut."""

    def cut(match: re.Match[str]) -> str:
        listed = match.group(0)
        if len(listed) <= max_chars:
            return listed
        ranks = [r for part in listed.split(",") for r in _expand(part)]
        return compact_ranks(ranks, max_chars=max_chars)

    return _RANK_LIST.sub(cut, text)


def _expand(part: str) -> range:
    lo, dash, hi = part.partition("-")
    return range(int(lo), int(hi) + 1) if dash else range(int(lo), int(lo) + 1)


# The notes that say the recorder cannot see some collectives (``analysis.facts.blind``)
BLIND = (GraphReplay, SkippedCollectives)


def headline(report: Report) -> str:
    """The one line that answers "what happened", e.g. ``HANG: culprit rank 5; 7 ranks wait``."""
    verdict = report.verdict
    loaded = len(report.ranks_loaded)
    if verdict == Verdict.HEALTHY:
        return f"HEALTHY: no problem found in {plural(loaded, 'rank')}"
    if verdict == Verdict.STRAGGLERS:
        late = [s.rank for s in report.stragglers]
        return f"HEALTHY, WITH STRAGGLERS: {ranks_phrase(late)} consistently arrived last"
    if verdict == Verdict.CANNOT_TELL:
        kinds = {f.kind for f in report.findings}
        if kinds == {FindingKind.UNRECORDED_OPS}:
            return (
                "CANNOT TELL: every recorded op finished, but ranks ran send/recv that Gloo "
                "does not record: a rank blocked in one would look the same"
            )
        if report.suspected_ranks and FindingKind.MISSING_DUMP in kinds:
            return (
                f"CANNOT TELL: {'; '.join(suspicions(report))}; "
                "every other rank stopped in an op it may have failed"
            )
        if not report.ranks_loaded and report.stacks is not None:
            return "CANNOT TELL: no dump was read, and the ranks' stacks single out no rank"
        if report.suspected_ranks and kinds & {FindingKind.GROUP_ORDER, FindingKind.OP_ORDER}:
            return (
                f"CANNOT TELL: {'; '.join(suspicions(report))}: their orders differ, and no "
                "majority says whose is the odd one"
            )
        if not report.findings and any(isinstance(n, BLIND) for n in report.data_notes):
            return (
                "CANNOT TELL: the recorder cannot see every collective this job ran (see "
                "what the dumps could not show): what it recorded names no rank"
            )
        return "CANNOT TELL: ranks are stuck, and the dumps do not show which rank caused it"
    label = "HANG" if verdict == Verdict.HANG else "DESYNC"
    suspected = set(report.suspected_ranks)
    confirmed = [r for r in report.culprit_ranks if r not in suspected]
    parts = []
    by_stack = {n.rank for n in report.named_ranks if n.basis == Basis.STACK}
    if confirmed:
        alone = " (its stack; no dump read)" if set(confirmed) <= by_stack else ""
        parts.append(f"culprit {ranks_phrase(confirmed)}{alone}")
    parts.extend(suspicions(report))
    if report.victim_ranks:
        n = len(report.victim_ranks)
        named = len(confirmed) + len(report.suspected_ranks)
        them = "them" if named > 1 else "it"
        parts.append(f"{plural(n, 'rank')} wait{'s' if n == 1 else ''} on {them}")
    return f"{label}: " + "; ".join(parts or ["no rank could be named"])


def suspicions(report: Report) -> list[str]:
    """The suspected ranks by why each is only suspected, e.g. ``["suspected (no dump) rank
    3", "suspected (by elimination) ranks 0-2"]``: a suspicion is said as one (issue 50)."""
    return [f"suspected ({w}) {ranks_phrase(ranks)}" for w, ranks in suspected_why(report)]


def headlines(report: Report) -> tuple[list[Finding], int]:
    """The findings to list under the headline (root causes first), and how many were cut."""
    top = [f for f in report.findings if f.severity >= Severity.WARNING]
    return top[:MAX_HEADLINES], max(0, len(top) - MAX_HEADLINES)


def idle_in_host_code(report: Report, rank: int) -> bool:
    """True when ``rank`` finished every collective it entered, in every group it is in.

    Such a rank is not blocked in the communication library: it is in host code (a data
    loader, a Python loop, an exception handler) or in something the recorder does not see.
    """
    seen = False
    for p in report.progress:
        for member, entered, finished in zip(p.group.members, p.entered, p.finished, strict=True):
            if member != rank or entered is None:
                continue
            seen = True
            if finished is None or finished < entered:
                return False
    return seen


def unfinished_ops(report: Report, rank: int) -> list[tuple[GroupRef, int]]:
    """Each group in which ``rank`` entered a collective it did not finish (neither completed
    nor retired), with the newest sequence number it entered there."""
    out = []
    for p in report.progress:
        for member, entered, finished in zip(p.group.members, p.entered, p.finished, strict=True):
            if member == rank and entered is not None and (finished is None or finished < entered):
                out.append((p.group, entered))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """One side of a side-by-side comparison: who, and what they did."""

    title: str
    sig: OpSignature
    # which entry it is (``#7 of pg 2``; ``#3 of pg 4, retired``), where the columns are not
    # all the same op: a culprit's newest entry beside the op its peers wait in
    entry: str | None = None
    # where its live Python stack has it now (a culprit stuck in host code: ``load_batch
    # (data.py:88)``), shown before the entry, whose call site is where that op was called
    now: str | None = None


def _newest_entries(finding: Finding) -> dict[int, str]:
    """Each culprit's newest entry, said short, for the findings that compare it with the op
    the others wait in (the hang findings)."""
    d = finding.detail
    if not isinstance(d, NeverJoined | NotStarted | NeverPosted | NoDump):
        return {}
    out = {}
    for seen in d.waits.last_seen:
        e = seen.entry
        if e is None:
            continue
        where = e.group.label if e.group is not None else f"pg {e.group_name}"
        at = f"#{e.seq} of {where}" if e.seq is not None else f"in {where}"
        out[seen.rank] = at + (", retired" if e.retired else "")
    return out


def process_phrase(p: RankProcess) -> str:
    """``on node-b, pid 4242``; ``pid 4242``; ``on node-b``."""
    parts = ([f"on {p.host}"] if p.host else []) + ([f"pid {p.pid}"] if p.pid is not None else [])
    return ", ".join(parts)


def culprits_phrase(report: Report, ranks: Sequence[int] | None = None, *, most: int = 3) -> str:
    """``2 (on node-b, pid 4242)``: the culprits as ranges, with the process of each whose host
    or pid is known (the first ``most``; the rest counted)."""
    ranks = report.culprit_ranks if ranks is None else ranks
    text = compact_ranks(ranks)
    known = [(r, report.processes[r]) for r in ranks if r in report.processes]
    if not known:
        return text
    if len(ranks) == 1:
        return f"{text} ({process_phrase(known[0][1])})"
    said = [f"rank {r} {process_phrase(p)}" for r, p in known[:most]]
    if len(known) > most:
        said.append(f"+{len(known) - most} more in the JSON report")
    return f"{text} ({'; '.join(said)})"


def finding_columns(
    finding: Finding,
    processes: Mapping[int, RankProcess] | None = None,
    stacks: StackEvidence | None = None,
) -> tuple[list[Column], int]:
    """The majority's column, then one per distinct culprit behaviour; and how many were cut.
    A column of one rank names its process where ``processes`` know it (``rank 2 on node-b,
    pid 4242``).

    Culprits that did exactly the same thing (same op, sizes, dtypes, state and stack, and
    the same entry) share a column, so 500 ranks stuck the same way are one column, not 500.
    Where a culprit's column is its newest entry (a hang: not the op its peers wait in), each
    column says which entry it is.

    A column whose entry has no frames (a JSON dump: ``collect --store``, torch's debug
    server) shows where its ranks' live Python stacks (``stacks``) have them now instead: the
    ``now (live stack)`` row, never the op's call site.
    """
    columns: list[Column] = []
    entries = _newest_entries(finding)
    live_of = _LivePlaces(stacks)
    if finding.expected is not None:
        waits = finding.kind not in MISMATCH_KINDS and bool(finding.waiting_ranks)
        who = "majority"
        if waits:
            who = f"waiting {ranks_phrase(finding.waiting_ranks, max_chars=32)}"
        label = finding.group.label if finding.group is not None else "?"
        at = f"#{finding.seq} of {label}" if finding.seq is not None else f"in {label}"
        if waits:
            majority: Iterable[int] = finding.waiting_ranks
        elif finding.group is not None:
            majority = (r for r in finding.group.members if r not in finding.actual)
        else:
            majority = ()
        now = live_of(majority) if not finding.expected.stack else None
        columns.append(
            Column(title=who, sig=finding.expected, entry=at if entries else None, now=now)
        )
    same: dict[tuple[OpSignature, str | None], list[int]] = {}
    for rank, sig in sorted(finding.actual.items()):
        same.setdefault((sig, entries.get(rank)), []).append(rank)
    distinct = sorted(same.items(), key=lambda kv: kv[1][0])
    suffix = " (newest entry)" if finding.kind not in MISMATCH_KINDS else ""
    live = {w.rank: w for w in finding.where or () if w.function is not None}
    for (sig, entry), ranks in distinct[:MAX_CULPRIT_COLUMNS]:
        process = (processes or {}).get(ranks[0]) if len(ranks) == 1 else None
        where = f" {process_phrase(process)}" if process is not None else ""
        title = f"{ranks_phrase(ranks, max_chars=32)}{where}{suffix}"
        w = live.get(ranks[0]) if len(ranks) == 1 and suffix else None
        now = None if w is None else f"{w.function} ({w.file}" + (f":{w.line})" if w.line else ")")
        if now is None and not sig.stack:
            now = live_of(ranks)
        columns.append(
            Column(title=title, sig=sig, entry=entry or ("-" if entries else None), now=now)
        )
    return columns, max(0, len(distinct) - MAX_CULPRIT_COLUMNS)


class _LivePlaces:
    """Where ranks' live Python stacks have them, said short: the innermost user frame of
    their stack class (``train_step (train.py:120)``); the place most of the ranks share,
    and how many other places the rest are in. The classes are read once, when first asked."""

    def __init__(self, stacks: StackEvidence | None) -> None:
        self._stacks = stacks
        self._place: dict[int, str] | None = None

    def __call__(self, ranks: Iterable[int]) -> str | None:
        if self._stacks is None:
            return None
        if self._place is None:
            self._place = {
                r: _class_place(c) for c in self._stacks.classes.classes for r in c.ranks
            }
        places = Counter(p for r in ranks if (p := self._place.get(r)) is not None)
        if not places:
            return None
        first = min(places, key=lambda p: (-places[p], p))
        others = len(places) - 1
        return first + (f" (+{plural(others, 'other place')})" if others else "")


def _class_place(c: StackClass) -> str:
    return c.description if c.user_frame is None else frame_label(c.user_frame)


MISMATCH_KINDS = frozenset(
    {
        FindingKind.OP_MISMATCH,
        FindingKind.SIZE_MISMATCH,
        FindingKind.DTYPE_MISMATCH,
        FindingKind.SEQUENCE_SHIFT,
    }
)


def _shapes(shapes: tuple[tuple[int, ...], ...]) -> str:
    if not shapes:
        return "-"
    text = " ".join("[" + ",".join(str(d) for d in s) + "]" for s in shapes[:4])
    return text + (f" +{len(shapes) - 4}" if len(shapes) > 4 else "")


def compare_rows(columns: Sequence[Column], *, mark: bool = True) -> list[list[str]]:
    """Rows ``[field, value per column]``; with ``mark``, a value that differs from the first
    column's ends with ``≠``."""

    def cells(get: str) -> list[str]:
        values = [_field(c.sig, get) for c in columns]
        base = values[0]
        return [base] + [v if v == base or not mark else f"{v} ≠" for v in values[1:]]

    rows = [[label, *cells(key)] for key, label in _FIELDS]
    if any(c.entry is not None for c in columns):
        rows.insert(0, ["entry", *(c.entry or "-" for c in columns)])
    if any(c.now is not None for c in columns):  # the live stack first; the entry's, labelled
        rows.insert(0, ["now (live stack)", *(c.now or "-" for c in columns)])
        rows[-1][0] = "op called from"
    return rows


_FIELDS = (
    ("op", "op"),
    ("input_sizes", "input sizes"),
    ("output_sizes", "output sizes"),
    ("dtypes", "dtypes"),
    ("state", "state"),
    ("call_site", "called from"),
)


def _field(sig: OpSignature, key: str) -> str:
    if key == "op":
        return sig.op
    if key == "input_sizes":
        return _shapes(sig.input_sizes)
    if key == "output_sizes":
        return _shapes(sig.output_sizes)
    if key == "dtypes":
        dtypes = sorted(set(sig.input_dtypes) | set(sig.output_dtypes))
        return ",".join(dtypes) or "-"
    if key == "state":
        return sig.state or "-"
    site = call_site(sig.stack)
    if site is not None:
        return short_frame(site)
    return "(library code only)" if sig.stack else "(not in the dump)"


def short_frame(frame: str, *, parts: int = 2) -> str:
    """``all_reduce (/site-packages/torch/distributed/distributed_c10d.py:3245)`` ->
    ``all_reduce (distributed/distributed_c10d.py:3245)``: the last ``parts`` path parts."""
    name, sep, rest = frame.partition(" (")
    if not sep or not rest.endswith(")"):
        return frame
    path = rest[:-1]
    tail = "/".join(path.replace("\\", "/").split("/")[-parts:])
    return f"{name} ({tail})"


def stack_rows(columns: Sequence[Column]) -> list[list[str]] | None:
    """Stacks side by side, innermost frame first, torch's wrappers folded; None if no stacks."""
    stacks = [_user_frames(c.sig.stack) for c in columns]
    if not any(stacks):
        return None
    depth = min(MAX_FRAMES, max(len(s) for s in stacks))
    rows = [[s[i] if i < len(s) else "" for s in stacks] for i in range(depth)]
    cut = [len(s) - depth for s in stacks]
    if any(c > 0 for c in cut):
        rows.append([f"… +{plural(c, 'frame')}" if c > 0 else "" for c in cut])
    return rows


def _user_frames(stack: tuple[str, ...]) -> list[str]:
    """Short frames; the leading run of library frames (torch, the standard library,
    site-packages: context, not the user's code) is folded after its first frame."""
    lead = 0
    while lead < len(stack) and is_library_text(stack[lead]):
        lead += 1
    out = [short_frame(stack[0])] if lead else []
    if lead > 1:
        torch_only = all("torch/" in f.replace("\\", "/") for f in stack[1:lead])
        out.append(f"(+{plural(lead - 1, 'torch frame' if torch_only else 'library frame')})")
    out.extend(short_frame(f) for f in stack[lead:])
    return out
