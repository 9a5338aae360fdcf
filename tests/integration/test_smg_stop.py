"""A stop behind smg 1.13, which answers /abort_request 404 (docs/sglang_api.md §11): the run closes the
streams in flight itself (at once on a second signal), keeps the ids they delivered, smg passes the
disconnect on so the worker ends the requests, and the rerun continues them token-exact. Waits are on
files and the simulator's state."""

from __future__ import annotations

import signal

import pytest
from simharness import wait_until
from workspace import Workspace

from synthgen.data.partials import PartialOutputs, merged
from tests.integration import smg

pytestmark = [pytest.mark.router]

# smg drops the request's stream_interval: the worker's own --stream-interval sets the chunks, as the
# run's --checkpoint-tokens does, so the run keeps streaming.
SIM = ("--max-total-tokens", "60000", "--step-time", "0.002", "--output-len-dist", "fixed:120")
COMMON = ("--max-tokens", "400", "--concurrency", "4", "--status-interval", "0.5", "--checkpoint-tokens", "16")


@pytest.fixture
def gateway_bin():
    path, why = smg.ensure_smg()
    if path is None:
        pytest.skip(why)
    return path


def kept(ws: Workspace) -> dict[str, list[int]]:
    return {key: p.output_ids for key, p in merged(PartialOutputs(ws.outputs / "d").load()).items()}


def test_behind_smg_a_stop_closes_the_streams_and_the_rerun_continues_them(ws: Workspace, make_sim, gateway_bin):
    sim = make_sim("chatml", *SIM, "--stream-interval", "16")
    gateway = smg.Gateway(gateway_bin, [sim.url])
    try:
        ids = ws.dataset("short", "d", 6)
        proc = ws.start("--server-url", gateway.url, *COMMON, "--drain-timeout", "600")
        try:
            wait_until(lambda: len(kept(ws)) == 4, timeout=120, what="4 requests checkpointed")
            sim.pause()  # no chunk comes: the first SIGTERM's end-after-the-next-chunk waits
            proc.send_signal(signal.SIGTERM)
            log = ws.root / "nohup.out"
            wait_until(lambda: "server refused /abort_request" in log.read_text(), timeout=120, what="the note")
            proc.send_signal(signal.SIGTERM)  # the second closes the streams at once
            assert proc.wait(timeout=120) == 143
        finally:
            if proc.poll() is None:
                proc.kill()
        wait_until(lambda: sim.stats()["running"] == 0, timeout=60, what="smg passed the disconnects on")
        partials = kept(ws)
        assert len(partials) == 4 and all(16 <= len(p) < 120 for p in partials.values()), partials
        sim.resume()
        rerun = ws.run("--server-url", gateway.url, *COMMON)
        assert rerun.returncode == 0, rerun.stderr
        rows = {r["id"]: r for r in ws.assert_exactly_once("d", ids)}
        for key, partial in partials.items():
            assert rows[key]["segments"] == [len(partial), 120 - len(partial)]
            assert rows[key]["output_ids"][: len(partial)] == partial and len(rows[key]["output_ids"]) == 120
    finally:
        gateway.close()
