"""FR003 for all_to_all from FR 2.11's per-peer split sizes: name the mismatched peer pair.

An all_to_all's members legitimately pass different sizes, so sizes alone cannot show a
mismatch (``ops.UNEVEN_OPS``). From FR format 2.11 (torch 2.16) each entry records how many
elements it sends to each group-local peer (``input_split_sizes``) and expects from each
(``output_split_sizes``). Member ``a`` sending ``x`` elements to ``b`` while ``b`` expects
``y != x`` from ``a`` is a size mismatch of that pair: the collective cannot complete. The
rank in every mismatched pair (one rank whose splits are off for several peers) is the
culprit; with no such rank, both ranks of each pair are named. Read by field presence: dumps
without split sizes give no finding here.
"""

from __future__ import annotations

from collections import Counter

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.signatures import signature_at
from frtrace.detail import SplitMismatch, SplitPair
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["ALL_TO_ALL_OPS", "check"]

ALL_TO_ALL_OPS = frozenset(
    {"all_to_all", "all_to_all_single", "all_to_all_v_single", "alltoall", "alltoall_base"}
)
# Pairs spelled out in a finding's evidence; the rest are counted.
_SHOWN_PAIRS = 6


def check(facts: Facts) -> list[Finding]:
    """One finding per all_to_all (group, seq) whose recorded split sizes disagree."""
    dumps, membership, match = facts.dumps, facts.membership, facts.matched
    column_in = dumps.entries.column("input_split_sizes")
    if column_in.null_count == len(column_in) or match.collectives.empty:
        return []
    column_out = dumps.entries.column("output_split_sizes")
    ops = match.collectives[match.collectives["op"].isin(ALL_TO_ALL_OPS)]
    findings = []
    for _, part in ops.groupby(["gid", "seq"], sort=True):
        gid, seq = int(part["gid"].iloc[0]), int(part["seq"].iloc[0])
        group = membership.groups[gid]
        members = list(group.members)
        rows = dict(zip(part["rank"].tolist(), part["row"].tolist(), strict=True))
        if set(rows) != set(members):
            continue  # someone never entered it: the wait graph's finding, not this one
        sent = {r: column_in[rows[r]].as_py() for r in members}
        wanted = {r: column_out[rows[r]].as_py() for r in members}
        n = len(members)
        if any(v is None or len(v) != n for v in (*sent.values(), *wanted.values())):
            continue
        pairs = [
            (a, b, sent[a][j], wanted[b][i])
            for i, a in enumerate(members)
            for j, b in enumerate(members)
            if sent[a][j] != wanted[b][i]
        ]
        if not pairs:
            continue
        seen = Counter(r for a, b, _, _ in pairs for r in {a, b})
        in_all = sorted(r for r, k in seen.items() if k == len(pairs))
        culprits = tuple(in_all[:1]) if len(in_all) == 1 and len(pairs) > 1 else ()
        if not culprits:
            culprits = tuple(sorted(seen))
        op = str(part["op"].iloc[0])
        findings.append(
            Finding(
                kind=FindingKind.SIZE_MISMATCH,
                severity=Severity.ERROR,
                culprit_ranks=culprits,
                waiting_ranks=tuple(r for r in members if r not in culprits),
                group=group,
                seq=seq,
                op=op,
                actual={r: signature_at(dumps, rows[r], op=op) for r in culprits},
                confidence=Confidence.HIGH if len(culprits) == 1 else Confidence.MEDIUM,
                detail=SplitMismatch(
                    culprits=culprits,
                    pairs=tuple(
                        SplitPair(sender=p, receiver=q, sends=x, expects=y)
                        for p, q, x, y in pairs[:_SHOWN_PAIRS]
                    ),
                    total=len(pairs),
                ),
            )
        )
    return findings
