"""The flags of a launched server, shared by run_inference.py and score_teacher.py (argparse only: cheap to
import)."""

from __future__ import annotations

import argparse
from pathlib import Path

from synthgen.config import default_of


def launch_flags(g: argparse._ActionsContainer, launch_help: str, keep_for: str) -> None:
    """--launch-server and its companions (synthgen.launch.supervisor reads them), for every script that
    starts a server."""
    g.add_argument("--launch-server", metavar="CMD|demo", help=launch_help)
    g.add_argument("--keep-server", action="store_true", help=f"leave the launched server running {keep_for}".strip())
    g.add_argument("--server-log", type=Path, metavar="FILE", help="its output (default: <output-dir>/server.log)")
    g.add_argument(
        "--server-start-timeout",
        type=float,
        default=default_of("server_start_timeout"),
        metavar="S",
        help="its start-up limit (default: %(default).0f)",
    )
    g.add_argument(
        "--server-restarts",
        type=int,
        default=default_of("server_restarts"),
        metavar="N",
        help="restarts if it dies (default: %(default)s)",
    )
