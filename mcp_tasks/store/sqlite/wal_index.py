"""`WalIndex`: the transaction counter of a SQLite database in WAL mode, read without SQL.

SQLite keeps a wal-index header at the start of the database's `-shm` file, shared by every process that
has the database open (https://www.sqlite.org/walformat.html, "The WAL-Index Header"). Its `iChange` field
is incremented by one on each committed write transaction, by any connection of any process, and written
(with the rest of the header) before the writer releases the write lock. `SqliteTaskStore` compares it with
the count it expects from its own commits to know, on each read, whether another process wrote since (its
read cache is then not served: see `store.py`).

Read with `pread` on SQLite's own descriptor of the `-shm` file (found in `/proc/self/fd`): this module never
opens or closes a descriptor of that file, because closing any descriptor of a file drops every POSIX lock
the process holds on it, SQLite's included. Where that descriptor cannot be found (no `/proc`, no WAL),
`find` answers `None` and the store reads authoritatively every time. A header read while a writer updates it
(the two copies differ, or the checksum does not match) answers `None`: the caller reads the database.

Used by `SqliteTaskStore` only; it never writes, never blocks (one `pread` from the page cache).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Final

_HEADER_BYTES: Final = 48
"""One copy of `WalIndexHdr`; the file starts with two copies (the reader compares them)."""
_WORDS: Final = struct.Struct("=12I")
"""The header as native 32-bit words: iVersion, unused, iChange, (isInit, bigEndCksum, szPage), mxFrame,
nPage, aFrameCksum[2], aSalt[2], aCksum[2]."""
_MASK: Final = 0xFFFFFFFF


class WalIndex:
    """The `-shm` header of one open database, read through SQLite's own descriptor.

    Args:
        fd: SQLite's descriptor of the database's `-shm` file (never closed here).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def find(cls, database: Path) -> WalIndex | None:
        """The header of `database`, which this process has open in WAL mode; `None` if it cannot be read.

        Call after a read or write on a connection of this store (SQLite opens the `-shm` file lazily).
        """
        shm = f"{os.path.realpath(database)}-shm"
        try:
            entries = os.listdir("/proc/self/fd")
        except OSError:
            return None
        for entry in entries:
            try:
                if os.readlink(f"/proc/self/fd/{entry}") == shm:
                    found = cls(int(entry))
                    return found if found.changes() is not None else None
            except OSError:
                continue
        return None

    def changes(self) -> int | None:
        """`iChange`: committed write transactions (modulo 2**32), or `None` if no consistent header was read."""
        try:
            raw = os.pread(self._fd, 2 * _HEADER_BYTES, 0)
        except OSError:
            return None
        first, second = raw[:_HEADER_BYTES], raw[_HEADER_BYTES:]
        if len(raw) < 2 * _HEADER_BYTES or first != second:
            return None  # a writer is between the two copies: SQLite's own readers retry, the caller reads
        words = _WORDS.unpack(first)
        if first[12] == 0:  # isInit
            return None
        if _checksum(words[:10]) != (words[10], words[11]):
            return None
        return int(words[2])


def _checksum(words: tuple[int, ...]) -> tuple[int, int]:
    """SQLite's `walChecksumBytes` in native byte order over the first 40 bytes of the header."""
    s1 = s2 = 0
    for index in range(0, len(words), 2):
        s1 = (s1 + words[index] + s2) & _MASK
        s2 = (s2 + words[index + 1] + s1) & _MASK
    return s1, s2
