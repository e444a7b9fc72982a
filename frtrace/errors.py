"""Every failure frtrace reports to a user is one of these.

FrtraceError
├── InputError              the path given cannot be analysed at all (exit code 2)
│   ├── DumpDirNotFound     the directory does not exist or is not a directory
│   ├── UnreadableArchive   the archive given is damaged, or not an archive
│   ├── NoDumpsFound        nothing in the directory looks like a per-rank dump
│   ├── NoReadableDumps     dumps were found but none of them could be read
│   ├── DuplicateRank       two files claim the same rank
│   │   └── SeveralDumpSets the directory holds several incidents' dumps of the same ranks
│   ├── NoSuchAttempt       --attempt N: the folder holds nothing of that attempt
│   ├── SchedulerUnavailable  --scheduler: dask is not installed or the scheduler is unreachable
│   ├── UnknownGroup        --pg names no process group of the job
│   └── ExpectationError    `frtrace check`'s expectation file or flags cannot be understood
├── DumpFormatError         one file is not a Flight Recorder dump we can read; the other
│   │                       files are still analysed (recorded as a problem, never raised
│   │                       past the loader)
│   ├── UnsafePickleError   the pickle asks to import or call something: refused unread
│   ├── DumpTooLargeError   the file is larger than any real dump, refused before reading,
│   │                       or reading it needs more memory than any real dump does
│   └── ReaderFailedError   the worker reading the file crashed or ran past its time limit
├── StackFileError          one collected stack file (py-spy, faulthandler, sidecar) cannot
│                           be read; the dumps and the other stack files are still analysed
├── UnsafePathError         ``frtrace collect`` will not use a path a rank's environment
│   │                       names (a link, another user's file, a directory others can
│   │                       write); that one way of collecting is skipped, and said why
│   └── UnsafeDirectory     the recorder's registry folder is not the user's own (0700):
│                           the job side refuses it, one line naming it
├── OutputError             a report or export cannot be written where the user asked
├── CollectError            ``frtrace collect`` cannot start (a bad --store, no rank found)
├── SeveralJobs             ``frtrace collect`` found the ranks of more than one job on this
│                           host: it collects none and names each job and how to pick one
└── WorkFilesLost           a file frtrace wrote while loading (a worker's columns) was
                            removed or cut short under it: run again (exit code 2)

Messages are one line: where, what is wrong, what to do next.
"""

from __future__ import annotations


class FrtraceError(Exception):
    """Base class of every error frtrace shows to a user."""


class InputError(FrtraceError):
    """The input as a whole cannot be analysed (exit code 2)."""


class DumpDirNotFound(InputError):
    """The dump directory does not exist or is not a directory."""


class UnreadableArchive(InputError):
    """The archive given as the dump set cannot be read (damaged, or not an archive)."""


class NoDumpsFound(InputError):
    """No file under the directory looks like a per-rank Flight Recorder dump."""


class NoReadableDumps(InputError):
    """Every candidate dump file failed to load."""


class DuplicateRank(InputError):
    """Two files claim the same rank, so the set is ambiguous."""


class SeveralDumpSets(DuplicateRank):
    """Ranks appear once per incident (subfolders, prefixes): one set must be chosen."""


class NoSuchAttempt(InputError):
    """--attempt N names an attempt (of a restarted job) the folder holds nothing of."""


class SchedulerUnavailable(InputError):
    """--scheduler was given, but dask.distributed is missing or the scheduler cannot be reached."""


class DumpFormatError(FrtraceError):
    """One file is not a Flight Recorder dump frtrace can read."""


class UnsafePickleError(DumpFormatError):
    """The pickle references a global (a class or function): it could run code."""


class DumpTooLargeError(DumpFormatError):
    """The file is larger than the loader accepts, or decoding it needs too much memory."""


class ReaderFailedError(DumpFormatError):
    """The worker process reading the file died or ran past its time limit."""


class UnsafePathError(FrtraceError):
    """A file, link or directory frtrace will not read, write or trust (see SECURITY.md)."""


class OutputError(FrtraceError):
    """What frtrace was asked to write (``-o``) cannot be written there (exit code 2)."""


class CollectError(FrtraceError):
    """``collect`` cannot start: no store answers, no registry, torch missing (exit code 2)."""


class SeveralJobs(FrtraceError):
    """The rank processes on this host belong to more than one job (exit code 2)."""


class WorkFilesLost(FrtraceError):
    """A file frtrace wrote while loading, in its own working directory, was removed or cut
    short before it was read back (a cleaner of the cache directory): exit code 2."""


class UnknownGroup(InputError):
    """``--pg`` names no process group of the job."""


class ExpectationError(InputError):
    """The expectation file or flags cannot be understood (exit code 2)."""


class UnsafeDirectory(UnsafePathError):
    """The registry directory is not the user's own: ``str()`` is one line naming it."""


_STACK_HINT = (
    "expected py-spy dump text or --json, faulthandler/dump_traceback output, or an "
    "frtrace-stacks sidecar; collect it again or leave this file out"
)


class StackFileError(FrtraceError, ValueError):
    """A stack file that cannot be read: one line naming the file, the problem, what next."""

    def __init__(self, path: str, problem: str, hint: str = _STACK_HINT) -> None:
        self.path = path
        self.problem = " ".join(problem.split())
        super().__init__(f"{path}: {self.problem}; {hint}")
