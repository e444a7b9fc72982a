"""What happens to a case's folder between the job and the corpus, each step documented:

* ``ray_layout``: a Ray Train session's files, named by each worker's pid (the jobs' lines are
  real; Ray is not installed, so the harness lays them out as Ray does);
* ``neutral``: the machine's paths made neutral in every file (``NEUTRAL``): the dumps are
  unpickled and pickled again (protocol 2) with the paths replaced, text files rewritten; every
  file keeps its modification time; the watch's ``frtrace-report.html`` is dropped (size);
* ``as_copies`` / ``as_upload``: the folder gathered twice, or uploaded with every file gzipped
  on its own (``scripts/make_compressed_fixture.py``);
* ``clock_shim``: the preloaded library that puts the second host's clock ahead.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path.insert(0, str(REPO_ROOT / "scripts"))
from make_compressed_fixture import write as gzip_each  # noqa: E402

SESSION = "session_2026-01-05_09-00-00_000000_4242"
COPY = "gathered-twice"


def neutral_paths(work: Path) -> list[tuple[str, str]]:
    """(machine path, neutral path), longest first."""
    stdlib = sysconfig.get_paths()["stdlib"]
    pairs = [
        (str(work), "/shared/job"),
        (str(HERE), "/workspace"),
        (str(REPO_ROOT), "/opt/frtrace"),
        (stdlib, "/usr/lib/python3.11"),
        (sys.executable, "/usr/bin/python3"),
        (sys.prefix, "/usr"),
        (str(Path.home()), "/home/user"),
    ]
    return sorted(pairs, key=lambda p: -len(p[0]))


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}: not a plain dump")


def _mapped(value: Any, pairs: list[tuple[str, str]], seen: dict[int, Any]) -> Any:
    """``value`` with the paths replaced; an object shared in the dump stays shared (torch's
    pickler writes a frame recorded by many entries once)."""
    if id(value) in seen:
        return seen[id(value)]
    if isinstance(value, str):
        out: Any = value
        for old, new in pairs:
            out = out.replace(old, new)
    elif isinstance(value, dict):
        out = {_mapped(k, pairs, seen): _mapped(v, pairs, seen) for k, v in value.items()}
    elif isinstance(value, list):
        out = [_mapped(v, pairs, seen) for v in value]
    elif isinstance(value, tuple):
        out = tuple(_mapped(v, pairs, seen) for v in value)
    else:
        return value
    seen[id(value)] = out
    return out


def _neutral_bytes(data: bytes, pairs: list[tuple[str, str]]) -> bytes:
    if data[:1] == b"\x80":
        try:
            doc = _Plain(io.BytesIO(data)).load()
        except Exception:  # (not a pickle after all: as bytes)
            doc = None
        if doc is not None:
            return pickle.dumps(_mapped(doc, pairs, {}), protocol=2)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return data
    for old, new in pairs:
        text = text.replace(old, new)
    return text.encode()


def neutral(folder: Path, work: Path) -> None:
    pairs = neutral_paths(work)
    for logs in sorted(folder.rglob("logs")):  # torchrun's `--log-dir logs/<rdzv id>_<random>`
        made = sorted(p for p in logs.glob("hangbench_*") if p.is_dir())
        for n, run in enumerate(made):
            name = "hangbench" if n == 0 else f"hangbench-{n + 1}"
            pairs.insert(0, (run.name, name))
            run.rename(run.with_name(name))
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.name == "frtrace-report.html":
            path.unlink()
            continue
        info = path.stat()
        data = path.read_bytes()
        new = _neutral_bytes(data, pairs)
        if new != data:
            path.write_bytes(new)
            os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    manifest_sizes(folder)


def manifest_sizes(folder: Path) -> None:
    """Each ``frtrace collect`` manifest's ``size_bytes`` set to its dump's size once the
    paths in it were made neutral (as if the job had run under them: the analysis checks it
    against the file, and sets aside the dump time of a dump that changed since)."""
    for manifest in sorted(folder.rglob("frtrace-collect.json")):
        info = manifest.stat()
        doc = json.loads(manifest.read_text())
        changed = False
        for rank in doc.get("ranks") or []:
            dump = manifest.parent / str(rank.get("dump") or "")
            if rank.get("dump") and dump.is_file() and rank.get("size_bytes") is not None:
                size = dump.stat().st_size
                changed |= rank["size_bytes"] != size
                rank["size_bytes"] = size
        if changed:
            manifest.write_text(json.dumps(doc, indent=1) + "\n")
            os.utime(manifest, ns=(info.st_atime_ns, info.st_mtime_ns))


def as_copies(folder: Path) -> None:
    """The dumps and stack files gathered a second time, byte for byte, beside the first."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.name.startswith(("comm_lib_trace_rank_", "stacks_rank_", "pyspy_rank_")):
            target = folder / COPY / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def as_upload(folder: Path) -> None:
    """Every file gzipped on its own under job/attempt/node prefixes, times kept."""
    staged = folder.with_name(folder.name + ".src")
    folder.rename(staged)
    gzip_each(staged, folder)
    for path in sorted(p for p in staged.rglob("*") if p.is_file()):
        gz = next(folder.glob(f"*/*/*/{path.relative_to(staged)}.gz"))
        info = path.stat()
        os.utime(gz, ns=(info.st_atime_ns, info.st_mtime_ns))
    shutil.rmtree(staged)


def ray_layout(folder: Path, scratch: Path, world: int) -> None:
    """Ray Train's files: ``session_*/logs/worker-<id>-<job>-<pid>.out|.err`` and the driver's
    output, its lines prefixed ``(RayTrainWorker pid=<pid>)`` after its table of workers."""
    logs = folder / SESSION / "logs"
    logs.mkdir(parents=True)
    driver = [f"(TrainController pid=4242) Started training worker group of size {world}: "]
    lines: list[str] = []
    for rank in range(world):
        pid = (scratch / f"pid_{rank}").read_text().strip()
        worker = f"{0x5EED00 + rank:06x}" * 4
        for std in ("out", "err"):
            src = scratch / "ray" / f"worker_{rank}.{std}"
            text = src.read_text(errors="replace") if src.exists() else ""
            dst = logs / f"worker-{worker}-01000000-{pid}.{std}"
            dst.write_text(f":job_id:01000000\n:actor_name:RayTrainWorker\n{text}")
            lines += [f"(RayTrainWorker pid={pid}) {line}" for line in text.splitlines()]
        driver.append(
            f"(TrainController pid=4242) - (ip=127.0.0.1, pid={pid}) world_rank={rank}, "
            f"local_rank={rank}, node_rank=0"
        )
    (folder / "driver.log").write_text("\n".join(driver + lines) + "\n")


SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
static long long offset(void) {
    static int done; static long long off;
    if (!done) { const char *s = getenv("HB_CLOCK_OFFSET_S"); off = s ? atoll(s) : 0; done = 1; }
    return off;
}
int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int r = real(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += offset();
    return r;
}
int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
    return 0;
}
time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
"""


def clock_shim(work: Path) -> Path:
    """``work/clockshift.so``: CLOCK_REALTIME ``$HB_CLOCK_OFFSET_S`` seconds ahead."""
    out = work / "clockshift.so"
    if not out.exists():
        src = work / "clockshift.c"
        src.write_text(SHIM)
        cmd = ["gcc", "-shared", "-fPIC", "-O2", "-o", str(out), str(src), "-ldl"]
        subprocess.run(cmd, check=True)
    return out


def mtimes(folder: Path) -> dict[str, float]:
    """Each file's modification time as the job left it (git keeps none; the scorer puts
    them back)."""
    return {
        p.relative_to(folder).as_posix(): p.stat().st_mtime
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
