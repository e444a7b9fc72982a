#!/usr/bin/env python3
"""Score frtrace (and torchfrtrace) on HangBench: how often is it right on real hung jobs?

    python3 scripts/hangbench.py                   # score both, print the tables
    python3 scripts/hangbench.py --no-torchfrtrace # frtrace only (in-process, seconds)
    python3 scripts/hangbench.py --write-doc       # and rewrite the tables in docs/hangbench.md
    python3 scripts/hangbench.py --scale           # also run the scale rows (scripts/bench.py)
    python3 scripts/hangbench.py --only CASE --verbose

Every case of ``bench/hangbench/corpus/MANIFEST.json`` (truth from how its job was built) is
copied to a temporary folder with its files' times as the job left them, and analysed by
``frtrace.pipeline.analyze(DIR, jobs=1)``; its JSON report (``report_to_dict``) is judged
against the truth (``judge``): the ranks it names (culprits and suspected) against the
culprits, innocent ranks named, ranks outside the job, a false "healthy", a missed culprit,
the culprit's function in ``where``, the time to the verdict. torchfrtrace runs (in a child
process, ``scripts/torchfrtrace_runner.py``) on the cases it can read: a folder whose dumps lie
at its top, uncompressed. ``bench/hangbench/known_wrong.json`` lists the cases frtrace gets
wrong, each with how and why (``tests/test_hangbench.py`` holds frtrace to exactly that).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_SPEC = importlib.util.spec_from_file_location("hangbench_scale", ROOT / "bench/hangbench/scale.py")
assert _SPEC is not None and _SPEC.loader is not None
scale = importlib.util.module_from_spec(_SPEC)  # (by its path: bench/hangbench is no package)
_SPEC.loader.exec_module(scale)

CORPUS = ROOT / "bench" / "hangbench" / "corpus"
KNOWN_WRONG = ROOT / "bench" / "hangbench" / "known_wrong.json"
DOC = ROOT / "docs" / "hangbench.md"
BEGIN, END = "<!-- hangbench:begin -->", "<!-- hangbench:end -->"
PREFIX = "comm_lib_trace_rank_"
HUNG = ("hang", "desync", "cannot_tell")  # a verdict that says the job is not healthy
AXES = ("fault", "mechanism", "launcher", "capture", "folder")


@dataclass
class Answer:
    """What one tool said of one case, and how it compares with the truth."""

    tool: str
    read: bool = True  # False: the tool cannot read this case (or crashed on it)
    verdict: str = ""
    named: list[int] = field(default_factory=list)  # culprits and suspected (or blamed)
    suspected: list[int] = field(default_factory=list)  # of them, the ones only suspected
    stragglers: list[int] = field(default_factory=list)
    where: dict[int, str] = field(default_factory=dict)  # rank -> function the report names
    seconds: float = 0.0
    note: str = ""
    problems: list[str] = field(default_factory=list)
    hits: int = 0
    false_pos: int = 0
    false_neg: int = 0
    where_ok: bool | None = None


def load(corpus: Path = CORPUS) -> dict[str, Any]:
    return json.loads((corpus / "MANIFEST.json").read_text())


def known_wrong() -> dict[str, dict[str, Any]]:
    return json.loads(KNOWN_WRONG.read_text()) if KNOWN_WRONG.exists() else {}


@contextlib.contextmanager
def staged(name: str, entry: dict[str, Any], corpus: Path = CORPUS) -> Iterator[Path]:
    """A copy of the case's folder with every file's time as the job left it."""
    with tempfile.TemporaryDirectory(prefix="hangbench-") as tmp:
        folder = Path(tmp) / name
        shutil.copytree(corpus / name, folder)
        for rel, mtime in entry.get("mtimes", {}).items():
            with contextlib.suppress(OSError):
                os.utime(folder / rel, (mtime, mtime))
        yield folder


def ask_frtrace(folder: Path) -> Answer:
    from frtrace.errors import FrtraceError
    from frtrace.pipeline import analyze
    from frtrace.report.json import report_to_dict

    started = time.perf_counter()
    try:
        doc = report_to_dict(analyze(folder, jobs=1))
    except FrtraceError as exc:
        return Answer("frtrace", verdict="no answer", seconds=time.perf_counter() - started,
                      note=str(exc).splitlines()[0][:160])  # fmt: skip
    seconds = time.perf_counter() - started
    where = {
        w["rank"]: w.get("function") or "" for f in doc["findings"] for w in f.get("where") or []
    }
    return Answer(
        "frtrace",
        verdict=doc["verdict"],
        named=sorted(set(doc["culprit_ranks"]) | set(doc["suspected_ranks"])),
        suspected=sorted(doc["suspected_ranks"]),
        stragglers=sorted({s["rank"] for s in doc["stragglers"]}),
        where=where,
        seconds=seconds,
        note=doc["headline"],
    )


def ask_torchfrtrace(folder: Path) -> Answer:
    """torchfrtrace on the pickles at the folder's top (it reads nothing else)."""
    if not any(p.name[len(PREFIX) :].isdigit() for p in folder.glob(f"{PREFIX}*")):
        return Answer("torchfrtrace", read=False, note="no dumps at the folder's top")
    sys.path.insert(0, str(ROOT / "scripts"))
    from torchfrtrace_runner import run_torchfrtrace

    result = run_torchfrtrace(
        folder, prefix=PREFIX, stage=True, timeout_s=300, extra_args=("--allow-incomplete-ranks",)
    )
    if result.crashed or result.timed_out:
        return Answer("torchfrtrace", read=False, seconds=result.wall_s,
                      note=f"crashed: {(result.error_line or '?')[:100]}")  # fmt: skip
    spoke = [f for f in result.findings if f.kind not in ("no_errors",)]
    return Answer(
        "torchfrtrace",
        verdict="hang" if spoke else "healthy",
        named=list(result.blamed_ranks),
        seconds=result.wall_s,
        note=f"{len(spoke)} finding(s)",
    )


def _last(function: str) -> str:
    return function.replace(".<locals>.", ".").rsplit(".", 1)[-1]


def judge(truth: dict[str, Any], world: int, answer: Answer) -> Answer:
    """The answer against the truth: the counts of the tables and the case's problems."""
    if not answer.read:
        return answer
    culprits, stragglers = set(truth["culprit_ranks"]), set(truth["straggler_ranks"])
    hung = truth["verdict"] == "hang"
    named = set(answer.named)
    want = culprits if hung else stragglers
    got = named if hung else set(answer.stragglers)
    said = got | named  # (of a job that is not hung, a culprit named is a false one too)
    answer.hits, answer.false_pos = len(said & want), len(said - want)
    answer.false_neg = len(want - got)
    problems = []
    if hung and answer.verdict in ("healthy", "healthy_with_stragglers"):
        problems.append("false_healthy")
    if not hung and answer.verdict in ("hang", "desync"):
        problems.append("false_hang")
    if named - culprits - stragglers:
        problems.append("innocent")
    if any(r < 0 or r >= world for r in named | set(answer.stragglers)):
        problems.append("outside")
    if want - got:
        problems.append("missed")
    answer.problems = problems
    if truth.get("where") and hung and answer.tool == "frtrace":
        said = {_last(answer.where.get(r, "")) for r in culprits}
        answer.where_ok = truth["where"] in said
    return answer


def culprit_stack_kept(entry: dict[str, Any]) -> bool:
    """Whether the folder holds a Python stack of a culprit: its recorder sidecar, py-spy or
    faulthandler text, or the debug server's periodic stacks (every rank's)."""
    names = [Path(f).name for f in entry.get("mtimes", {})]
    own = tuple(
        f"{kind}_rank_{r}." for r in entry["truth"]["culprit_ranks"]
        for kind in ("stacks", "pyspy", "traceback")
    )  # fmt: skip
    periodic = re.compile(r"stacks_\d{8}_\d{6}\.txt(\.gz)?")
    return any(n.startswith(own) or periodic.fullmatch(n) for n in names)


def score_case(name: str, entry: dict[str, Any], torchfrtrace: bool) -> dict[str, Answer]:
    with staged(name, entry) as folder:
        out = {"frtrace": judge(entry["truth"], entry["world_size"], ask_frtrace(folder))}
        if torchfrtrace:
            answer = ask_torchfrtrace(folder)
            out["torchfrtrace"] = judge(entry["truth"], entry["world_size"], answer)
    return out


# ---- tables ------------------------------------------------------------------------------


def pct(num: int, den: int) -> str:
    return f"{100 * num / den:.0f}%" if den else "-"


def summary(rows: list[tuple[dict[str, Any], Answer]]) -> dict[str, str]:
    read = [(e, a) for e, a in rows if a.read]
    tp = sum(a.hits for _, a in read)
    fp = sum(a.false_pos for _, a in read)
    fn = sum(a.false_neg for _, a in read)
    where = [a.where_ok for e, a in read if a.where_ok is not None]
    host = [(ok, e) for e, a in read if (ok := a.where_ok) is not None
            and e["truth"]["culprit_in_host_code"]]  # fmt: skip
    kept = [ok for ok, e in host if culprit_stack_kept(e)]
    times = [a.seconds for _, a in read]
    return {
        "cases": str(len(rows)),
        "read": str(len(read)),
        "precision": pct(tp, tp + fp),
        "recall": pct(tp, tp + fn),
        "innocent": str(sum("innocent" in a.problems for _, a in read)),
        "false healthy": str(sum("false_healthy" in a.problems for _, a in read)),
        "outside": str(sum("outside" in a.problems for _, a in read)),
        "false stragglers": str(
            sum(
                bool(
                    set(a.stragglers)
                    - set(e["truth"]["straggler_ranks"])
                    - set(e["truth"]["culprit_ranks"])
                )
                for e, a in read
            )
        ),
        "where (host code)": f"{sum(ok for ok, _ in host)}/{len(host)}" if host else "-",
        "where (host, stack kept)": f"{sum(kept)}/{len(kept)}" if kept else "-",
        "where (all)": f"{sum(where)}/{len(where)}" if where else "-",
        "time median": f"{statistics.median(times):.2f} s" if times else "-",
        "time max": f"{max(times):.2f} s" if times else "-",
    }


FRTRACE_COLS = ["cases", "precision", "recall", "innocent", "false healthy", "false stragglers",
                "where (host code)",
                "where (host, stack kept)", "where (all)", "time median", "time max"]  # fmt: skip
TORCH_COLS = ["read", "precision", "recall", "innocent", "false healthy", "time median"]


def table(results: dict[str, tuple[dict[str, Any], dict[str, Answer]]], axis: str | None) -> str:
    groups: dict[str, list[str]] = {}
    for name, (entry, _) in results.items():
        key = "all" if axis is None else entry[axis]
        groups.setdefault(key, []).append(name)
    both = any("torchfrtrace" in ans for _, ans in results.values())
    head = [axis or "", *FRTRACE_COLS] + ([f"tft {c}" for c in TORCH_COLS] if both else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        ours = summary([(results[n][0], results[n][1]["frtrace"]) for n in groups[key]])
        cells = [f"`{key}`" if axis else "**all**", *(ours[c] for c in FRTRACE_COLS)]
        if both:
            theirs = summary([(results[n][0], results[n][1]["torchfrtrace"]) for n in groups[key]])
            cells += [theirs[c] for c in TORCH_COLS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ranks(values: list[int]) -> str:
    return ",".join(map(str, values)) if values else "-"


def case_rows(results: dict[str, tuple[dict[str, Any], dict[str, Answer]]]) -> str:
    wrong = known_wrong()
    lines = [
        "| case | truth | frtrace | where | torchfrtrace | known wrong |",
        "|---|---|---|---|---|---|",
    ]
    for name, (entry, ans) in results.items():
        t = entry["truth"]
        truth = f"{t['verdict']} {ranks(t['culprit_ranks'] or t['straggler_ranks'])}"
        ours = ans["frtrace"]
        said = f"{ours.verdict} {ranks(ours.named)}"
        if ours.suspected:
            said += f" (suspected {ranks(ours.suspected)})"
        if ours.stragglers:
            said += f" (stragglers {ranks(ours.stragglers)})"
        if ours.problems:
            said += " ✗ " + ",".join(ours.problems)
        where = {None: "", True: f"`{t['where']}` ✓", False: f"`{t['where']}` ✗"}[ours.where_ok]
        tft = ans.get("torchfrtrace")
        theirs = "" if tft is None else f"({tft.note})"
        if tft is not None and tft.read:
            theirs = f"{tft.verdict} {ranks(tft.named)}"
            theirs += " ✗ " + ",".join(tft.problems) if tft.problems else ""
        why = wrong.get(name, {}).get("why", "")
        lines.append(f"| `{name}` | {truth} | {said} | {where} | {theirs} | {why} |")
    return "\n".join(lines)


def counts(manifest: dict[str, Any]) -> str:
    lines = []
    for axis in AXES:
        tally: dict[str, int] = {}
        for entry in manifest["cases"].values():
            tally[entry[axis]] = tally.get(entry[axis], 0) + 1
        cells = ", ".join(f"`{k}` {v}" for k, v in sorted(tally.items(), key=lambda kv: -kv[1]))
        lines.append(f"- **{axis}** ({len(tally)}): {cells}")
    spec = manifest.get("not_generated", {})
    lines.append(
        f"- **written down, not generated** ({len(spec)}): "
        + "; ".join(f"`{n}` ({s['why_not']})" for n, s in spec.items())
    )
    return "\n".join(lines)


# ---- the page ------------------------------------------------------------------------------


def page(manifest: dict[str, Any], results: dict[str, Any], took: float) -> str:
    wrong = known_wrong()
    parts = [
        BEGIN,
        f"{len(results)} cases scored ({len(manifest.get('not_generated', {}))} more written down, "
        f"not generated); `python3 scripts/hangbench.py --write-doc` took {took:.0f} s.",
        "",
        "### The cases, per axis",
        "",
        counts(manifest),
        "",
        "### Scores",
        "",
        "frtrace's columns, then torchfrtrace's (`tft`, on the cases it can read: dumps at the "
        "folder's top, uncompressed). Precision and recall are over the ranks named (culprits and "
        "suspected; for a job that is not hung, the stragglers); *innocent*: cases naming a rank "
        "that is not a culprit (culprit or suspected); *false stragglers*: cases calling a rank "
        "that is neither a straggler nor a culprit a straggler; *where*: the culprit's function "
        "named in the report's `where`, of the cases with a culprit alive somewhere of its own "
        "(host code: stuck in its own code; stack kept: the folder holds a stack of it).",
        "",
        table(results, None),
    ]
    for axis in AXES:
        parts += ["", f"#### Per {axis}", "", table(results, axis)]
    parts += ["", "### Every case", "", case_rows(results), "", "### Known wrong", ""]
    parts += [f"- `{n}` ({', '.join(w['fails'])}): {w['why']}" for n, w in wrong.items()] or [
        "none"
    ]
    parts += ["", "### Scale", "", scale.SCALE_NOTE, "", scale.scale_table(), END]
    return "\n".join(parts)


def write_doc(text: str) -> None:
    doc = DOC.read_text()
    head, rest = doc.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(head + text + tail)


def score_all(
    manifest: dict[str, Any], names: list[str], torchfrtrace: bool, verbose: bool
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if names:  # (warm: the first analysis pays for imports, not for the case)
        with staged(names[0], manifest["cases"][names[0]]) as folder:
            ask_frtrace(folder)
    for name in names:
        entry = manifest["cases"][name]
        answers = score_case(name, entry, torchfrtrace)
        results[name] = (entry, answers)
        if verbose or answers["frtrace"].problems:
            a = answers["frtrace"]
            print(f"{name}: {a.verdict} {a.named} {a.problems} {a.where} {a.note}", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--no-torchfrtrace", action="store_true", help="score frtrace only")
    ap.add_argument("--write-doc", action="store_true", help="rewrite docs/hangbench.md's part")
    ap.add_argument("--scale", action="store_true", help="also run the scale rows (long)")
    ap.add_argument("--scale-rows", nargs="*", default=None, metavar="RANKSxENTRIES")
    ap.add_argument("--scale-timeout", type=float, default=3600)
    ap.add_argument("--only", action="append", default=[], metavar="CASE")
    ap.add_argument("--json", type=Path, help="every case's answers, as JSON")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    started = time.monotonic()
    if args.scale:
        rows = scale.SCALE_ROWS if args.scale_rows is None else [
            tuple(int(x) for x in r.split("x")) for r in args.scale_rows
        ]  # fmt: skip
        scale.run_scale(rows, args.scale_timeout)  # type: ignore[arg-type]
    manifest = load()
    names = args.only or list(manifest["cases"])
    results = score_all(manifest, names, not args.no_torchfrtrace, args.verbose)
    text = page(manifest, results, time.monotonic() - started)
    print(text)
    if args.json:
        found = {n: {t: asdict(a) for t, a in ans.items()} for n, (_, ans) in results.items()}
        args.json.write_text(json.dumps(found, indent=1))
    if args.write_doc:
        write_doc(text)
    gate = [n for n, (_, ans) in results.items()
            if {"false_healthy", "innocent", "outside"} & set(ans["frtrace"].problems)
            and n not in known_wrong()]  # fmt: skip
    return 1 if gate else 0


if __name__ == "__main__":
    sys.exit(main())
