"""A restarted job's history from its attempts' reports: each in short, naming only its own
culprits within the job, and the ranks and hosts named in several (suspects never)."""

from __future__ import annotations

from collections.abc import Mapping

from frtrace.analysis.history import (
    MAX_OTHER_ATTEMPTS,
    repeat_offenders,
    summarise,
    with_history,
)
from frtrace.model import RankProcess, RepeatOffender, Report, Verdict


def report(
    culprits: tuple[int, ...] = (),
    *,
    suspected: tuple[int, ...] = (),
    hosts: Mapping[int, str] | None = None,
    world: int = 8,
) -> Report:
    """A report of a hang naming ``culprits`` (suspects among them, as the verdict makes
    them), with each rank's host where ``hosts`` says."""
    return Report(
        verdict=Verdict.HANG if culprits else Verdict.HEALTHY,
        culprit_ranks=tuple(sorted({*culprits, *suspected})),
        suspected_ranks=suspected,
        findings=(),
        stragglers=(),
        world_size=world,
        ranks_loaded=tuple(range(world)),
        ranks_missing=(),
        ranks_unreadable=(),
        data_notes=(),
        groups=(),
        wait_edges=(),
        processes={r: RankProcess(host=h, pid=None) for r, h in (hosts or {}).items()},
    )


def test_one_attempt_has_no_history() -> None:
    only = report((1,))
    assert with_history(only, 0, (), lambda n: report()) is only
    assert only.history is None


def test_a_summary_names_its_own_culprits_apart_from_its_suspects_and_only_the_jobs() -> None:
    s = summarise(2, report((1, 9), suspected=(3,), hosts={1: "n1", 3: "n3"}), later=True)
    assert (s.attempt, s.later, s.verdict) == (2, True, Verdict.HANG)
    assert (s.culprit_ranks, s.suspected_ranks) == ((1,), (3,))  # 9: beyond the 8 ranks
    assert s.hosts == ((1, "n1"), (3, "n3"))
    assert (s.kind, s.world_size, s.ranks_loaded) == (None, 8, 8)


def test_the_same_rank_on_the_same_host_repeats_once() -> None:
    reports = {0: report((1,), hosts={1: "n1"}), 1: report((1,), hosts={1: "n1"})}
    out = with_history(report((1, 4), hosts={1: "n1"}), 2, (0, 1), reports.__getitem__)
    assert out.history is not None
    assert [a.attempt for a in out.history.others] == [0, 1]
    assert out.history.this.culprit_ranks == (1, 4)
    assert out.history.repeats == (RepeatOffender(attempts=(0, 1, 2), rank=1, hosts=("n1",)),)


def test_a_rank_on_different_hosts_and_a_host_with_different_ranks() -> None:
    attempts = [
        summarise(0, report((1,), hosts={1: "n1"}), later=False),
        summarise(1, report((1,), hosts={1: "n2"}), later=False),
        summarise(2, report((5,), hosts={5: "n1"}), later=False),
    ]
    assert repeat_offenders(attempts) == (
        RepeatOffender(attempts=(0, 1), rank=1, hosts=("n1", "n2")),
        RepeatOffender(attempts=(0, 2), hosts=("n1",), ranks=(1, 5)),
    )


def test_suspects_never_repeat() -> None:
    """In a restarted job's folder most of an earlier attempt's dumps were overwritten:
    "no dump" says nothing of a rank's machine."""
    attempts = [
        summarise(0, report(suspected=(1,), hosts={1: "n1"}), later=False),
        summarise(1, report(suspected=(1,), hosts={1: "n1"}), later=False),
    ]
    assert repeat_offenders(attempts) == ()


def test_the_nearest_attempts_are_analysed_the_rest_counted() -> None:
    asked: list[int] = []

    def analyse(n: int) -> Report:
        asked.append(n)
        return report()

    others = tuple(n for n in range(20) if n != 5)
    out = with_history(report(), 5, others, analyse)
    assert out.history is not None
    nearest = sorted(others, key=lambda n: (abs(n - 5), n))[:MAX_OTHER_ATTEMPTS]
    assert sorted(asked) == sorted(nearest) == [a.attempt for a in out.history.others]
    assert out.history.left_out == tuple(sorted(set(others) - set(nearest)))
    assert [a.later for a in out.history.others] == [n > 5 for n in sorted(nearest)]
