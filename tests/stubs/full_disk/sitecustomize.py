"""A disk that fills up during a run: on this directory first in PYTHONPATH, every Python process
(mpirun's ranks included) lets the result file's temporary (its name holds `.partial`) be written
COMMBENCH_STUB_FULL_AFTER times; every later attempt creates the file and then fails with ENOSPC,
as a write to a full disk does."""

import builtins
import errno
import os

_real_open = builtins.open
_writes = 0


def _open(file, mode="r", *args, **kwargs):
    global _writes
    if isinstance(file, str) and ".partial" in os.path.basename(file) and "w" in mode:
        _writes += 1
        if _writes > int(os.environ["COMMBENCH_STUB_FULL_AFTER"]):
            _real_open(file, mode, *args, **kwargs).close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), file)
    return _real_open(file, mode, *args, **kwargs)


builtins.open = _open
