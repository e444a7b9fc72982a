"""Ranks the wait graph says never joined an op, that may be blocked in one their buffer does
not show (Gloo records no send/recv): why each may be waiting, not holding anyone up.

A rank whose buffer shows no unfinished op looks exactly like a rank stuck in host code. It
may be waiting instead when

- its Python stack is inside a torch.distributed call: a point-to-point one (send, recv, a
  pipeline schedule's wait on its batched p2p: ``places.in_send_recv``) or ``barrier``
  (``monitored_barrier`` is not recorded either), one that makes a group (``new_group``,
  ``init_process_group``, a device mesh: it waits on the group's other members, and a rank
  that made its groups in another order left it there), or any call where it ran unrecorded
  ops;
- it has no stack and ran send/recv that Gloo counted but did not write (``unrecorded``);
- it has neither, but ranks absent from the same op of groups like its own (every dp group
  of a pipeline's stages misses the same all_reduce) wait in send/recv as above, behind a
  rank seen stuck elsewhere (its stack in host code, a failure the job reported as a cause,
  or an error message naming it): a pipeline stage held up by another looks exactly so;
- it has neither and no such rank is seen waiting (no stage has a stack or counted p2p), but
  a rank absent from the same op of another group like its own is seen stuck: the stage it
  holds up may be this one, or this one may be stuck too; the dumps cannot tell which, so it
  is doubted, not named (a rank absent from the very same op is no pipeline neighbour: two
  ranks of one group are not told apart so).
  Without a rank seen stuck, the one absence nothing explains is the likeliest cause, and is
  left alone.

A rank whose stack is in host code is where it is: never doubted. This names no culprit; the
hang rule keeps a doubted rank's finding a warning.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import MatchResult
from frtrace.analysis.facts.places import in_send_recv
from frtrace.analysis.facts.waitgraph import EdgeKind, WaitGraph
from frtrace.detail import MaybeElsewhere
from frtrace.detail.hang import makes_a_group
from frtrace.evidence.model import JobEvidence, Role
from frtrace.model import CulpritWhere

__all__ = ["maybe_elsewhere"]

_ABSENT = (EdgeKind.NEVER_JOINED, EdgeKind.JOINED_LATE)


def maybe_elsewhere(
    waits: WaitGraph,
    matched: MatchResult,
    membership: Membership,
    places: Mapping[int, CulpritWhere],
    unrecorded: Mapping[tuple[int, int], int],
    evidence: JobEvidence,
) -> dict[int, MaybeElsewhere]:
    """Per rank that never joined an op its peers wait in: why it may be blocked elsewhere."""
    absent: dict[tuple[int, int], set[int]] = defaultdict(set)  # (gid, seq) -> ranks
    for e in waits.edges:
        if e.kind in _ABSENT and e.seq is not None and e.target not in matched.blocked:
            absent[(e.gid, e.seq)].add(e.target)
    ran: dict[int, int] = defaultdict(int)
    for (r, _), n in unrecorded.items():
        ran[r] += n
    out: dict[int, MaybeElsewhere] = {}
    for r in sorted({r for ranks in absent.values() for r in ranks}):
        doubt = _own_doubt(r, places.get(r), ran[r])
        if doubt is not None:
            out[r] = doubt
    stuck = {r for r, p in places.items() if p.place != "collective" and p.sampled == "frames"}
    stuck |= {f.rank for f in evidence.failures if f.role == Role.CAUSE and f.rank is not None}
    stuck |= {r for f in evidence.failures for r in f.named_ranks}
    waiting = set(out)  # (once: the ranks doubted below are no one's evidence)
    for (gid, seq), ranks in sorted(absent.items()):
        # (a rank with a stack is where its stack says; one seen stuck is not behind anyone)
        unknown = sorted(r for r in ranks if r not in out and r not in places and r not in stuck)
        if not unknown:
            continue
        alike = [gid, *membership.siblings(gid)]
        around = set().union(*(absent.get((g, seq), set()) for g in alike))
        neighbours = tuple(sorted(around & waiting))
        behind = tuple(sorted(around & stuck))
        if not neighbours:  # (no stage seen waiting: only one seen stuck in a group alike)
            behind = tuple(sorted((around - ranks) & stuck))
        if not behind:
            continue
        for r in unknown:
            out[r] = MaybeElsewhere(
                rank=r, in_call=None, unrecorded=0, neighbours=neighbours, behind=behind
            )
    return out


def _own_doubt(rank: int, place: CulpritWhere | None, ran: int) -> MaybeElsewhere | None:
    """What the rank's own stack and counts say (see the module docstring)."""
    if place is None:
        return MaybeElsewhere(rank=rank, in_call=None, unrecorded=ran) if ran else None
    if place.place != "collective":
        return None  # in host code: where it is
    call = place.library_call or ""
    barrier = "barrier" in call
    if ran or barrier or in_send_recv(place) or makes_a_group(call):
        return MaybeElsewhere(rank=rank, in_call=place, unrecorded=ran)
    return None
