"""The picture of how far each rank got: ranks across, process groups down, as inline SVG.

Each cell is one rank in one group, coloured by where that rank stands against the group's
front (the highest sequence number any member entered): finished everything, inside the
newest op, behind by one, by a few, by many, or no dump; a culprit's cell in the group of a
finding that names it has a colour of its own (it may be inside the op, like its waiters).
Runs of equal cells are drawn as one rectangle, so a 4,096-rank row of identical ranks costs
one element; a cell unlike the rest of its row is drawn at least ``MIN_ODD_PX`` wide, so one
odd rank among thousands stays visible. Groups with the same description and disjoint
members (the 512 tensor-parallel groups of a job) share one row.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import IntEnum
from html import escape

from frtrace.model import GroupProgress, Report, Severity
from frtrace.report.common import compact_ranks, plural

__all__ = ["Status", "build_rows", "render_heatmap_svg"]

PLOT_PX = 960  # width of the cell area
LABEL_PX = 200  # row labels on the left
ROW_PX = 18
MIN_ODD_PX = 3.0  # a minority run is never drawn narrower than this
MAX_ROWS = 48  # more rows than this: rows with something odd first, the rest counted
LEGEND_ROW_PX = 18


class Status(IntEnum):
    """Where one member stands in one group, from the best to the worst."""

    NOT_MEMBER = 0
    DONE = 1  # entered the group's newest op and it finished
    IN_OP = 2  # inside the group's newest op, not finished
    NO_ENTRIES = 3  # has a dump, but no entry of this group in its buffer
    BEHIND_1 = 4  # one op behind the group's front
    BEHIND_FEW = 5  # 2-9 ops behind
    BEHIND_MANY = 6  # 10 or more behind
    NO_DUMP = 7  # the rank has no (readable) dump
    CULPRIT = 8  # a culprit of a finding about this group (whatever else its cell would say)


COLOURS = {
    Status.DONE: "#74c476",
    Status.IN_OP: "#fdd96a",
    Status.NO_ENTRIES: "#d9d9d9",
    Status.BEHIND_1: "#fb6a4a",
    Status.BEHIND_FEW: "#cb181d",
    Status.BEHIND_MANY: "#67000d",
    Status.NO_DUMP: "#525252",
    Status.CULPRIT: "#7b2cbf",
}
LEGEND = {
    Status.CULPRIT: "culprit",
    Status.DONE: "finished the group's newest op",
    Status.IN_OP: "inside the newest op (waiting)",
    Status.BEHIND_1: "1 op behind",
    Status.BEHIND_FEW: "2-9 ops behind",
    Status.BEHIND_MANY: "10+ ops behind",
    Status.NO_ENTRIES: "no entry of this group in its buffer",
    Status.NO_DUMP: "no dump",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """Consecutive columns of one row with the same status (and seq, when behind)."""

    start: int  # column index
    stop: int  # exclusive
    status: Status
    ranks: tuple[int, ...]
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One row of the picture: a group, or several disjoint groups sharing a description."""

    label: str
    note: str  # members, or how many groups share the row
    runs: tuple[Run, ...]
    odd: bool  # some member is not at the front of its group


def _status(entered: int | None, finished: int | None, front: int, has_dump: bool) -> Status:
    if not has_dump:
        return Status.NO_DUMP
    if entered is None:
        return Status.NO_ENTRIES
    behind = front - entered
    if behind <= 0:
        return Status.DONE if finished is not None and finished >= entered else Status.IN_OP
    if behind == 1:
        return Status.BEHIND_1
    return Status.BEHIND_FEW if behind < 10 else Status.BEHIND_MANY


def _detail(status: Status, entered: int | None, front: int) -> str:
    if status in (Status.BEHIND_1, Status.BEHIND_FEW, Status.BEHIND_MANY):
        return f"entered up to #{entered}, the group reached #{front}"
    if status == Status.IN_OP:
        return f"inside #{front}, not finished"
    if status == Status.DONE:
        return f"finished #{front}"
    return LEGEND.get(status, "")


def _families(progress: tuple[GroupProgress, ...]) -> list[list[GroupProgress]]:
    """Groups sharing a meaningful description with disjoint members go on one row."""
    rows: list[list[GroupProgress]] = []
    open_rows: dict[str, tuple[list[GroupProgress], set[int]]] = {}
    for p in progress:
        desc = p.group.desc or ""
        if desc in ("", "undefined", "default_pg"):
            rows.append([p])
            continue
        current = open_rows.get(desc)
        if current is not None and current[1].isdisjoint(p.group.members):
            current[0].append(p)
            current[1].update(p.group.members)
            continue
        family = [p]
        rows.append(family)
        open_rows[desc] = (family, set(p.group.members))
    return rows


def _culprit_cells(report: Report) -> set[tuple[int, str | None]]:
    """(rank, group name) of each culprit in the group of a finding that names it; (rank,
    None) for a finding of no one group (a deadlock across groups): its every group."""
    cells: set[tuple[int, str | None]] = set()
    for f in report.findings:
        if f.severity >= Severity.WARNING:
            name = f.group.name if f.group is not None else None
            cells.update((r, name) for r in f.culprit_ranks if r in report.culprit_ranks)
    return cells


def build_rows(report: Report, columns: list[int]) -> tuple[list[Row], int]:
    """The rows to draw over ``columns`` (ranks), and how many rows were left out."""
    index = {r: i for i, r in enumerate(columns)}
    absent = set(report.ranks_missing) | set(report.ranks_unreadable)
    named = _culprit_cells(report)
    rows: list[Row] = []
    for family in _families(report.progress):
        cells: dict[int, tuple[Status, str]] = {}
        for p in family:
            entered = [e for e in p.entered if e is not None]
            front = max(entered) if entered else 0
            for member, e, f in zip(p.group.members, p.entered, p.finished, strict=True):
                if member in index:
                    st = _status(e, f, front, member not in absent)
                    detail = _detail(st, e, front)
                    culprit = (member, p.group.name) in named or (member, None) in named
                    if culprit and st != Status.NO_DUMP:
                        st, detail = Status.CULPRIT, f"culprit; {detail}"
                    cells[index[member]] = (st, detail)
        if not cells:
            continue
        runs = _runs(cells, columns)
        first = family[0].group
        if len(family) == 1:
            label = first.label
            note = f"ranks {compact_ranks(first.members, max_chars=40)}"
        else:
            label = first.desc or first.label
            note = plural(len(family), "group") + f" of {len(first.members)}"
        odd = (
            any(r.status not in (Status.DONE, Status.IN_OP, Status.NOT_MEMBER) for r in runs)
            or len({r.status for r in runs}) > 1
        )
        rows.append(Row(label=label, note=note, runs=tuple(runs), odd=odd))
    if len(rows) <= MAX_ROWS:
        return rows, 0
    keep = {id(r) for r in [r for r in rows if r.odd][:MAX_ROWS]}
    for r in rows:
        if len(keep) >= MAX_ROWS:
            break
        keep.add(id(r))
    kept = [r for r in rows if id(r) in keep]
    return kept, len(rows) - len(kept)


def _runs(cells: dict[int, tuple[Status, str]], columns: list[int]) -> list[Run]:
    runs: list[Run] = []
    start = None
    key: tuple[Status, str] | None = None
    for col in range(len(columns) + 1):
        cur = cells.get(col) if col < len(columns) else None
        if cur == key and col < len(columns):
            continue
        if key is not None and start is not None and key[0] != Status.NOT_MEMBER:
            runs.append(
                Run(
                    start=start,
                    stop=col,
                    status=key[0],
                    ranks=tuple(columns[start:col]),
                    detail=key[1],
                )
            )
        start, key = col, cur
    return runs


def _ticks(n: int) -> list[int]:
    step = 1
    while n / step > 16:
        step *= 2
    return list(range(0, n, step))


def render_heatmap_svg(report: Report, columns: list[int] | None = None) -> str:
    """The ranks x groups picture as one ``<svg>`` element (no scripts, no external files)."""
    cols = columns if columns is not None else list(range(report.world_size))
    rows, cut = build_rows(report, cols)
    n = max(1, len(cols))
    cell = PLOT_PX / n
    top = 8
    plot_h = len(rows) * ROW_PX
    shown = set(cols)
    culprits = [r for r in report.culprit_ranks if r in shown]
    suspected = set(report.suspected_ranks)
    axis_y = top + plot_h
    legend_y = axis_y + 52
    width = LABEL_PX + PLOT_PX + 16
    legend = _legend_places(width - 16)
    legend_rows = 1 + max(line for _, _, line in legend)
    height = legend_y + 24 + LEGEND_ROW_PX * (legend_rows - 1) + (16 if cut else 0)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="heatmap" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="how far each rank got in each process group">',
        f'<rect x="{LABEL_PX}" y="{top}" width="{PLOT_PX}" height="{plot_h}" fill="#f7f7f7"/>',
    ]
    col_index = {r: i for i, r in enumerate(cols)}
    for i, row in enumerate(rows):
        out.extend(_row_svg(row, top + i * ROW_PX, cell))
    for t in _ticks(len(cols)):
        x = LABEL_PX + (t + 0.5) * cell
        out.append(
            f'<line x1="{x:.2f}" y1="{axis_y}" x2="{x:.2f}" y2="{axis_y + 4}" stroke="#999"/>'
            f'<text x="{x:.2f}" y="{axis_y + 15}" text-anchor="middle" class="tick">'
            f"{cols[t]}</text>"
        )
    out.append(
        f'<text x="{LABEL_PX - 6}" y="{axis_y + 15}" text-anchor="end" class="muted">rank</text>'
    )
    out.extend(_culprit_marks(culprits, suspected, col_index, cell, axis_y))
    for status, x, line in legend:
        y = legend_y + line * LEGEND_ROW_PX
        out.append(
            f'<rect x="{x:.1f}" y="{y}" width="12" height="12" fill="{COLOURS[status]}"/>'
            f'<text x="{x + 16:.1f}" y="{y + 10}" class="tick">{escape(LEGEND[status])}</text>'
        )
    if cut:
        last = legend_y + (legend_rows - 1) * LEGEND_ROW_PX
        out.append(
            f'<text x="{LABEL_PX}" y="{last + 30}" class="muted">'
            f"{plural(cut, 'more row')} not drawn; rows with a rank out of step come first</text>"
        )
    out.append("</svg>")
    return "\n".join(out)


def _row_svg(row: Row, y: int, cell: float) -> list[str]:
    """One group's row: its label, and a rectangle per run of ranks in one status (an odd
    run, not its majority's, drawn at least ``MIN_ODD_PX`` wide)."""
    out = [
        f'<text x="{LABEL_PX - 6}" y="{y + 13}" text-anchor="end" class="lbl">'
        f'{escape(row.label)} <tspan class="muted">{escape(row.note)}</tspan></text>'
    ]
    counts = Counter[Status]()
    for run in row.runs:
        counts[run.status] += run.stop - run.start
    majority = counts.most_common(1)[0][0] if counts else Status.DONE
    ordered = sorted(row.runs, key=lambda r: r.status != majority)
    for run in ordered:
        x = LABEL_PX + run.start * cell
        w = (run.stop - run.start) * cell
        if run.status != majority and w < MIN_ODD_PX:
            x -= (MIN_ODD_PX - w) / 2
            w = MIN_ODD_PX
        title = f"{row.label}: {_ranks_label(run.ranks)}: {run.detail}"
        out.append(
            f'<rect x="{x:.2f}" y="{y + 1}" width="{w:.2f}" height="{ROW_PX - 2}" '
            f'fill="{COLOURS[run.status]}"><title>{escape(title)}</title></rect>'
        )
    return out


def _culprit_marks(
    culprits: list[int], suspected: set[int], col_index: dict[int, int], cell: float, axis_y: int
) -> list[str]:
    """A triangle and the rank under each culprit's column (hollow for a suspect), up to 24."""
    out = []
    for r in culprits[:24]:
        x = LABEL_PX + (col_index[r] + 0.5) * cell
        fill = "none" if r in suspected else "#cb181d"
        out.append(
            f'<path d="M{x:.2f},{axis_y + 20} l-6,11 h12 z" fill="{fill}" stroke="#cb181d"/>'
            f'<text x="{x:.2f}" y="{axis_y + 44}" text-anchor="middle" class="culprit">'
            f"{r}</text>"
        )
    if len(culprits) > 24:
        out.append(
            f'<text x="{LABEL_PX}" y="{axis_y + 44}" class="culprit">'
            f"{len(culprits)} culprit ranks</text>"
        )
    return out


def _legend_places(right: float) -> list[tuple[Status, float, int]]:
    """Each legend entry's x and row: left to right from the plot's left edge, on to a new
    row before an entry would pass ``right`` (11 px text, 0.6 em a character: generous)."""
    places = []
    x, row = float(LABEL_PX), 0
    for status, text in LEGEND.items():
        step = 24 + 6.6 * len(text)
        if x + step - 8 > right and x > LABEL_PX:
            x, row = float(LABEL_PX), row + 1
        places.append((status, x, row))
        x += step
    return places


def _ranks_label(ranks: tuple[int, ...]) -> str:
    return f"rank{'s' if len(ranks) != 1 else ''} {compact_ranks(ranks)}"
