"""Every documented command on every kind of input, run as a user runs it: the console script.

Each case runs ``frtrace`` (the script installed next to the interpreter) in a subprocess; all
cases run in parallel once per session. Every case must exit with a code the README documents
(and the one expected), print no traceback, keep stderr to one-line messages, and write valid
files (JSON that validates against ``frtrace schema``, HTML that parses, Parquet that reads).
``FRTRACE_MATRIX=path.md`` also writes the matrix (command, input, exit code, first line).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, GLOO, GLOO_JSON, fr211_set

# on one xdist worker: the matrix (a session fixture, ~40 s of console-script runs) is run once
pytestmark = pytest.mark.xdist_group("commands")

NCCL = FIXTURES / "nccl"
NCCL_FORMATS = sorted(p.name for p in (NCCL / "host_stall").iterdir() if p.is_dir())


def frtrace_script() -> str:
    """The console script of the frtrace installed for this interpreter."""
    here = Path(sys.executable).parent / "frtrace"
    if here.exists():
        return str(here)
    found = shutil.which("frtrace")
    if found is None:
        pytest.skip("no frtrace console script: pip install -e . first")
    return found


@dataclass(frozen=True, slots=True)
class Input:
    """One dump set a user might bring, and what frtrace should make of it."""

    name: str
    analyze_exit: int  # analyze's exit code (0 healthy, 1 problem or partial, 2 unusable)
    verdict: str | None = None  # for `check --expect-verdict`; None: not analysable
    kind: bool = True  # one of the representative kinds: every command runs on it


def _inputs() -> list[Input]:
    # Every command runs on each kind (kind=True); the other sets run `analyze -f json` only
    # (loading, analysis, schema): they read differently, but share every renderer.
    return [
        Input("gloo/never_joins", 1, "hang"),  # real Gloo, pickle
        Input("gloo/healthy", 0, "healthy", kind=False),
        Input("gloo_json/mesh_stall", 1, "hang"),  # real Gloo, JSON
        *(
            Input(f"nccl/host_stall/{f}", 1, "hang", kind=f == "2.2-pickle")  # oldest layout
            for f in NCCL_FORMATS
        ),
        Input("nccl/missing_dump/2.4-json", 1, "hang", kind=False),
        Input("damaged", 1, "hang"),  # truncated and empty files, a log
        Input("fr211", 1, "desync"),  # torch 2.16: FR 2.11, nccl2:/c10d:, split sizes
        Input("archive.tgz", 1, "hang"),
        Input("archive.zip", 1, "hang", kind=False),
        Input("incidents", 2),  # two incidents' dumps of the same ranks
        Input("empty", 2),
        Input("nonexistent", 2),
    ]


INPUTS = {i.name: i for i in _inputs()}


def _build(root: Path) -> dict[str, Path]:
    """Paths of every input; the ones not committed are made under ``root``."""
    paths = {name: FIXTURES / name for name in INPUTS}
    paths["fr211"] = fr211_set(root / "fr211")
    with tarfile.open(root / "archive.tgz", "w:gz") as tar:
        tar.add(GLOO / "never_joins", arcname="never_joins")
    paths["archive.tgz"] = root / "archive.tgz"
    with zipfile.ZipFile(root / "archive.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted((GLOO_JSON / "never_joins").iterdir()):
            zf.write(p, f"never_joins/{p.name}")
    paths["archive.zip"] = root / "archive.zip"
    # (two different jobs' dumps of the same ranks: byte-identical copies would be one file)
    for name, job in (("incident1", "never_joins"), ("incident2", "late_rank")):
        shutil.copytree(GLOO / job, root / "incidents" / name)
    paths["incidents"] = root / "incidents"
    (root / "empty").mkdir()
    paths["empty"] = root / "empty"
    paths["nonexistent"] = root / "nonexistent"
    return paths


@dataclass(frozen=True, slots=True)
class Case:
    """One command line: {dir}, {out} are filled in per run."""

    command: str
    input: str | None
    args: tuple[str, ...]
    exit: int
    writes: str | None = None  # "json", "html", "parquet", "expect": what {out} must hold
    stdout_json: bool = False  # stdout is a JSON report


def _cases() -> list[Case]:
    cases: list[Case] = []
    for i in INPUTS.values():
        loads = i.verdict is not None
        cases += [
            Case(
                "analyze -f json",
                i.name,
                ("analyze", "{dir}", "-f", "json"),
                i.analyze_exit,
                stdout_json=loads,
            ),
        ]
        if not i.kind:
            continue
        cases += [
            Case("summary", i.name, ("summary", "-d", "{dir}"), 0 if loads else 2),
            Case("analyze", i.name, ("analyze", "{dir}"), i.analyze_exit),
            Case(
                "analyze -f html -o",
                i.name,
                ("analyze", "{dir}", "-f", "html", "-o", "{out}/report.html"),
                i.analyze_exit,
                writes="html" if loads else None,
            ),
            Case("show", i.name, ("show", "{dir}", "--last", "3", "--stacks"), 0 if loads else 2),
            Case(
                "check --expect-verdict",
                i.name,
                ("check", "{dir}", "--expect-verdict", i.verdict or "hang"),
                0 if loads else 2,
            ),
            Case(
                "export",
                i.name,
                ("export", "{dir}", "-o", "{out}/tables"),
                0 if loads else 2,
                writes="parquet" if loads else None,
            ),
        ]
    hang = "gloo/never_joins"
    for name in (hang, "nccl/host_stall/2.10-pickle"):
        cases.append(
            Case("analyze -f markdown", name, ("analyze", "-d", "{dir}", "-f", "markdown"), 1)
        )
    cases += [
        Case(
            "analyze --pg --ranks",
            hang,
            ("analyze", "{dir}", "--pg", "default_pg", "--ranks", "0-1", "-f", "json"),
            1,
            stdout_json=True,
        ),
        Case("analyze -q -j 1", hang, ("analyze", "-d", "{dir}", "-q", "-j", "1"), 1),
        Case(
            "analyze --allow-partial",
            "nccl/missing_dump/2.4-json",
            ("analyze", "{dir}", "--allow-partial", "-f", "json", "-o", "{out}/r.json"),
            1,
            writes="json",
        ),
        Case("analyze --only", "incidents", ("analyze", "{dir}", "--only", "incident1/*"), 1),
        Case("check --expect-culprits", hang, ("check", "{dir}", "--expect-culprits", "2"), 0),
        Case(
            "check --expect-culprits (wrong)", hang, ("check", "{dir}", "--expect-culprits", "3"), 1
        ),
        Case(
            "check --write",
            hang,
            ("check", "{dir}", "--write", "--expect", "{out}/e.json"),
            0,
            writes="expect",
        ),
        Case("check (no expectation)", hang, ("check", "{dir}"), 2),
        Case("analyze -f xml", hang, ("analyze", "{dir}", "-f", "xml"), 2),
        Case("analyze --ranks x", hang, ("analyze", "{dir}", "--ranks", "x"), 2),
        Case("analyze DIR -d OTHER", hang, ("analyze", "{dir}", "-d", "elsewhere"), 2),
        Case("analyze (no DIR)", None, ("analyze",), 2),
        Case("export (no -o)", hang, ("export", "{dir}"), 2),
        Case("env", None, ("env",), 0),
        Case("env --torch 2.4 -f env", None, ("env", "--torch", "2.4", "--format", "env"), 0),
        Case("env --torch x", None, ("env", "--torch", "x"), 2),
        Case("schema", None, ("schema",), 0, stdout_json=True),
        Case("no such command", None, ("frobnicate",), 2),
    ]
    for command in ("analyze", "show", "check", "summary", "export", "env", "schema"):
        cases.append(Case(f"{command} --help", None, (command, "--help"), 0))
    return cases


CASES = _cases()
DOCUMENTED_EXITS = {0, 1, 2}


def _case_id(case: Case) -> str:
    return f"{case.command}[{case.input}]" if case.input else case.command


@dataclass(slots=True)
class Ran:
    case: Case
    argv: list[str]
    out: Path
    code: int = -1
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    files: list[Path] = field(default_factory=list)


@pytest.fixture(scope="session")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every case, run once, in parallel."""
    script = frtrace_script()
    root = tmp_path_factory.mktemp("inputs")
    paths = _build(root)
    runs: dict[str, Ran] = {}
    for n, case in enumerate(CASES):
        out = tmp_path_factory.mktemp(f"out{n}")
        where = str(paths[case.input]) if case.input else ""
        argv = [script, *(a.format(dir=where, out=out) for a in case.args)]
        runs[_case_id(case)] = Ran(case=case, argv=argv, out=out)
    env = dict(os.environ, COLUMNS="100", NO_COLOR="1")

    def run(r: Ran) -> None:
        start = time.monotonic()
        done = subprocess.run(
            r.argv, capture_output=True, text=True, env=env, timeout=300, check=False
        )
        r.code, r.stdout, r.stderr = done.returncode, done.stdout, done.stderr
        r.seconds = time.monotonic() - start

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(run, runs.values()))
    elapsed = time.monotonic() - started
    report = os.environ.get("FRTRACE_MATRIX")
    if report:
        _write_matrix(Path(report), runs, elapsed)
    return runs


def _first_line(r: Ran) -> str:
    for text in (r.stdout, r.stderr):
        for line in text.splitlines():
            if line.strip():
                return line.strip()[:110]
    return ""


def _write_matrix(path: Path, runs: dict[str, Ran], elapsed: float) -> None:
    lines = [
        f"{len(runs)} command lines in {elapsed:.1f} s wall ({os.cpu_count()} CPUs)",
        "",
        "| command | input | exit | first line printed |",
        "|---|---|---|---|",
    ]
    for r in runs.values():
        first = _first_line(r).replace("|", "\\|")
        lines.append(f"| `{r.case.command}` | {r.case.input or '-'} | {r.code} | `{first}` |")
    path.write_text("\n".join(lines) + "\n")


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self.seen.add(tag)


@pytest.mark.parametrize("case_id", [_case_id(c) for c in CASES])
def test_command(matrix: dict[str, Ran], case_id: str) -> None:
    """Documented exit code, no traceback, one-line messages, valid files."""
    r = matrix[case_id]
    case = r.case
    shown = f"{' '.join(r.argv[1:])}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-2000:]}"
    assert r.code in DOCUMENTED_EXITS, shown
    assert r.code == case.exit, shown
    assert "Traceback" not in r.stdout + r.stderr, shown
    assert "╭" not in r.stderr and "Usage:" not in r.stderr, shown  # no usage box
    for line in r.stderr.splitlines():
        assert line.startswith(("error: ", "warning: ", "frtrace: ")), shown
    if case.exit == 2:
        assert r.stderr.startswith("error: ") and r.stdout == "", shown
    if case.command.endswith("--help"):
        assert "Example:" in r.stdout, shown
    if case.stdout_json:
        _validate_json(json.loads(r.stdout), schema=case.command == "schema")
    if case.writes == "json":
        _validate_json(json.loads((r.out / "r.json").read_text()))
    elif case.writes == "html":
        parser = _Html()
        parser.feed((r.out / "report.html").read_text())
        parser.close()
        assert {"html", "svg", "table"} <= parser.seen
        assert r.stdout.splitlines()[-1].startswith("report written to")
    elif case.writes == "parquet":
        _check_parquet(r)
    elif case.writes == "expect":
        assert "verdict" in json.loads((r.out / "e.json").read_text())


def _validate_json(value: object, *, schema: bool = False) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from frtrace.report.json_schema import report_schema

    if schema:
        jsonschema.Draft202012Validator.check_schema(value)
        assert value == report_schema()
        return
    jsonschema.Draft202012Validator(report_schema()).validate(value)


def _check_parquet(r: Ran) -> None:
    import pyarrow.parquet as pq

    tables = r.out / "tables"
    counts = {p.stem: pq.read_metadata(p).num_rows for p in sorted(tables.glob("*.parquet"))}
    assert set(counts) == {"entries", "stacks", "groups", "pg_status", "files"}
    printed = {}
    for line in r.stdout.splitlines():
        path, _, rows = line.partition("  (")
        printed[Path(path).stem] = int(rows.split()[0])
    assert printed == counts
    files = pq.read_table(tables / "files.parquet")
    loaded = sum(files.column("entry_count").fill_null(0).to_pylist())
    assert loaded == counts["entries"]


def test_matrix_covers_every_documented_command() -> None:
    """Each command the README lists runs in the matrix, with --help."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    commands = {c.args[0] for c in CASES if c.args}
    for command in ("analyze", "show", "check", "summary", "export", "env", "schema"):
        assert command in commands and f"frtrace {command}" in readme, command


def test_matrix_covers_every_fixture_kind() -> None:
    """Real Gloo pickle and JSON, every NCCL format, damaged, empty, archives, several sets."""
    names = set(INPUTS)
    assert {f"nccl/host_stall/{f}" for f in NCCL_FORMATS} <= names
    assert len(NCCL_FORMATS) == 8
    assert {"gloo/never_joins", "gloo_json/mesh_stall", "damaged", "empty", "incidents"} <= names
    assert {"archive.tgz", "archive.zip", "fr211"} <= names


def test_the_analysis_path_never_imports_torch() -> None:
    """`frtrace analyze` on an archive loads no torch (and no rich): the CLI starts fast."""
    code = (
        "import sys\n"
        "from frtrace.cli import run\n"
        f"sys.argv = ['frtrace', 'analyze', {str(GLOO / 'never_joins')!r}, '-f', 'json']\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'rich'))\n"
        "sys.stderr.write(repr(bad))\nsys.exit(3 if bad else 0)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
