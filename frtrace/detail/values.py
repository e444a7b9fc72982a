"""The values a finding is made of: a process group, what a rank called, where a rank's
Python stack says it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CulpritStack",
    "CulpritWhere",
    "GroupRef",
    "OpSignature",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRef:
    """A process group: its name, description and global member ranks."""

    name: str
    desc: str | None
    members: tuple[int, ...]  # global ranks, in group-rank order
    inferred: bool  # membership reconstructed from entries, not read from pg_config

    @property
    def label(self) -> str:
        """Human name: the description when it says more than the number."""
        if self.desc and self.desc not in ("undefined", ""):
            return f"{self.desc} (pg {self.name})"
        return f"pg {self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpSignature:
    """What one rank (or the majority) called at a (group, seq)."""

    op: str
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str | None = None
    stack: tuple[str, ...] = ()  # formatted frames, innermost first


@dataclass(frozen=True, slots=True, kw_only=True)
class CulpritWhere:
    """Where a culprit's Python stack says it is: the innermost frame of the user's code on
    its main thread, and the library call it is in (from a collected stack file);
    ``report.words_where`` says it ("in host code at load_batch (data.py:88), in Event.wait
    (threading.py:629)")."""

    rank: int
    place: str  # "host code" or "collective": is the library call a torch.distributed one
    function: str | None  # the user's frame; None when every frame is library code
    file: str | None  # its file, short (base name for the user's own files)
    line: int | None
    library_call: str | None  # "all_reduce (torch/distributed/distributed_c10d.py:3252)"
    thread: str  # "main thread", or which thread was read and why
    source: str  # "recorder", "py-spy-text", "py-spy-json", "dump_traceback", "faulthandler"
    file_name: str  # the stack file's base name (never an absolute path)
    taken_at_ns: int | None = None  # when the sample was taken, if the file says
    trigger: str | None = None  # what made the rank write it ("signal: SIGUSR1"), if known
    # Where no frame is the user's: the innermost Python frame, if any; whether the thread
    # read had any frames at all ("frames"), none ("empty_thread") or none was found
    innermost: str | None = None
    sampled: Literal["frames", "empty_thread", "no_thread"] = "frames"
    off_main: bool = False  # the thread read is known not to be the main one (``thread`` says)


@dataclass(frozen=True, slots=True, kw_only=True)
class CulpritStack:
    """A culprit's Python stack joined to a finding (``analysis.stackjoin``)."""

    where: CulpritWhere
    frames: tuple[str, ...]  # its innermost Python frames, at most a few, innermost first
    more_frames: int  # Python frames past those
