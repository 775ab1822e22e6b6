#!/usr/bin/env python3
"""What the commits of a SQLite database wrote into its WAL, by B-tree.

Usage: scripts/wal-frames.py DATABASE WAL

DATABASE and WAL are copies of a database file and of its `-wal` file, taken while a server
writes (copy the WAL first: its current run of frames is what this reads). Each frame of the
WAL's current run (the frames whose salts match the WAL header's) is counted by the B-tree its
page belongs to, as SQLite's `dbstat` table names it in the database the two copies make
together (opened from a temporary directory; the copies are left as they are), and printed
per commit (a frame with a database size in its header ends a commit). Used for "References
by the millisecond" in docs/PERFORMANCE.md. Needs a Python whose SQLite has `dbstat` (Debian's
has).
"""
import collections
import os
import shutil
import sqlite3
import struct
import sys
import tempfile

WAL_HEADER = 32
FRAME_HEADER = 24


def frames(wal):
    """(page number, database size after the commit or 0) of each frame of the current run."""
    try:
        with open(wal, "rb") as f:
            data = f.read()
    except OSError as error:
        sys.exit(f"{wal}: {error.strerror}")
    if len(data) < WAL_HEADER:
        sys.exit(f"{wal}: shorter than a WAL header")
    magic, _version, page_size, _seq, salt1, salt2 = struct.unpack(">IIIIII", data[:24])
    if magic not in (0x377F0682, 0x377F0683):
        sys.exit(f"{wal}: not a SQLite WAL (magic {magic:#x})")
    found = []
    offset = WAL_HEADER
    while offset + FRAME_HEADER + page_size <= len(data):
        page, size, s1, s2 = struct.unpack(">IIII", data[offset:offset + 16])
        if (s1, s2) != (salt1, salt2):
            break
        found.append((page, size))
        offset += FRAME_HEADER + page_size
    return found


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2])
    database, wal = sys.argv[1:]
    run = frames(wal)
    commits = sum(1 for _, size in run if size)
    if not commits:
        sys.exit(f"{wal}: no commit in the WAL's current run (copy it while the server writes)")
    with tempfile.TemporaryDirectory() as scratch:
        copy = os.path.join(scratch, "db")
        try:
            shutil.copyfile(database, copy)
            shutil.copyfile(wal, copy + "-wal")
        except OSError as error:
            sys.exit(f"{error.filename}: {error.strerror}")
        conn = sqlite3.connect(copy)
        try:
            names = dict(conn.execute("SELECT pageno, name FROM dbstat"))
        finally:
            conn.close()
    by_tree = collections.Counter(names.get(page, "(page not in the database)") for page, _ in run)
    print(f"frames {len(run)}, commits {commits}, frames a commit {len(run) / commits:.1f}")
    print("frames a commit  B-tree")
    for name, count in by_tree.most_common():
        print(f"{count / commits:16.2f}  {name}")


if __name__ == "__main__":
    main()
