"""The machine-readable report: one JSON object, versioned by ``schema_version``.

The fields are described in docs/json-report.md; the golden files of the fixture
scenarios (``tests/fixtures/golden/*.json``) pin them. Lists of ranks are lists of integers.
Display strings (summaries, evidence, next steps, statements) name each file the way the other
formats do (``filenames``); the structured fields (an op's ``stack``, ``where``'s ``file``,
stack frames) keep the paths as read. Bump the major version on a breaking change (a field
removed, renamed or its meaning changed), the minor when fields are added (1.1: ``where`` and
``stacks``; 1.2: ``timeline``, ``evidence_files``, ``evidence_problems``, ``disagreements``
and a finding's ``failures``; 1.3: ``processes``, each rank's host and pid where known; 1.4:
``history``, a restarted job's other attempts; 1.5: ``named_ranks``, each named rank's basis;
next: ``fingerprint`` (and an attempt's, with ``same_hang_as``), ``ras``: NCCL RAS's answers).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from frtrace.base.printable import json_safe
from frtrace.model import (
    KIND_CODES,
    AttemptSummary,
    Finding,
    GroupProgress,
    GroupRef,
    History,
    NamedRank,
    OpSignature,
    Report,
    Straggler,
)
from frtrace.report.common import headline
from frtrace.report.filenames import file_names
from frtrace.report.nextsteps import finding_steps, next_steps
from frtrace.report.select import Selection
from frtrace.report.stacks import stacks_to_dict, where_to_dict
from frtrace.report.timeline import failure_to_dict
from frtrace.report.wording import disagreement, evidence, summary, why
from frtrace.report.words_history import attempt_line, repeat_line, same_hang_as
from frtrace.report.words_notes import note, straggler_note
from frtrace.report.words_ras import ras_to_dict

__all__ = ["SCHEMA_VERSION", "dumps_compact", "render_json", "report_to_dict"]

SCHEMA_VERSION = "1.5"


def _group(g: GroupRef | None) -> dict[str, Any] | None:
    if g is None:
        return None
    return {
        "name": g.name,
        "desc": g.desc,
        "label": g.label,
        "members": list(g.members),
        "membership_inferred": g.inferred,
    }


def _sig(s: OpSignature | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "op": s.op,
        "input_sizes": [list(x) for x in s.input_sizes],
        "output_sizes": [list(x) for x in s.output_sizes],
        "input_dtypes": list(s.input_dtypes),
        "output_dtypes": list(s.output_dtypes),
        "state": s.state,
        "stack": list(s.stack),
    }


def _finding(f: Finding, report: Report, say: Callable[[str], str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "code": f.code,
        "kind": str(f.kind),
        "severity": f.severity.name.lower(),
        "summary": say(summary(f)),
        "culprit_ranks": list(f.culprit_ranks),
        "waiting_ranks": list(f.waiting_ranks),
        "group": _group(f.group),
        "seq": f.seq,
        "op": f.op,
        "expected": _sig(f.expected),
        "actual": {str(r): _sig(s) for r, s in sorted(f.actual.items())},
        "confidence": str(f.confidence),
        "why": say(why(f)),
        "evidence": [say(e) for e in evidence(f)],
        "cycle": list(f.cycle),
        "next_steps": [say(s) for s in finding_steps(f, report)],
    }
    if f.where:  # 1.1: only when stack files were found (reports without stay as in 1.0)
        out["where"] = [_said(where_to_dict(w), say, "summary") for w in f.where]
    if f.failures:  # 1.2: the job's own failures this finding rests on
        out["failures"] = [_said(failure_to_dict(x), say, "where") for x in f.failures]
    return out


def _said(d: dict[str, Any], say: Callable[[str], str], *keys: str) -> dict[str, Any]:
    """``d`` with its display strings at ``keys`` naming files the report's way."""
    return d | {k: say(d[k]) for k in keys if isinstance(d.get(k), str)}


def _straggler(s: Straggler) -> dict[str, Any]:
    return {
        "rank": s.rank,
        "collectives": s.collectives,
        "last_share": round(s.last_share, 4),
        "median_late_ms": round(s.median_late_ms, 3),
        "groups": list(s.groups),
        "corroborated": s.corroborated,
        "note": straggler_note(s),
    }


def _named(n: NamedRank) -> dict[str, Any]:
    """A rank the report names, as what, on what basis, and the facts that rests on."""
    role, basis = str(n.role), str(n.basis)
    return {"rank": n.rank, "role": role, "basis": basis, "rests_on": list(n.rests_on)}


def _progress(p: GroupProgress) -> dict[str, Any]:
    return {
        "group": p.group.name,
        "label": p.group.label,
        "members": list(p.group.members),
        "entered": list(p.entered),
        "finished": list(p.finished),
    }


def _attempt(a: AttemptSummary, this: bool, same: int | None) -> dict[str, Any]:
    return {
        "attempt": a.attempt,
        "this": this,
        "later": a.later,
        "verdict": str(a.verdict),
        "summary": attempt_line(a, this=this, same=same),
        "fingerprint": a.fingerprint,
        "same_hang_as": same,
        "died_in_init": a.died_in_init,  # (optional in the schema: added after 1.5)
        "culprit_ranks": list(a.culprit_ranks),
        "suspected_ranks": list(a.suspected_ranks),
        "hosts": {str(r): h for r, h in a.hosts},
        "code": None if a.kind is None else KIND_CODES[a.kind],
        "kind": None if a.kind is None else str(a.kind),
        "group": _group(a.group),
        "op": a.op,
        "seq": a.seq,
        "cause": None if a.cause is None else str(a.cause),
        "world_size": a.world_size,
        "ranks_loaded": a.ranks_loaded,
        "evidence_files": a.evidence_files,
    }


def _history(h: History) -> dict[str, Any]:
    this = h.this.attempt
    return {
        "attempt": this,
        "attempts": [_attempt(a, a is h.this, same_hang_as(h, a)) for a in (h.this, *h.others)],
        "left_out": list(h.left_out),
        "repeat_offenders": [
            {
                "rank": r.rank,
                "ranks": list(r.ranks),
                "hosts": list(r.hosts),
                "attempts": list(r.attempts),
                "summary": repeat_line(r, this),
            }
            for r in h.repeats
        ],
    }


def report_to_dict(report: Report, selection: Selection | None = None) -> dict[str, Any]:
    """The report as plain JSON-ready data (schema ``SCHEMA_VERSION``)."""
    say = file_names(report).text  # display strings name each file one way; paths stay
    chosen = None
    if selection is not None and selection.active:
        ranks = list(selection.ranks) if selection.ranks is not None else None
        chosen = {"pg": selection.pg, "ranks": ranks}
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "verdict": str(report.verdict),
        "has_problems": report.has_problems,
        "headline": headline(report),
        "fingerprint": report.fingerprint,  # what was found, hashed: the same hang seen twice
        "culprit_ranks": list(report.culprit_ranks),
        "suspected_ranks": list(report.suspected_ranks),
        "victim_ranks": list(report.victim_ranks),
        "named_ranks": [_named(n) for n in report.named_ranks],  # 1.5
        "world_size": report.world_size,
        "ranks_loaded": list(report.ranks_loaded),
        "ranks_missing": list(report.ranks_missing),
        "ranks_unreadable": list(report.ranks_unreadable),
        "selection": chosen,
        "findings": [_finding(f, report, say) for f in report.findings],
        "stragglers": [_straggler(s) for s in report.stragglers],
        "data_notes": [say(note(n)) for n in report.data_notes],
        "next_steps": [say(s) for s in next_steps(report, limit=None)],
        "groups": [_group(g) for g in report.groups],
        "progress": [_progress(p) for p in report.progress],
        "wait_edges": [{"waiter": a, "target": b, "why": k} for a, b, k in report.wait_edges],
    }
    if report.stacks is not None:  # 1.1: only when stack files were found
        stacks = _said(stacks_to_dict(report.stacks), say, "statement")
        stacks["classes"] = [_said(c, say, "description") for c in stacks["classes"]]
        out["stacks"] = stacks
    if report.timeline or report.evidence_files or report.evidence_problems:
        out["timeline"] = [_said(failure_to_dict(f), say, "where") for f in report.timeline]
        out["evidence_files"] = list(report.evidence_files)
        out["evidence_problems"] = list(report.evidence_problems)
    if report.disagreements:
        out["disagreements"] = [say(disagreement(d)) for d in report.disagreements]  # 1.2
    if report.processes:  # 1.3: only when a host or pid is known
        out["processes"] = {
            str(r): {"host": p.host, "pid": p.pid} for r, p in sorted(report.processes.items())
        }
    if report.history is not None:  # 1.4: only of a folder that holds several attempts
        out["history"] = _history(report.history)
    if (ras := ras_to_dict(report)) is not None:  # only where NCCL RAS's answers were read
        out["ras"] = ras
    return out


def render_json(report: Report, selection: Selection | None = None) -> str:
    """Deterministic JSON with a trailing newline; see ``dumps_compact`` for the layout."""
    return dumps_compact(report_to_dict(report, selection)) + "\n"


# json.dumps(value, ensure_ascii=False) makes an encoder at every call (a given option): one
# encoder, kept (a 16,384-rank report has a line per waiting rank)
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode


def dumps_compact(value: Any, indent: int = 2, _level: int = 0) -> str:
    """Indented JSON that keeps lists of numbers and small flat objects on one line.

    A 4,096-rank report stays a few hundred lines instead of tens of thousands, and a diff of
    two reports still shows one change per line.
    """
    pad = " " * (indent * (_level + 1))
    end = " " * (indent * _level)
    numbers = isinstance(value, list) and all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in value
    )
    if not isinstance(value, (dict, list)) or numbers:
        return json_safe(_ENCODE(value))
    # (one line of <= 100 characters holds fewer than 50 items: a larger value is not
    # written out whole only to be measured, at every level of a 16,384-rank report)
    if len(value) < 50 and _depth(value) <= 2:
        one_line = json_safe(_ENCODE(value))
        if len(one_line) <= 100:
            return one_line
    if isinstance(value, dict):
        items = [
            f"{pad}{json_safe(_ENCODE(str(k)))}: {dumps_compact(v, indent, _level + 1)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    items = [pad + dumps_compact(v, indent, _level + 1) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + end + "]"


def _depth(value: Any) -> int:
    """Nesting depth: 0 for a scalar, 1 for a flat list or object."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0
