"""Progress on a TTY: a run against the simulator draws a bar that counts finished prompts."""

import io

from synthgen.cli.run import main


def test_a_tty_gets_a_bar_that_counts_finished_prompts(ws, make_sim, monkeypatch):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 6)
    monkeypatch.chdir(ws.root)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = io.StringIO()
    code = main(["--server-url", sim.url, "--max-tokens", "64", "--concurrency", "2"], stream=out, tty=True)
    assert code == 0
    text = out.getvalue()
    assert "\r" in text and "6/6" in text and "prompt" in text and "tok/s" in text
