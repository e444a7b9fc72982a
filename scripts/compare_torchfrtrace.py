"""frtrace's verdict next to torchfrtrace's, on every fixture scenario (a markdown table).

    python3 scripts/compare_torchfrtrace.py            # Gloo and NCCL-format fixtures

For each scenario: the truth (from the fixture's manifest / the simulator, never from either
tool), what frtrace names, and what torchfrtrace 2.13 does: crash (last line of its traceback),
or the ranks it reports as missing or culprits.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from torchfrtrace_runner import run_torchfrtrace  # noqa: E402

from frtrace.base.ranges import format_ranks  # noqa: E402
from frtrace.pipeline import analyze  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"


def cases() -> list[tuple[str, Path, str, list[int]]]:
    """(name, directory, prefix, expected culprits)."""
    out = []
    manifest = json.loads((FIXTURES / "gloo" / "MANIFEST.json").read_text())
    for name, truth in sorted(manifest.items()):
        expected = [] if name == "late_rank" else truth["culprit_ranks"]
        out.append((f"gloo/{name}", FIXTURES / "gloo" / name, "rank_", expected))
    for scenario in sorted((FIXTURES / "nccl").iterdir()):
        truth = json.loads((scenario / "truth.json").read_text())
        expected = truth["culprit_ranks"] if truth["hung"] else []
        for variant in ("2.10-pickle", "2.4-json"):
            if (scenario / variant).is_dir():
                prefix = "nccl_trace_rank_"
                out.append(
                    (f"nccl/{scenario.name} ({variant})", scenario / variant, prefix, expected)
                )
    return out


def cell(ranks: list[int] | tuple[int, ...]) -> str:
    return format_ranks(ranks) if ranks else "none"


def main() -> int:
    rows = ["| scenario | truth: culprits | frtrace | torchfrtrace |", "|---|---|---|---|"]
    right = 0
    total = 0
    theirs_right = 0
    for name, directory, prefix, expected in cases():
        report = analyze(directory)
        ours = f"{report.verdict}: {cell(report.culprit_ranks)}"
        ok = list(report.culprit_ranks) == expected
        result = run_torchfrtrace(directory, prefix=prefix, stage=True, timeout_s=300)
        if result.crashed or result.timed_out:
            theirs = f"crash: `{(result.error_line or '?')[:70]}`"
            their_ok = False
        else:
            theirs = f"blames {cell(result.blamed_ranks)}"
            their_ok = list(result.blamed_ranks) == expected
        total += 1
        right += ok
        theirs_right += their_ok
        rows.append(
            f"| {name} | {cell(expected)} | {ours}{'' if ok else ' ✗'} | "
            f"{theirs}{'' if their_ok else ' ✗'} |"
        )
    rows.append(f"\nright culprits: frtrace {right}/{total}, torchfrtrace {theirs_right}/{total}")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
