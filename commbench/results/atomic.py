"""New files that appear whole or not at all and never replace an existing one.

Each file is written under a temporary name in its own folder, so that the last step is a link on
one file system, and takes its name only once complete: a full disk or a crash leaves no 0-byte or
half-written file behind to block a retry with "already exists". The temporary file is created
before any work, so a folder that takes no new files is refused before anything is computed.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from typing import Iterator, Optional

from ..errors import CommbenchError


def _split(name: str) -> tuple[str, str]:
    base, ext = os.path.splitext(name)
    return (name, "") if len(os.fsencode(ext)) > 16 else (base, ext)  # no format's extension: part of the name


def _temporary_name(folder: str, name: str) -> str:
    """A hidden name in folder for `name` while it is written. The extension stays last: matplotlib
    chooses an image's format from it. As long as it may be (NAME_MAX): the start of `name` is cut
    where the two would not fit, so that any name a file can take can be written."""
    base, ext = _split(name)
    tail = f".{os.getpid()}-{secrets.token_hex(3)}.partial{ext}"
    room = NAME_MAX - 1 - len(os.fsencode(tail))
    # Counted in the file system's bytes (a name may hold bytes that are no UTF-8, which Python keeps as
    # surrogates); a UTF-8 character the cut would halve is left out whole.
    raw = os.fsencode(base)
    cut = raw[:room]
    while cut and len(cut) < len(raw) and raw[len(cut)] & 0xC0 == 0x80:
        cut = cut[:-1]
    return os.path.join(folder, f".{os.fsdecode(cut)}{tail}")


def leftovers(path: str) -> list[str]:
    """The temporary files of `path` that a process killed while it wrote them left behind (their
    names as _temporary_name makes them), for whoever outlives it to remove."""
    folder, name = os.path.split(path)
    base, ext = _split(name)
    head, tail = "." + base[:64], re.compile(r"\.[0-9]+-[0-9a-f]{6}\.partial" + re.escape(ext) + "$")
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if n.startswith(head) and tail.search(n)]


def create_temporary(folder: str, name: str) -> str:
    """Creates an empty temporary file for `name` in folder (an existing folder); returns its path."""
    path = _temporary_name(folder, name)
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    return path


def _claim(tmp: str, path: str, exists_message: str) -> None:
    """Gives tmp the name path unless that name exists: a hard link fails on an existing name where a
    rename would replace it."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise CommbenchError(exists_message) from None


def _make_folder(folder: str, path: str) -> list[str]:
    """Makes folder where missing; returns the folders made, the deepest first, for _unmake."""
    made, missing = [], os.path.abspath(folder)
    while not os.path.exists(missing):
        made.append(missing)
        missing = os.path.dirname(missing)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        _unmake(made)
        raise CommbenchError(f"cannot write {path}: {e.strerror} ({folder})") from None
    return made


def _unmake(made: list[str]) -> None:
    """Removes the folders a failed write made (empty ones alone): a full disk leaves nothing behind."""
    for folder in made:
        with contextlib.suppress(OSError):
            os.rmdir(folder)


@contextlib.contextmanager
def new_file(path: str, exists_message: str) -> Iterator[str]:
    """Yields a temporary path beside `path` for the caller to write; when the block completes, the
    file takes the name `path`, which must not exist (nor be a name no file can take: check_new_file)."""
    check_new_file(path, exists_message)
    folder = os.path.dirname(path) or "."
    made = _make_folder(folder, path)
    tmp, done = None, False
    try:
        tmp = create_temporary(folder, os.path.basename(path))
        yield tmp
        _claim(tmp, path, exists_message)
        done = True
    except OSError as e:
        raise CommbenchError(f"cannot write {path}: {e.strerror}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if not done:
            _unmake(made)


@contextlib.contextmanager
def new_files_in(folder: str, exists_message: str) -> Iterator[str]:
    """Yields a temporary folder for the caller to fill; when the block completes, its files move
    into `folder` (made when missing), none of them replacing a file there."""
    # The temporary folder sits where the files go (or beside a folder yet to be made), so that
    # every link stays on one file system.
    existed = os.path.isdir(folder)
    home = folder if existed else os.path.dirname(os.path.abspath(folder))
    made = _make_folder(home, folder)
    stage, done = None, False
    try:
        stage = _temporary_name(home, os.path.basename(os.path.abspath(folder)))
        os.mkdir(stage)
        yield stage
        os.makedirs(folder, exist_ok=True)
        names = sorted(os.listdir(stage))
        if any(os.path.lexists(os.path.join(folder, n)) for n in names):
            raise CommbenchError(exists_message)
        for n in names:
            _claim(os.path.join(stage, n), os.path.join(folder, n), exists_message)
        done = True
    except OSError as e:
        raise CommbenchError(f"cannot write into {folder}: {e.strerror}") from None
    except CommbenchError as e:
        # The caller's own refusal names the temporary folder, which the user never saw.
        raise CommbenchError(str(e).replace(stage, folder)) from None
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        if not done:
            _unmake(([] if existed else [os.path.abspath(folder)]) + made)


# The longest file name (bytes) of Linux's file systems (NAME_MAX).
NAME_MAX = 255


def check_new_file(path: str, exists_message: str) -> None:
    """Refuses a path that names no file (empty, a folder's), that a file system cannot hold (control
    characters, too long a name), that exists (a device such as /dev/null included) or whose folder
    cannot take a new file."""
    name = os.path.basename(path)
    if not name:
        raise CommbenchError(f"{path!r} names a folder: name a file in it, e.g. {os.path.join(path, 'run.json')}"
                             if path else "an empty file name: name a file, e.g. run.json")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise CommbenchError(f"file name {path!r} holds a control character (a line break?): choose another")
    if len(os.fsencode(name)) > NAME_MAX:
        raise CommbenchError(f"file name {name[:40]}... is {len(os.fsencode(name))} bytes long, more than the "
                             f"{NAME_MAX} a file name may have")
    if os.path.lexists(path):
        raise CommbenchError(exists_message)
    check_folder(os.path.dirname(path) or ".", path)


def one_file_each(named: dict[str, Optional[str]]) -> None:
    """Refuses two options of one command that name the same new file ({flag: path}; None: not given):
    the second write found the first's file there once the run had measured everything."""
    seen: dict[str, str] = {}
    for flag, path in named.items():
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise CommbenchError(f"{seen[key]} and {flag} both name {path}: give each its own file")
        seen[key] = flag


# The least room a new file's file system must have: a result file grows row by row and a plot is
# written once the measuring is done, so a disk that is full already would fail them after it.
MIN_ROOM_BYTES = 1 << 20


def check_folder(folder: str, path: str, room: int = MIN_ROOM_BYTES) -> None:
    """The nearest existing folder on the way to `folder` must take a new file, on a file system with
    `room` bytes free. A probe file is created there and removed, because permission bits tell
    nothing for root, nor for read-only and virtual file systems (/proc, /sys)."""
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(os.path.abspath(existing))
    if not os.path.isdir(existing):
        raise CommbenchError(f"cannot write {path}: {existing} is not a folder")
    try:
        probe = create_temporary(existing, "probe")
    except OSError as e:
        raise CommbenchError(f"cannot write {path}: {existing} takes no new files ({e.strerror})") from None
    with contextlib.suppress(OSError):
        os.unlink(probe)
    fs = os.statvfs(existing)
    free = fs.f_bavail * fs.f_frsize
    if fs.f_blocks and free < room:  # a file system that tells no size (some FUSE ones) is not judged
        raise CommbenchError(f"cannot write {path}: {free >> 10} KiB free, less than the {_size(room)} it may take: "
                             f"free some room or choose another place")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
