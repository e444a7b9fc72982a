"""Where frtrace writes (``collect``'s folders, ``analyze -o FILE``, ``export -o DIR``):
never through a link someone else planted, whoever runs it (root included).

* The path a user names (``DIR``, ``FILE``) is theirs: a link there is followed only when it
  belongs to the user running frtrace or to root (nobody else can make one of those); the
  folders above it are taken as they are.
* Every folder frtrace makes or enters below it is made 0700 when missing and entered with
  ``O_DIRECTORY|O_NOFOLLOW`` relative to the folder above, held open (a descriptor): a link
  at ``DIR/<host>`` or ``DIR/snap1`` is refused, and a folder renamed away after it was
  entered takes frtrace's files with it, never sends them elsewhere.
* A file is written to a new temporary name in the held folder (``O_CREAT|O_EXCL``, 0600
  whatever the umask) and renamed over its final name: a link planted under that name is
  replaced, never followed. This is the one way frtrace writes a file it names itself
  (``write_file``; ``replace_file`` for a path whose folder exists: the job side's dumps and
  sidecars, the watch's report), imported by the job side too (it imports nothing heavy).
* ``analyze -o FILE`` writes in place (the file keeps its mode) once it is known to be a
  regular file of this user's or a device, opened without following a link.
* A folder the job side writes into (the dump folder: the dumps, the sidecars, the watch's
  report) must be this user's own, that group and others cannot write (``own_folder``):
  another user's folder would let them read every dump and replace the report.

A refusal is an :class:`~frtrace.errors.UnsafePathError`, one line that names the path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Protocol, overload

from frtrace.errors import OutputError, UnsafePathError

__all__ = [
    "OutDir",
    "Readable",
    "open_out_dir",
    "open_out_file",
    "own_folder",
    "replace_file",
    "write_file",
    "write_out_file",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


# what a file is written from: bytes, an open descriptor to copy from, a stream to read to its
# end, or a function that writes the file
_Data = bytes | int | Readable | Callable[[BinaryIO], None]


def _link_is_trusted(st: os.stat_result) -> bool:
    """A link nobody else could have planted: this user's or root's."""
    return st.st_uid in (os.geteuid(), 0)


def _refuse_link(path: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode) and not _link_is_trusted(st):
        raise UnsafePathError(
            f"{path} is a symbolic link of uid {st.st_uid}: not followed (give the real path)"
        )


def _enter(folder: OutDir, name: str) -> int:
    """A descriptor of the folder ``name`` in ``folder``, never through a link."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=folder.fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
    try:
        link = stat.S_ISLNK(os.lstat(name, dir_fd=folder.fd).st_mode)
    except OSError:
        link = False
    kind = "a symbolic link" if link else "not a directory"
    raise UnsafePathError(f"{folder.path / name} is {kind}: not entered")


class OutDir:
    """A folder frtrace writes into, held open: ``path`` to say where, ``fd`` to write."""

    __slots__ = ("fd", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    def sub(self, name: str) -> OutDir:
        """``name`` in this folder, made 0700 when missing; a link there is refused."""
        if not name or "/" in name or name in (".", ".."):
            raise UnsafePathError(f"{self.path / name}: not a plain folder name")
        made = True
        try:
            os.mkdir(name, 0o700, dir_fd=self.fd)
        except FileExistsError:
            made = False
        fd = _enter(self, name)
        if made:
            os.fchmod(fd, 0o700)  # exactly, whatever the umask
        return OutDir(self.path / name, fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OutDir:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_out_dir(path: Path, *, private: bool = True) -> OutDir:
    """The folder the user named, made (with its missing parents: 0700 when ``private``,
    else as the umask says) when missing.
    Existing folders above it are taken as they are; the missing ones are made and entered
    one by one without following a link; a link at ``path`` itself is followed only when it
    is this user's or root's."""
    missing: list[str] = []
    probe = Path(os.path.abspath(path))
    while True:
        try:
            st = os.lstat(probe)
        except FileNotFoundError:
            if probe.parent == probe:
                raise
            missing.append(probe.name)
            probe = probe.parent
            continue
        break
    if not missing:
        _refuse_link(probe, st)
    flags = _DIR_FLAGS & ~os.O_NOFOLLOW if stat.S_ISLNK(st.st_mode) else _DIR_FLAGS
    try:
        fd = os.open(probe, flags)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            raise UnsafePathError(f"{probe} is not a directory") from None
        raise
    top = OutDir(probe, fd)
    for name in reversed(missing):
        # (made meanwhile: entered below as any other, never through a link)
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700 if private else 0o777, dir_fd=top.fd)
        try:
            fd = _enter(top, name)
        except BaseException:
            top.close()
            raise
        top.close()
        top = OutDir(top.path / name, fd)
        if private:
            os.fchmod(fd, 0o700)  # exactly, whatever the umask
    return top


def own_folder(path: Path) -> Path:
    """``path`` as a folder for files only this user may read or change (the job's dump
    folder), resolved: made 0700 (its missing parents too) when missing, a link there followed
    only when it is this user's or root's (:func:`open_out_dir`). Raises
    :class:`~frtrace.errors.UnsafePathError`, one line naming it and what to do, when it is not
    this user's own or group or others can write it (anyone who can write there can replace
    what is written; its owner can read it all); OSError when it cannot be made."""
    with open_out_dir(path) as folder:
        st = os.fstat(folder.fd)
    uid = os.geteuid()
    if st.st_uid != uid:
        why = f"belongs to uid {st.st_uid}, not to you (uid {uid}): its owner could read"
    elif st.st_mode & 0o022:
        mode = stat.S_IMODE(st.st_mode)
        why = f"can be written by group or others (mode {mode:04o}): they could plant"
    else:
        return Path(os.path.realpath(path))
    raise UnsafePathError(
        f"{path} {why} and replace your dumps and report; give a folder of your own that "
        "only you can write (or chmod go-w it)"
    )


@overload
def write_file(
    folder: OutDir, name: str, data: _Data, keep: None = None, *, private: bool = True
) -> Path: ...


@overload
def write_file(
    folder: OutDir, name: str, data: _Data, keep: Callable[[], bool], *, private: bool = True
) -> Path | None: ...


def write_file(
    folder: OutDir,
    name: str,
    data: _Data,
    keep: Callable[[], bool] | None = None,
    *,
    private: bool = True,
) -> Path | None:
    """``folder/name``, 0600 (as the umask says when not ``private``): ``data`` (bytes, an
    open descriptor to copy from, a stream to read to its end, or a function that writes the
    file) into a new temporary file of the folder, then renamed over ``name`` (a link there
    is replaced, never followed). ``keep``, asked once the file is whole: False leaves
    nothing (None is returned)."""
    tmp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600 if private else 0o666, dir_fd=folder.fd)
    try:
        if private:
            os.fchmod(fd, 0o600)  # (exactly: a umask of 0o200 would leave it unwritable)
        with os.fdopen(fd, "wb") as dst:
            if isinstance(data, bytes):
                dst.write(data)
            elif isinstance(data, int):
                with os.fdopen(os.dup(data), "rb") as src:
                    shutil.copyfileobj(src, dst, 1024 * 1024)
            elif callable(data):
                data(dst)
            else:
                shutil.copyfileobj(data, dst, 1024 * 1024)
        if keep is not None and not keep():
            os.unlink(tmp, dir_fd=folder.fd)
            return None
        os.replace(tmp, name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder.fd)
        raise
    return folder.path / name


def replace_file(path: Path, data: bytes | str, *, private: bool = True) -> Path:
    """``path`` replaced atomically by ``data`` (text as UTF-8), as :func:`write_file` writes
    it into the folder ``path`` names, which must exist; 0600 where ``private``, else as the
    umask says."""
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    with OutDir(path.parent, fd) as folder:
        body = data.encode() if isinstance(data, str) else data
        return write_file(folder, path.name, body, private=private)


@contextlib.contextmanager
def open_out_file(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened to be written from its start (``analyze -o FILE``): created when
    missing; a link there followed only when it is this user's or root's (``/dev/stdout``);
    an existing regular file only when it is this user's."""
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
    if st is not None and stat.S_ISLNK(st.st_mode):
        _refuse_link(path, st)
    else:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"{path} is a symbolic link: not followed") from None
        raise
    try:
        opened = os.fstat(fd)
        if stat.S_ISREG(opened.st_mode) and opened.st_uid != os.geteuid():
            raise UnsafePathError(
                f"{path} belongs to uid {opened.st_uid}: not overwritten (remove it, or "
                "give another -o)"
            )
        if not (stat.S_ISREG(opened.st_mode) or stat.S_ISCHR(opened.st_mode)):
            raise UnsafePathError(f"{path} is not a regular file: not written")
        os.set_blocking(fd, True)
        if stat.S_ISREG(opened.st_mode):
            os.ftruncate(fd, 0)
        out = os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise
    with out:
        yield out


def write_out_file(path: Path, data: bytes, what: str) -> None:
    """``data`` into ``path`` (:func:`open_out_file`); ``OutputError`` naming ``what`` when
    it cannot be written, ``UnsafePathError`` when it must not be."""
    try:
        with open_out_file(path) as out:
            out.write(data)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write {what} ({exc.strerror or exc})") from None
