"""What the stacks say of the verdict, for every reading, in the sentence reports have said."""

from __future__ import annotations

from typing import get_args

import pytest

from frtrace.detail.stacks import (
    AlsoElsewhere,
    Corroborates,
    NoCulpritStack,
    NothingMore,
    NothingStandsOut,
    SharesWaitingStack,
    SinglesOut,
    StackReading,
    StacksAlone,
)
from frtrace.report.words_stacks import stack_statement

WAIT = "load_batch (data.py:88), in Event.wait (threading.py:629)"

EXAMPLES: list[tuple[StackReading, str]] = [
    (NothingMore(), "The stacks show nothing the dumps do not."),
    (
        StacksAlone(
            named=(2,),
            place="load_batch (train.py:41)",
            waiting_in="all_reduce",
            others=3,
            missing=(),
            places=2,
        ),
        "No Flight Recorder dump was read: the stacks alone name rank 2 (load_batch "
        "(train.py:41)), outside the torch.distributed call the 3 other ranks with a stack are "
        "in (all_reduce). Its ring buffer would confirm which op it never joined.",
    ),
    (
        StacksAlone(named=(), place=None, waiting_in=None, others=3, missing=(3,), places=2),
        "No Flight Recorder dump was read, and the stacks cannot tell: rank 3 of the job has no "
        "stack (collect on every host of the job, then analyse the union).",
    ),
    (
        StacksAlone(named=(), place=None, waiting_in=None, others=4, missing=(), places=3),
        "No Flight Recorder dump was read, and the stacks cannot tell: they are in 3 places, not "
        "one torch.distributed call that all but a few ranks are in.",
    ),
    (
        SinglesOut(ranks=(3,), place=WAIT),
        f"The dumps name no culprit, but the stacks single out rank 3 ({WAIT}): look there first.",
    ),
    (
        SinglesOut(ranks=(3, 4), place=WAIT),
        f"The dumps name no culprit, but the stacks single out ranks 3-4 ({WAIT}): look there "
        "first.",
    ),
    (NothingStandsOut(), "The dumps name no culprit and no rank's stack stands out."),
    (
        NoCulpritStack(culprits=(1,)),
        "No stack sample for culprit rank 1: collect one (py-spy dump, or frtrace collect) to "
        "see where it is.",
    ),
    (
        SharesWaitingStack(culprits=(1, 5), place=WAIT),
        f"The stacks question the verdict: culprit ranks 1,5 has the same stack as ranks "
        f"waiting on it ({WAIT}); check whether it is really behind.",
    ),
    (
        AlsoElsewhere(culprits=(1,), others=(6,), place=WAIT),
        f"The stacks partly question the verdict: culprit rank 1 is elsewhere, as the dumps "
        f"say, but so is rank 6 ({WAIT}), which no finding explains.",
    ),
    (
        AlsoElsewhere(culprits=(1,), others=(6, 7), place=WAIT),
        f"The stacks partly question the verdict: culprit rank 1 is elsewhere, as the dumps "
        f"say, but so are ranks 6-7 ({WAIT}), which no finding explains.",
    ),
    (
        Corroborates(culprits=(2,), places=(WAIT,), others=1),
        f"The stacks corroborate the verdict: culprit rank 2 is elsewhere ({WAIT}), while the "
        "1 other rank with a stack is where the dumps say.",
    ),
    (
        Corroborates(culprits=(2, 3, 9), places=("a", "b", "c", "d"), others=4093),
        "The stacks corroborate the verdict: culprit ranks 2-3,9 are elsewhere (a; b (+2)), "
        "while the 4,093 other ranks with a stack are where the dumps say.",
    ),
]


def test_every_reading_has_an_example() -> None:
    """A new reading gets its sentence pinned here."""
    assert {type(r) for r, _ in EXAMPLES} == set(get_args(StackReading))


@pytest.mark.parametrize(("reading", "sentence"), EXAMPLES, ids=lambda v: type(v).__name__)
def test_a_reading_in_one_sentence(reading: StackReading, sentence: str) -> None:
    """Each reading of the stacks in its one sentence."""
    assert stack_statement(reading) == sentence
