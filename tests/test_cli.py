"""The CLI contract: exit codes, every option, and one-line errors (never a traceback)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from frtrace.cli import app
from tests.conftest import FIXTURES, GLOO, GLOO_JSON

HANG = GLOO / "never_joins"  # rank 2 never joins; ranks 0, 1, 3 wait
HEALTHY = GLOO / "healthy"
STRAGGLER = GLOO / "late_rank"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_one_line_error(result: Result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.fixture
def partial(tmp_path: Path) -> Path:
    """A healthy NCCL job (states show every op completed) with rank 7's dump removed."""
    for src in sorted((FIXTURES / "nccl" / "healthy" / "2.10-pickle").iterdir())[:7]:
        shutil.copy(src, tmp_path / src.name)
    return tmp_path


def test_a_gloo_job_that_stopped_with_a_dump_missing_cannot_be_called_healthy(
    tmp_path: Path,
) -> None:
    """Gloo retires a failed op like a finished one: when every rank with a dump stopped in
    the same op and one rank has none, the dumps cannot tell a death there from a finished
    job that lost a dump. Not healthy: cannot tell, with the rank without a dump as suspect."""
    for src in sorted(HEALTHY.iterdir())[:3]:
        shutil.copy(src, tmp_path / src.name)
    data = json.loads(run("analyze", "-d", tmp_path, "-f", "json", "--allow-partial").stdout)
    assert data["verdict"] == "cannot_tell"
    assert data["culprit_ranks"] == [] and data["suspected_ranks"] == [3]


# ---- exit codes ---------------------------------------------------------------------------


def test_healthy_job_exits_0() -> None:
    """No problem: exit 0 and the headline says HEALTHY."""
    result = run("analyze", "-d", HEALTHY)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("HEALTHY: no problem found in 4 ranks")


def test_stragglers_alone_exit_0() -> None:
    """Stragglers are a warning: exit 0, and the straggler is named."""
    result = run("analyze", "-d", STRAGGLER)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("HEALTHY, WITH STRAGGLERS: rank 3")


def test_hang_exits_1_and_leads_with_the_culprit() -> None:
    """A hang: exit 1; the first line names the culprit and how many ranks wait on it."""
    result = run("analyze", "-d", HANG)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "HANG: culprit rank 2; 3 ranks wait on it"
    assert lines[1].startswith("  1. rank 2 never joined all_reduce #")
    assert "py-spy dump --pid" in result.stdout  # stuck in host code: look at its Python stack


def test_missing_directory_is_a_one_line_error(tmp_path: Path) -> None:
    """A directory that does not exist: exit 2, one line naming it."""
    assert_one_line_error(run("analyze", "-d", tmp_path / "nope"), "nope", "no such directory")


def test_empty_directory_is_a_one_line_error(tmp_path: Path) -> None:
    """An empty directory: exit 2, and the message says how to make dumps."""
    assert_one_line_error(run("analyze", "-d", tmp_path), "no Flight Recorder dumps found")


def test_directory_of_unreadable_files_is_a_one_line_error(tmp_path: Path) -> None:
    """Only damaged files: exit 2, one line naming the first."""
    (tmp_path / "rank_0").write_text("garbage")
    (tmp_path / "rank_1").write_bytes(b"\x80\x02}q\x00.")
    assert_one_line_error(run("analyze", "-d", tmp_path), "none of the 2 dump files", "rank_0")


@pytest.mark.parametrize("command", ["analyze", "show", "check", "summary"])
def test_every_command_reports_a_missing_directory_in_one_line(
    tmp_path: Path, command: str
) -> None:
    """Every command that reads dumps fails the same way on a missing directory."""
    extra = ["--expect-healthy"] if command == "check" else []
    assert_one_line_error(run(command, "-d", tmp_path / "nope", *extra), "no such directory")


def test_bad_format_is_a_usage_error_without_traceback() -> None:
    """An unknown --format exits 2 with click's usage message."""
    result = run("analyze", "-d", HANG, "--format", "xml")
    assert result.exit_code == 2
    assert "Traceback" not in result.output and "xml" in result.stderr


# ---- --allow-partial ----------------------------------------------------------------------


def test_missing_dumps_exit_1_without_allow_partial(partial: Path) -> None:
    """A healthy set missing rank 7: analysed and reported, but exit 1, with advice."""
    result = run("analyze", "-d", partial)
    assert result.exit_code == 1
    assert "no dump: 7" in result.stdout
    assert "no readable dump for 1 of 8 ranks (7)" in result.stderr
    assert "--allow-partial" in result.stderr


def test_allow_partial_makes_the_exit_code_the_analysis_alone(partial: Path) -> None:
    """With --allow-partial the same set exits 0 and stderr has no partial warning."""
    result = run("analyze", "-d", partial, "--allow-partial")
    assert result.exit_code == 0, result.output
    assert "no readable dump" not in result.stderr


def test_allow_partial_does_not_hide_a_problem() -> None:
    """A hang stays exit 1 with --allow-partial."""
    assert run("analyze", "-d", HANG, "--allow-partial").exit_code == 1


# ---- formats, output, quiet ---------------------------------------------------------------


def test_json_format_is_versioned_and_names_the_culprit() -> None:
    """--format json: one object with schema_version, verdict and culprit_ranks."""
    result = run("analyze", "-d", HANG, "--format", "json")
    data = json.loads(result.stdout)
    assert data["schema_version"] == "1.5"
    assert data["verdict"] == "hang" and data["culprit_ranks"] == [2]
    assert data["findings"][0]["code"] == "FR001"


def test_markdown_format_has_a_heading_and_tables() -> None:
    """--format markdown: the headline as a heading, evidence as a GitHub table."""
    result = run("analyze", "-d", HANG, "-f", "markdown")
    assert result.stdout.startswith("# HANG: culprit rank 2")
    assert "|--" in result.stdout


def test_html_output_file(tmp_path: Path) -> None:
    """--format html -o FILE writes the page; stdout has the headline and where it went."""
    out = tmp_path / "report.html"
    result = run("analyze", "-d", HANG, "--format", "html", "--output", out)
    assert result.exit_code == 1
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert result.stdout.splitlines() == [
        "HANG: culprit rank 2; 3 ranks wait on it",
        f"report written to {out}",
    ]


def test_output_to_an_unwritable_path_is_a_one_line_error(tmp_path: Path) -> None:
    """--output into a missing directory: exit 2, one line."""
    result = run("analyze", "-d", HANG, "-o", tmp_path / "no" / "such" / "r.txt")
    assert_one_line_error(result, "cannot write the report")


def test_quiet_prints_only_the_headline(partial: Path) -> None:
    """--quiet: one line on stdout, nothing on stderr, same exit code."""
    result = run("analyze", "-d", partial, "--quiet")
    assert result.exit_code == 1
    assert result.stdout == "HEALTHY: no problem found in 7 ranks\n"
    assert result.stderr == ""


# ---- --pg and --ranks ---------------------------------------------------------------------


def test_pg_filter_keeps_the_verdict_and_shows_only_that_group() -> None:
    """--pg names a group: findings of other groups are hidden; verdict and exit code stay."""
    whole = json.loads(run("analyze", "-d", GLOO / "mesh_stall", "-f", "json").stdout)
    groups = {f["group"]["name"] for f in whole["findings"] if f["group"]}
    assert len(groups) >= 2
    name = sorted(groups)[0]
    result = run("analyze", "-d", GLOO / "mesh_stall", "-f", "json", "--pg", name)
    data = json.loads(result.stdout)
    assert result.exit_code == 1
    assert data["culprit_ranks"] == whole["culprit_ranks"]
    assert data["selection"] == {"pg": name, "ranks": None}
    assert {f["group"]["name"] for f in data["findings"]} == {name}
    assert [g["name"] for g in data["groups"]] == [name]


def test_pg_filter_accepts_a_description() -> None:
    """--pg default_pg matches the default group by its description."""
    result = run("analyze", "-d", HANG, "--pg", "default_pg")
    assert result.exit_code == 1
    assert "showing:" in result.stdout and "process group default_pg" in result.stdout


def test_unknown_pg_is_a_one_line_error() -> None:
    """--pg that names no group: exit 2 and the known groups listed."""
    assert_one_line_error(run("analyze", "-d", HANG, "--pg", "tp9"), "'tp9'", "default_pg")


def test_ranks_filter_hides_findings_about_other_ranks() -> None:
    """--ranks keeps findings whose culprit or waiting ranks meet the selection."""
    shown = json.loads(run("analyze", "-d", HANG, "-f", "json", "--ranks", "0-1").stdout)
    assert shown["findings"] and shown["selection"]["ranks"] == [0, 1]
    hidden = json.loads(
        run("analyze", "-d", GLOO / "mesh_stall", "-f", "json", "--ranks", "9").stdout
    )
    assert hidden["findings"] == [] and hidden["culprit_ranks"] == [5]


@pytest.mark.parametrize("bad", ["x", "4-2", "1,,a"])
def test_bad_ranks_is_a_one_line_error(bad: str) -> None:
    """--ranks that is not a rank list: exit 2 naming the option."""
    assert_one_line_error(run("analyze", "-d", HANG, "--ranks", bad), "--ranks")


def test_jobs_option_gives_the_same_report() -> None:
    """--jobs changes how files are loaded, not the report."""
    assert run("analyze", "-d", HANG, "-j", "1").stdout == run("analyze", "-d", HANG).stdout


def test_json_dumps_give_the_same_verdict() -> None:
    """The JSON dumps of a scenario give the same headline as its pickles."""
    a = run("analyze", "-d", GLOO_JSON / "never_joins", "-q").stdout
    assert a == run("analyze", "-d", HANG, "-q").stdout


# ---- show ---------------------------------------------------------------------------------


def test_show_aligns_by_seq_and_says_who_did_not_reach_it() -> None:
    """show: one column per rank; the rank that never joined says 'not reached'."""
    result = run("show", "-d", HANG, "-n", "2")
    assert result.exit_code == 0, result.output
    assert "rank 0" in result.stdout and "rank 3" in result.stdout
    assert "- not reached (newest #" in result.stdout


def test_show_filters_by_group_ranks_and_seq_with_stacks() -> None:
    """show --pg --ranks --seq --stacks: only those rows and columns, with call sites."""
    result = run(
        "show",
        "-d",
        GLOO / "wrong_collective",
        "--pg",
        "0",
        "--ranks",
        "0-1",
        "--seq",
        "12",
        "--stacks",
    )
    assert result.exit_code == 0, result.output
    assert "rank 2" not in result.stdout
    assert "broadcast" in result.stdout and "all_reduce" in result.stdout
    assert "stacks (innermost first):" in result.stdout and "#12 rank 1:" in result.stdout


def test_show_unknown_pg_is_a_one_line_error() -> None:
    """show --pg that names no group: exit 2."""
    assert_one_line_error(run("show", "-d", HANG, "--pg", "nope"), "'nope'")


# ---- check --------------------------------------------------------------------------------


def test_check_passes_with_matching_flags() -> None:
    """--expect-culprits and --expect-verdict that match: exit 0, one line."""
    result = run("check", "-d", HANG, "--expect-culprits", "2", "--expect-verdict", "hang")
    assert result.exit_code == 0, result.output
    assert result.stdout == "check passed: verdict hang, culprit ranks 2\n"


def test_check_fails_with_a_diff() -> None:
    """A wrong expectation: exit 1 and each difference on its own line."""
    result = run("check", "-d", HANG, "--expect-culprits", "3", "--expect-healthy")
    assert result.exit_code == 1
    assert result.stdout.startswith("check failed: 2 differences\n")
    assert "  culprit_ranks: expected 3, got 2" in result.stdout
    assert "  healthy: expected healthy, got hang (culprits 2)" in result.stdout


def test_check_expect_healthy_passes_on_healthy_dumps() -> None:
    """--expect-healthy on a healthy set: exit 0; stragglers also count as healthy."""
    assert run("check", "-d", HEALTHY, "--expect-healthy").exit_code == 0
    assert (
        run("check", "-d", STRAGGLER, "--expect-healthy", "--expect-stragglers", "3").exit_code == 0
    )


def test_check_write_then_check_round_trips(tmp_path: Path) -> None:
    """--write records the analysis; checking against it passes."""
    expect = tmp_path / "expect.json"
    result = run("check", "-d", GLOO / "mesh_stall", "--expect", expect, "--write")
    assert result.exit_code == 0 and expect.exists()
    assert json.loads(expect.read_text())["culprit_ranks"] == [5]
    assert run("check", "-d", GLOO / "mesh_stall", "--expect", expect).exit_code == 0
    assert run("check", "-d", HANG, "--expect", expect).exit_code == 1


def test_check_without_expectation_is_a_one_line_error() -> None:
    """check with nothing to check: exit 2, naming the options."""
    assert_one_line_error(run("check", "-d", HANG), "--expect")


def test_check_bad_expectation_file_is_a_one_line_error(tmp_path: Path) -> None:
    """Invalid JSON or an unknown key: exit 2 with the file and what is wrong."""
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert_one_line_error(run("check", "-d", HANG, "--expect", bad), "not valid JSON")
    bad.write_text('{"culprits": [2]}')
    assert_one_line_error(run("check", "-d", HANG, "--expect", bad), "unknown key(s) culprits")
    assert_one_line_error(
        run("check", "-d", HANG, "--expect", tmp_path / "none.json"), "no such expectation file"
    )


def test_check_write_needs_a_file() -> None:
    """--write without --expect: exit 2."""
    assert_one_line_error(run("check", "-d", HANG, "--write"), "--write needs --expect")


# ---- env, summary, help -------------------------------------------------------------------


def test_env_prints_exports_for_every_torch_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """env with no torch here and no --torch: old and new names, each with a reason above it."""
    monkeypatch.setattr("frtrace.job.env.installed_torch", lambda: None)
    result = run("env", "--dir", "/shared/fr")
    assert result.exit_code == 0
    out = result.stdout
    assert "# no torch here and no --torch: every name" in out
    assert "export TORCH_NCCL_TRACE_BUFFER_SIZE=20000" in out
    assert "export TORCH_FR_BUFFER_SIZE=20000" in out
    assert "export TORCH_FR_DUMP_TEMP_FILE=/shared/fr/comm_lib_trace_rank_" in out
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("export "):
            assert lines[i - 1].startswith("# torch 2."), line


def test_env_for_an_old_torch_leaves_out_newer_names() -> None:
    """env --torch 2.4: only the variables torch 2.4 reads; --format env gives KEY=VALUE."""
    out = run("env", "--torch", "2.4", "--format", "env", "--buffer-size", "5000").stdout
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE=5000" in out
    assert "TORCH_FR_BUFFER_SIZE" not in out and "export" not in out


def test_env_bad_torch_version_is_a_one_line_error() -> None:
    """--torch that is not a version: exit 2."""
    assert_one_line_error(run("env", "--torch", "latest"), "--torch")


def test_summary_lists_every_rank() -> None:
    """summary: one row per file."""
    result = run("summary", "-d", HANG)
    assert result.exit_code == 0
    assert "4 of 4 ranks loaded" in result.stdout


def test_summary_says_the_format_version_as_written() -> None:
    """A dump of format "2.10" is "2.10" in the table, not the number 2.1."""
    result = run("summary", "-d", FIXTURES / "nccl" / "healthy" / "2.10-pickle")
    assert result.exit_code == 0
    versions = {line.split()[2] for line in result.stdout.splitlines() if " pickle " in line}
    assert versions == {"2.10"}


@pytest.mark.parametrize("command", ["analyze", "show", "check", "env", "summary", "export"])
def test_every_command_has_help_with_an_example(command: str) -> None:
    """Each command's --help exits 0 and shows an example."""
    result = run(command, "--help")
    assert result.exit_code == 0
    assert "Example:" in result.stdout


def test_every_command_is_in_the_readme() -> None:
    """The README mentions each command."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for command in ("analyze", "show", "check", "env", "summary", "export"):
        assert f"frtrace {command}" in readme, command


def test_show_groups_ranks_that_did_the_same_thing(tmp_path: Path) -> None:
    """With more ranks than fit side by side, ranks with equal entries share one row."""
    from tests.conftest import make_dump, make_entry, write_pickle

    world = 12
    for rank in range(world):
        steps = 2 if rank == 7 else 3  # rank 7 never reaches seq 3
        entries = [
            make_entry(record_id=i, collective_seq_id=i + 1, op_id=i + 1) for i in range(steps)
        ]
        write_pickle(tmp_path / f"nccl_trace_rank_{rank}", make_dump(entries, world=world))
    result = run("show", "-d", tmp_path, "--seq", "3")
    assert result.exit_code == 0, result.output
    rows = [line.split(None, 2) for line in result.stdout.splitlines() if "all_reduce" in line]
    assert rows == [["3", "0-6,8-11", "all_reduce [4] Float compl,ret"]]
    assert ["7", "- not reached (newest #2)"] in [
        line.split(None, 1) for line in result.stdout.splitlines()
    ]


def test_env_output_can_be_evaluated_by_bash(tmp_path: Path) -> None:
    """eval "$(frtrace env --dir DIR)" creates DIR and exports the variables."""
    import subprocess
    import sys

    target = tmp_path / "fr dumps"
    script = (
        f"eval \"$({sys.executable} -m frtrace env --dir '{target}')\" && "
        'echo "$TORCH_FR_BUFFER_SIZE|$TORCH_FR_DUMP_TEMP_FILE"'
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"20000|{target}/comm_lib_trace_rank_"
    assert target.is_dir()


# ---------------------------------------------------------------------------------------------
# Unexpected errors: one line and where to report it, never a traceback (FRTRACE_DEBUG=1 shows it)

_INJECT = """
import frtrace.report.json_schema as m

def _boom():
    raise RuntimeError("injected\\\\nfailure")

m.schema_text = _boom
"""


def _assert_unexpected(code: int, stderr: str, kind: str) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: unexpected {kind}: ")
    assert "report it" in lines[0] and "FRTRACE_DEBUG=1" in lines[0]


def test_an_unexpected_error_is_one_line_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import frtrace.report.json_schema as json_schema

    def boom() -> str:
        raise RuntimeError("injected\nfailure")

    monkeypatch.setattr(json_schema, "schema_text", boom)
    result = run("schema")
    _assert_unexpected(result.exit_code, result.stderr, "RuntimeError")
    assert "injected failure" in result.stderr
    monkeypatch.setenv("FRTRACE_DEBUG", "1")
    result = run("schema")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and result.stderr.strip().endswith("injected failure")


def _script(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    from tests.test_commands import frtrace_script

    environ = {k: v for k, v in os.environ.items() if k != "FRTRACE_DEBUG"}
    environ |= {"XDG_CACHE_HOME": str(tmp_path / "cache"), **env}
    return subprocess.run(
        [frtrace_script(), *args], env=environ, capture_output=True, check=False, timeout=120
    )


def test_an_unexpected_error_is_one_line_through_the_console_script(tmp_path: Path) -> None:
    """A library call made to fail (sitecustomize), as a user runs frtrace; the traceback
    only with FRTRACE_DEBUG=1."""
    (tmp_path / "sitecustomize.py").write_text(_INJECT)
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = _script(["schema"], tmp_path, PYTHONPATH=path)
    _assert_unexpected(proc.returncode, proc.stderr.decode(), "RuntimeError")
    proc = _script(["schema"], tmp_path, PYTHONPATH=path, FRTRACE_DEBUG="1")
    assert proc.returncode == 2 and b"Traceback" in proc.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_output_is_one_line(tmp_path: Path) -> None:
    """`frtrace schema > /dev/full`: one line (no second error when stdout is flushed)."""
    from tests.test_commands import frtrace_script

    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [frtrace_script(), "schema"], stdout=full, stderr=subprocess.PIPE, check=False
        )
    _assert_unexpected(proc.returncode, proc.stderr.decode(), "OSError")
    assert "No space left" in proc.stderr.decode()


def test_a_file_name_that_is_not_utf8_prints_under_a_strict_utf8_stdout(tmp_path: Path) -> None:
    """A non-UTF-8 name next to the dumps is shown as an escape, never an encoding crash."""
    dumps = tmp_path / "dumps"
    shutil.copytree(HANG, dumps)
    os.close(os.open(os.path.join(os.fsencode(dumps), b"bad\xffname.log"), os.O_CREAT, 0o600))
    for command in ("analyze", "show", "summary"):
        proc = _script([command, str(dumps)], tmp_path, PYTHONIOENCODING="utf-8:strict")
        assert b"Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode in (0, 1), proc.stderr
    assert b"bad\\udcffname.log" in proc.stdout  # (summary lists the files skipped)


def test_summary_names_the_stacks_and_logs_analyze_reads_not_as_skipped() -> None:
    """One discovery: a file analyze reads (py-spy text, a torchrun log) is not 'skipped'."""
    result = run("summary", "-d", str(FIXTURES / "gloo_evidence" / "pp_1f1b_skip__timer"))
    assert result.exit_code == 0, result.output
    assert "read as Python stacks by analyze, not as dumps: 4 file(s) (pyspy_rank_0.txt" in (
        result.output
    )
    assert "read as logs and error files by analyze" in result.output
    assert "skipped" not in result.output
