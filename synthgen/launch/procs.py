"""Processes as Linux's /proc shows them: process groups, who a process is, who listens on a port.

    live_members(pgid)          pids of a group that still run (zombies do not count)
    kill_group(pgid, grace)     SIGTERM, then SIGKILL after `grace`; returns the survivors
    start_ticks(pid), process_uid(pid), cmdline_hash(pid), environ_value(pid, name), boot_id()
                                what tells one process from a later one with its pid, and from another's
    port_taken(host, port), port_listeners(port)   the port: does something accept, and which pids listen

Everything here reads /proc (Linux); on another system the answers are None/empty, never an error.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from synthgen.errors import ServerError
from synthgen.redact import redact

KILL_WAIT = 10.0  # after SIGKILL only a process stuck in the kernel survives this long
TCP_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


class ServerLaunchError(ServerError):
    """The launched server exited, never became ready, crashed too often, or would not die."""


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces): state ppid pgrp ..."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def live_members(pgid: int) -> list[int]:
    """Pids of the process group's members that are not zombies: a zombie has stopped running,
    and in a container it may wait forever for a reaper, so it must not count as alive."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry.name)
        if fields and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def kill_group(pgid: int, grace: float, reap: Callable[[], object] = lambda: None) -> list[int]:
    """SIGTERM the group, SIGKILL whatever is left after `grace` seconds; returns the members
    still alive after that (empty: the group is gone). `reap` is called while waiting so that a
    leader which is our own child does not linger as a zombie."""
    if pgid in (0, 1, os.getpgrp()):
        raise ServerLaunchError(f"refusing to kill process group {pgid}")
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, KILL_WAIT)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return []
        except PermissionError as exc:
            raise ServerLaunchError(f"not allowed to signal process group {pgid} (another user's)") from exc
        deadline = time.monotonic() + wait
        while True:
            reap()
            if not live_members(pgid):
                return []
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    return live_members(pgid)


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (/proc/<pid>/stat field 22); None if gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def boot_id() -> str:
    """This boot's id: start ticks and pids mean nothing across a reboot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_uid(pid: int) -> int | None:
    """The user the process runs as (the owner of /proc/<pid>); None when it is gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def cmdline_hash(pid: int) -> str | None:
    """sha256 of the process's command line as the kernel has it; None when it is gone or unreadable.

    A child read just after Popen returned may still be inside exec (its close-on-exec pipe is closed
    before the new program's arguments are in place): its command line reads empty for a moment, so an
    empty one is read again, a bounded number of times (a zombie's stays empty)."""
    for _ in range(200):
        try:
            data = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        if data:
            break
        time.sleep(0.005)
    return hashlib.sha256(data).hexdigest()


class Unreadable(Exception):
    """/proc/<pid>/environ cannot be read (another user's process)."""


def environ_value(pid: int, name: str) -> str | None:
    """The value of `name` in the environment the process started with; None when it has none.
    Raises Unreadable when the environment cannot be read."""
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError as exc:
        raise Unreadable(str(exc)) from exc
    prefix = name.encode() + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("utf-8", errors="replace")
    return None


def port_taken(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is HEX_IP:HEX_PORT; st the state; the inode is field 9.
            if len(fields) > 9 and fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _holds(pid: int | str, sockets: set[str]) -> bool:
    try:
        return any(os.readlink(fd) in sockets for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def port_listeners(port: int, among: list[int] | None = None) -> list[int] | None:
    """Pids (of `among`, else of every process whose files we may read) listening on TCP `port`;
    None when nothing on this machine listens there (or /proc does not say)."""
    sockets = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not sockets:
        return None
    pids = among if among is not None else [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]
    return [pid for pid in pids if _holds(pid, sockets)]


def serving_on(module: str, port: int) -> list[int]:
    """Pids (of this user) whose command runs `module` (`-m sglang.launch_server`) with `--port PORT`:
    a server on that port that may still be loading, before it binds it."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        args = [a.decode("utf-8", errors="replace") for a in argv]
        pairs = set(zip(args, args[1:], strict=False))
        if module in args and (("--port", str(port)) in pairs or f"--port={port}" in args):
            found.append(int(entry.name))
    return found


def describe_process(pid: int, chars: int = 80) -> str:
    """'pid 123: python -m sglang.launch_server ...' (the command cut to `chars`), for a message."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return f"pid {pid}"
    command = redact(" ".join(part.decode("utf-8", errors="replace") for part in argv))
    return f"pid {pid}: {command if len(command) <= chars else command[: chars - 3] + '...'}"
