"""Checking and unpacking code snapshots (.tar.gz of user code) without trusting them.

Standard library only: the portal uses it to refuse a bad upload, and the agent (which has no
database) uses it again before unpacking, because a file on disk may not be the file that was
checked. A member is refused if its path is absolute, has a '..' component, or it is anything
but a regular file or a directory (symlinks, hard links and devices could point outside the
destination), and the whole archive is refused past a member count or an unpacked size.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

MAX_UNPACKED_BYTES = 200 * 1024 * 1024
MAX_MEMBERS = 10_000


class SnapshotError(ValueError):
    """The archive is not a safe code snapshot; the message says which member and why."""


@dataclass(frozen=True)
class SnapshotSummary:
    files: int
    directories: int
    unpacked_bytes: int


def _member_problem(member: tarfile.TarInfo) -> str | None:
    name = member.name
    if not name or "\x00" in name:
        return "has an empty or invalid name"
    path = PurePosixPath(name)
    if name.startswith(("/", "\\")) or path.is_absolute() or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    if ".." in path.parts or ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "has a '..' path component"
    if member.issym():
        return "is a symbolic link"
    if member.islnk():
        return "is a hard link"
    if member.isdev() or member.isfifo():
        return "is a device or pipe"
    if not (member.isfile() or member.isdir()):
        return "is not a regular file or directory"
    return None


def snapshot_check(
    fileobj: IO[bytes],
    *,
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
    max_members: int = MAX_MEMBERS,
) -> SnapshotSummary:
    """Reads the whole archive and raises SnapshotError at the first unsafe member."""
    files = directories = total = 0
    try:
        with tarfile.open(fileobj=fileobj, mode="r:gz") as tar:
            for count, member in enumerate(tar, start=1):
                if count > max_members:
                    raise SnapshotError(f"archive has more than {max_members} members")
                problem = _member_problem(member)
                if problem:
                    raise SnapshotError(f"member {member.name!r} {problem}; refused")
                if member.isdir():
                    directories += 1
                    continue
                files += 1
                total += member.size
                if total > max_unpacked_bytes:
                    raise SnapshotError(
                        f"unpacked size exceeds the limit of {max_unpacked_bytes} bytes"
                    )
    except (tarfile.TarError, EOFError, OSError) as err:
        raise SnapshotError(f"not a readable .tar.gz archive: {err}") from err
    if files == 0:
        raise SnapshotError("archive contains no files")
    return SnapshotSummary(files=files, directories=directories, unpacked_bytes=total)


def snapshot_unpack(
    archive: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
    expected_sha256: str | None = None,
) -> SnapshotSummary:
    """Checks, then unpacks regular files and directories only into ``dest`` (created)."""
    archive_path = Path(archive)
    if expected_sha256 is not None:
        digest = hashlib.sha256()
        with archive_path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != expected_sha256:
            raise SnapshotError(
                f"archive sha256 {digest.hexdigest()} does not match {expected_sha256}"
            )
    with archive_path.open("rb") as fh:
        summary = snapshot_check(fh, max_unpacked_bytes=max_unpacked_bytes)
    root = Path(dest).resolve()
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive_path, mode="r:gz") as tar:
        for member in tar:
            # Checked again while writing: the check above read the same bytes, but this loop is
            # what touches the disk, so it must not depend on the earlier pass alone.
            problem = _member_problem(member)
            if problem:
                raise SnapshotError(f"member {member.name!r} {problem}; refused")
            target = (root / member.name).resolve()
            if target != root and root not in target.parents:
                raise SnapshotError(
                    f"member {member.name!r} resolves outside the destination; refused"
                )
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            if source is None:
                raise SnapshotError(f"member {member.name!r} cannot be read")
            with source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)
            # Keep the owner's execute bit (scripts) but never setuid/setgid or group/other write.
            os.chmod(target, 0o755 if member.mode & 0o100 else 0o644)
    return summary
