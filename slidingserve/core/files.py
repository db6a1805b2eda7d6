"""Files written whole or not at all."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


@contextmanager
def atomic_write(path: str | Path) -> Iterator[TextIO]:
    """A text stream (UTF-8) whose contents replace the file `path` when the block ends.

    They go to a temporary file in the same folder, flushed to disk, then renamed over `path`
    (`os.replace`, atomic): whatever happens meanwhile, `path` holds either its old contents or
    all the new ones. On an error the temporary file is removed and the error raised again;
    a killed process may leave a `.NAME.*.tmp` beside, never a part of NAME.
    """
    target = Path(path)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        stream = temp.open("x", encoding="utf-8", newline="")
    except OSError as error:  # named after the file asked for, not the temporary one
        raise OSError(error.errno, error.strerror, os.fspath(target)) from None
    try:
        with stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, target)
    except BaseException:  # any failure, an interrupt too: no temporary file left behind
        temp.unlink(missing_ok=True)
        raise
