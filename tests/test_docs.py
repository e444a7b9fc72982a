"""The README and docs/ say what is true of this checkout.

- the README stays a user's first screen, not a manual (under 260 lines);
- every transcript (a `$ command` line in a fenced block, then its output) prints what it shows;
- every option of a `frtrace` command shown in code exists on that command;
- every relative link resolves, anchors included;
- the developers' two commands: the test command is the line `.ci/run` runs;
- the code map in docs/architecture.md and the package tree agree, both ways;
- every file a "how to change" list in docs/architecture.md names exists.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import typer

from frtrace.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
# Ours: written with this checkout's frtrace (torchfrtrace.md documents another tool).
PAGES = [README, *(p for p in DOCS if p.name != "torchfrtrace.md")]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FRTRACE_CALL = re.compile(r"\bfrtrace ([a-z]+)([^|&;>)#\"'`\n]*)")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _blocks(path: Path) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(path.read_text())]


def transcripts(path: Path) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown under it) of every `$ ` line of a plain fenced block."""
    found: list[tuple[str, list[str]]] = []
    for lang, body in _blocks(path):
        if lang:
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                found.append((line[2:], []))
            elif found and body.startswith("$ "):
                found[-1][1].append(line)
    return found


def test_the_readme_is_a_first_screen_not_a_manual() -> None:
    assert len(README.read_text().splitlines()) < 260


def test_the_readme_leads_with_what_a_user_needs() -> None:
    """What it does, install, record, collect, analyze, the CI gate; developers last."""
    heads = [h for h in README.read_text().splitlines() if h.startswith("## ")]
    order = ["Install", "record", "collect", "Analyze", "CI gate", "Developers"]
    at = [next(i for i, h in enumerate(heads) if word in h) for word in order]
    assert at == sorted(at), heads
    assert heads[-1] == "## Developers"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_transcripts_print_what_they_show(page: Path) -> None:
    """Run from the repository root, each `$ ` command prints exactly the lines shown."""
    shown = transcripts(page)
    procs = [
        subprocess.Popen(
            ["bash", "-c", command],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command, _ in shown
    ]
    for (command, lines), proc in zip(shown, procs, strict=True):
        out, err = proc.communicate(timeout=120)
        assert out.splitlines() == lines, f"{_rel(page)}: $ {command}\n{err}"
        assert "Traceback" not in err and "error:" not in err, (command, err)


def test_the_readme_shows_real_output() -> None:
    commands = [c for c, _ in transcripts(README)]
    assert any(c.startswith("frtrace analyze tests/fixtures/") for c in commands), commands
    assert any(c.startswith("frtrace env ") for c in commands), commands


def _code(page: Path) -> list[str]:
    """Every code line of a page: fenced blocks and inline spans."""
    text = page.read_text()
    lines = [line for _, body in _blocks(page) for line in body.splitlines()]
    return lines + SPAN.findall(FENCE.sub("", text))


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_option_shown_exists(page: Path) -> None:
    """`frtrace CMD --flag` in code: CMD is a command and --flag one of its options."""
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    checked = 0
    for line in _code(page):
        for name, args in FRTRACE_CALL.findall(line):
            assert name in root.commands, f"{_rel(page)}: {line}"
            options = {o for p in root.commands[name].params for o in (*p.opts, *p.secondary_opts)}
            options |= {"-h", "--help"}
            for token in args.split():
                if token.startswith("-") and token != "-":
                    flag = token.split("=")[0]
                    assert flag in options, f"{_rel(page)}: {flag} in {line!r}"
            checked += 1
    if page == README:
        assert checked >= 10


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


@pytest.mark.parametrize("page", [*PAGES, ROOT / "SECURITY.md"], ids=_rel)
def test_every_relative_link_resolves(page: Path) -> None:
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{_rel(page)}: {target}"
        if anchor:
            heads = [h.lstrip("#").strip() for h in FENCE.sub("", file.read_text()).splitlines()
                     if h.startswith("#")]  # fmt: skip
            assert anchor in {_slug(h) for h in heads}, f"{_rel(page)}: {target}"


def _developer_commands() -> list[str]:
    text = README.read_text()
    section = text[text.index("\n## Developers\n") :]
    body = next(body for lang, body in FENCE.findall(section) if lang == "bash")
    return [line for line in body.splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_has_two_developer_commands() -> None:
    """One installs and runs the main job on a fixture; one runs every check."""
    main, tests = _developer_commands()
    assert main.startswith("pip install ") and " && frtrace analyze tests/fixtures/" in main
    assert (ROOT / main.rsplit(" ", 1)[1]).is_dir(), main
    assert tests.endswith("scripts/check")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    runs = [line for line in ci if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert runs == [_developer_commands()[1]]


def _code_map() -> tuple[set[str], set[str]]:
    """The files and folders the map of docs/architecture.md lists, relative to frtrace/."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## Map of the code") :].split("\n## ", 1)[0]
    files: set[str] = set()
    folders: set[str] = set()
    for row in table.splitlines():
        if not row.startswith("| ") or row.startswith(("| **", "| where", "|---")):
            continue  # (a stage's header row, bold, lists nothing)
        folder = ""
        for name in SPAN.findall(row.split(" | ")[0]):
            if "/" in name:
                folder = name[: name.rindex("/") + 1]
            else:
                name = folder + name
            (folders if name.endswith("/") else files).add(name)
    return files, folders


def _tree() -> set[str]:
    package = ROOT / "frtrace"
    return {
        p.relative_to(package).as_posix()
        for p in package.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and (p.suffix in (".py", ".c", ".h", ".pyi", ".json") or p.name == "py.typed")
        and not (p.name == "__init__.py" and p.parent != package)  # (each stage's docstring)
    }


def test_the_code_map_lists_every_file_of_the_package() -> None:
    files, folders = _code_map()
    unlisted = {f for f in _tree() - files if not any(f.startswith(d) for d in folders)}
    assert not unlisted, f"docs/architecture.md's map lacks {sorted(unlisted)}"


def test_the_code_map_lists_nothing_the_package_lacks() -> None:
    files, folders = _code_map()
    package = ROOT / "frtrace"
    missing = sorted(f for f in files if not (package / f).is_file())
    missing += sorted(d for d in folders if not (package / d).is_dir())
    assert not missing, f"docs/architecture.md's map lists {missing}, not in frtrace/"
    assert len(files) > 100 and folders


@pytest.mark.parametrize(
    "section", ["### Adding a rule", "### Reading a new kind of evidence file"]
)
def test_every_file_a_change_touches_exists(section: str) -> None:
    """The lists of files a change touches name files and folders of this checkout (a name
    with ``<...>`` in it is the one the change makes)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    body = text.split(section, 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    named = [s for s in SPAN.findall(body) if "/" in s and "<" not in s and " " not in s]
    assert len(named) >= 6
    missing = [s for s in named if not (ROOT / s).exists()]
    assert not missing


def test_the_readme_installs_what_exists_before_a_release() -> None:
    """A newcomer's first install command works today: from a checkout, or the wheels
    scripts/build_wheels.sh makes; `pip install frtrace` is said for once it is published."""
    text = README.read_text()
    section = text[text.index("\n## Install\n") : text.index("\n## 1. ")]
    body = next(body for lang, body in FENCE.findall(section) if lang == "bash")
    first = next(line for line in body.splitlines() if line.startswith("pip install"))
    assert first.split("#")[0].split() == ["pip", "install", "."], first
    assert (ROOT / "pyproject.toml").exists()
    assert "scripts/build_wheels.sh" in section and (ROOT / "scripts/build_wheels.sh").exists()
    assert "Once frtrace is on PyPI: `pip install frtrace`" in section


def test_the_readme_and_the_notice_say_one_slowdown_without_the_c_reader() -> None:
    """The stderr notice and the README give the same measured number, and link to it."""
    from frtrace.load.read import native

    assert native.SLOWDOWN in native.notice("FRTRACE_PURE_PYTHON is set")
    sentence = f"with the same results, {native.SLOWDOWN} slower ([measured]"
    assert sentence in " ".join(README.read_text().split())
    perf = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    assert "### Without the C reader" in perf
    assert f"End to end it is {native.SLOWDOWN} slower" in perf
