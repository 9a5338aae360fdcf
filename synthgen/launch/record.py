"""What a run launched (<output-dir>/launched_server.json), so that a rerun recognises its own server.

A rerun may stop the server an earlier run of the folder left (killed, or --keep-server). The record is
a file anyone who can write the folder can plant, so it is trusted only when the process it names is
the very one this tool launched, on every count:

    boot        /proc/sys/kernel/random/boot_id then and now (pids and start times restart at boot)
    start       /proc/<pid>/stat start time (a reused pid has another)
    user        the process runs as this user (another user's process is refused in one line)
    command     sha256 of /proc/<pid>/cmdline (taken again once the server answered, after any exec)
    token       a random value the launcher put in the server's environment (SYNTHGEN_LAUNCH_TOKEN),
                read back from /proc/<pid>/environ: a process this tool did not start has none

    write_record(path, pid, token, command, name)   after a start, and again once the server is ready
    check_record(record) -> None | Refusal          None: it is ours to signal
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from synthgen.launch.procs import (
    Unreadable,
    boot_id,
    cmdline_hash,
    environ_value,
    live_members,
    process_uid,
    start_ticks,
)
from synthgen.launch.serverlog import stamp

TOKEN_ENV = "SYNTHGEN_LAUNCH_TOKEN"


@dataclass(frozen=True, slots=True)
class LaunchRecord:
    pid: int  # also the process group id
    start_ticks: int  # /proc/<pid>/stat starttime
    boot_id: str
    uid: int
    cmdline_sha256: str
    token: str  # in the server's environment as SYNTHGEN_LAUNCH_TOKEN
    command: str  # as shown (credentials masked)
    name: str
    started_at: str
    owner_pid: int = 0  # the run that launched it
    owner_ticks: int = 0

    def alive(self) -> bool:
        """A process with this pid and start time runs in this boot (not necessarily ours: see check_record)."""
        return self.boot_id == boot_id() and start_ticks(self.pid) == self.start_ticks and bool(live_members(self.pid))

    def owner_alive(self) -> bool:
        """The run that launched it still runs (another run's server in use, not a leftover)."""
        return self.owner_pid != os.getpid() and start_ticks(self.owner_pid) == self.owner_ticks


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the process a record names is not to be signalled; `foreign_user`: it is another user's."""

    reason: str
    foreign_user: bool = False


def check_record(record: LaunchRecord) -> Refusal | None:
    """None when the live process the record names is the one this tool launched; else why not."""
    uid = process_uid(record.pid)
    if uid is not None and uid != os.getuid():
        return Refusal(f"it runs as another user (uid {uid})", foreign_user=True)
    if record.uid != os.getuid():
        return Refusal(f"the record is of another user (uid {record.uid})", foreign_user=True)
    if cmdline_hash(record.pid) != record.cmdline_sha256:
        return Refusal("its command line is not the one launched")
    try:
        token = environ_value(record.pid, TOKEN_ENV)
    except Unreadable:
        return None if not record.token else Refusal("its environment cannot be read to check it")
    if not record.token or token != record.token:
        return Refusal("it does not carry the token this tool gives the servers it launches")
    return None


def write_record(path: Path, pid: int, token: str, command: str, name: str) -> None:
    """Record the process (best effort: a folder that cannot be written keeps no record)."""
    ticks, digest = start_ticks(pid), cmdline_hash(pid)
    if ticks is None or digest is None:
        return  # already gone: nothing to recognise
    record = LaunchRecord(
        pid=pid,
        start_ticks=ticks,
        boot_id=boot_id(),
        uid=os.getuid(),
        cmdline_sha256=digest,
        token=token,
        command=command,
        name=name,
        started_at=stamp(),
        owner_pid=os.getpid(),
        owner_ticks=start_ticks(os.getpid()) or 0,
    )
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(asdict(record)) + "\n")
        os.replace(tmp, path)


def read_record(path: Path) -> LaunchRecord | None:
    """The record a run left, or None (none, unreadable, or of an older format: as good as none)."""
    try:
        data = json.loads(path.read_text())
        return LaunchRecord(
            pid=int(data["pid"]),
            start_ticks=int(data["start_ticks"]),
            boot_id=str(data["boot_id"]),
            uid=int(data["uid"]),
            cmdline_sha256=str(data["cmdline_sha256"]),
            token=str(data["token"]),
            command=str(data["command"]),
            name=str(data["name"]),
            started_at=str(data["started_at"]),
            owner_pid=int(data.get("owner_pid", 0)),
            owner_ticks=int(data.get("owner_ticks", 0)),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def remove_record(path: Path, pid: int | None = None) -> None:
    """Remove the record (only the one of `pid` when given: another run's record stays)."""
    record = read_record(path)
    if pid is not None and record is not None and record.pid != pid:
        return
    with contextlib.suppress(OSError):
        path.unlink()
