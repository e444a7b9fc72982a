"""``frtrace compare``'s answer, said from the typed comparison: each verdict, each group."""

from __future__ import annotations

import pytest

from frtrace.detail.motion import GroupMotion, Motion, SnapshotComparison
from frtrace.model import GroupRef
from frtrace.report.compare import render_comparison


def _group(name: str, moved: tuple[int, ...], still: tuple[int, ...]) -> GroupMotion:
    members = tuple(sorted(moved + still))
    ref = GroupRef(name=name, desc=None, members=members, inferred=False)
    return GroupMotion(group=ref, moved=moved, still=still, before=(), after=())


def _comparison(
    verdict: Motion, moved: tuple[int, ...], still: tuple[int, ...]
) -> SnapshotComparison:
    return SnapshotComparison(
        verdict=verdict,
        moved=moved,
        still=still,
        compared=tuple(sorted(moved + still)),
        groups=(
            _group("0", moved, still),
            _group("1", (), ()),  # no member in both snapshots: not listed
            _group("2", (), (0, 1)),
            _group("3", (4, 5), ()),
        ),
        gap_s=None,
    )


CASES = [
    (Motion.HUNG, (), (0, 1, 2), "HUNG: none of the 3 ranks moved between the snapshots",
     "none moved"),
    (Motion.SLOW, (0, 1), (2,), "SLOW, NOT HUNG: ranks 0-1 moved; rank 2 did not (look there)",
     "moved 0-1; still 2"),
    (Motion.SLOW, (0,), (1, 2), "SLOW, NOT HUNG: ranks 0 moved; ranks 1-2 did not (look there)",
     "moved 0; still 1-2"),
    (Motion.PROGRESSING, (0, 1, 2), (), "PROGRESSING: all 3 ranks moved between the snapshots",
     "all moved"),
    (Motion.CANNOT_TELL, (), (), "no rank has a readable dump in both snapshots", None),
]  # fmt: skip


@pytest.mark.parametrize(("verdict", "moved", "still", "first", "group0"), CASES)
def test_each_verdict_then_each_group(
    verdict: Motion, moved: tuple[int, ...], still: tuple[int, ...], first: str, group0: str | None
) -> None:
    """The answer's line, then per group with members in both: which moved, which did not."""
    lines = render_comparison(_comparison(verdict, moved, still)).splitlines()
    assert lines[0] == first
    shown = [] if group0 is None else [f"  pg 0: {group0}"]
    assert lines[1:] == [*shown, "  pg 2: none moved", "  pg 3: all moved"]
    assert {v for v, *_ in CASES} == set(Motion)


def test_past_the_cap_the_groups_are_counted() -> None:
    """Only the first groups are listed; the rest are a count."""
    c = _comparison(Motion.HUNG, (), (0,))
    text = render_comparison(c, max_groups=2)
    assert text.splitlines()[1:] == ["  pg 0: none moved", "  … 2 more groups"]
