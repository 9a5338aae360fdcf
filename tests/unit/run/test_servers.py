"""run/servers.py: which of several servers a request goes to, and what is said about them (pure)."""

from __future__ import annotations

import re

import pytest

from synthgen.config import RunConfig
from synthgen.errors import UsageError
from synthgen.run.servers import Slot, choose, disagreement, probe_delay, status_text, summary_lines

A, B, C = "http://a:1", "http://b:1", "http://c:1"


def slots(*urls: str) -> list[Slot]:
    return [Slot(url) for url in urls]


def test_equal_servers_take_turns():
    servers = slots(A, B, C)
    picked = []
    for _ in range(6):
        index = choose(servers)
        assert index is not None
        servers[index].sent += 1
        picked.append(index)
    assert picked == [0, 1, 2, 0, 1, 2]


@pytest.mark.parametrize(
    ("reported", "in_flight", "at_report", "load"),
    [
        (None, 3, 0, 3),  # no /v1/loads: our own requests in flight
        (10, 2, 2, 10),  # its report counts other clients' requests too
        (10, 5, 2, 13),  # plus what we sent since the report
        (0, 4, 0, 4),  # never below our own in flight
    ],
)
def test_a_servers_load_is_its_last_report_plus_what_was_sent_since(reported, in_flight, at_report, load):
    slot = Slot(A, in_flight=in_flight, reported=reported, in_flight_at_report=at_report)
    assert slot.load() == load


def test_the_least_loaded_server_that_is_in_gets_the_request():
    servers = slots(A, B, C)
    servers[0].report(12)
    servers[1].report(3)
    servers[2].report(0)
    servers[2].take_out(now=0.0)
    assert choose(servers) == 1
    servers[1].in_flight = 10  # sent since the report: now b holds 13
    assert choose(servers) == 0


def test_a_server_failing_at_once_counts_its_failures_in_a_row_as_load_until_it_answers():
    servers = slots(A, B)
    servers[0].report(3)  # a: busy with 3; b: idle, but it ends every request without an answer
    picked = []
    for _ in range(4):
        index = choose(servers)
        assert index is not None
        servers[index].sending()
        if index == 1:
            servers[1].ended(answered=False)
        picked.append(index)
    assert picked == [1, 1, 1, 0]  # b's 3 failures in a row weigh as a's 3 requests; then a's fewer sent win
    assert servers[1].load() == 3
    servers[1].sending()
    servers[1].ended(answered=True)
    assert servers[1].load() == 0  # one answer and it is judged by its load again


def test_a_key_is_pinned_to_one_server_and_moves_only_while_that_server_is_out():
    servers = slots(A, B, C)
    keys = [f"conversation-{i}" for i in range(200)]
    home = {key: choose(servers, key) for key in keys}
    assert set(home.values()) == {0, 1, 2}  # spread over all three
    for slot in servers:  # load has no say for a pinned key
        slot.report(100)
    servers[0].report(0)
    assert {key: choose(servers, key) for key in keys} == home
    servers[1].take_out(now=5.0)
    moved = {key: choose(servers, key) for key in keys}
    assert all(moved[key] == home[key] for key in keys if home[key] != 1)  # others stay where they are
    assert all(moved[key] in (0, 2) for key in keys if home[key] == 1)
    servers[1].bring_back(now=9.0)
    assert {key: choose(servers, key) for key in keys} == home


def test_no_server_in_means_no_choice():
    servers = slots(A, B)
    for slot in servers:
        slot.take_out(now=0.0)
    assert choose(servers) is None and choose(servers, "k") is None


def test_time_out_adds_up_over_outages():
    slot = Slot(A)
    slot.take_out(now=10.0)
    slot.take_out(now=11.0)  # already out: counted once
    assert slot.outs == 1 and slot.out_for(now=14.0) == 4.0
    assert slot.bring_back(now=15.0) == 5.0
    slot.take_out(now=20.0)
    assert slot.out_for(now=22.0) == 7.0 and slot.outs == 2


def test_probes_back_off_up_to_five_seconds():
    assert [probe_delay(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_disagreement_names_the_first_server_that_differs():
    assert disagreement([(A, "m"), (B, "m"), (C, "m")]) is None
    assert disagreement([(A, "m"), (B, "m"), (C, "other")]) == (A, "m", C, "other")
    assert disagreement([]) is None


def test_the_status_line_names_each_servers_requests_and_those_out():
    servers = slots(A, B)
    servers[0].in_flight = 7
    servers[1].take_out(now=3.0)
    assert status_text(servers, now=15.0) == "servers 1/2 in (out: http://b:1 for 12 s); in flight http://a:1 7"
    many = slots(*(f"http://h{i}:1" for i in range(16)))
    for i, slot in enumerate(many):
        slot.in_flight = 30 + i % 5
    assert status_text(many, now=0.0) == "servers 16/16 in; in flight 30-34 per server"


def test_the_summary_has_a_line_per_server_with_its_time_out():
    servers = slots(A, B)
    servers[0].sent = servers[0].answered = 1200
    servers[1].sent, servers[1].answered, servers[1].moved = 900, 880, 20
    servers[1].take_out(now=0.0)
    servers[1].bring_back(now=42.0)
    assert summary_lines(servers, now=50.0) == [
        "by server:",
        "  http://a:1: 1,200 requests sent, 1,200 answered",
        "  http://b:1: 900 requests sent, 880 answered; out 1 time (42 s), 20 requests in flight on it sent again "
        "elsewhere",
    ]


def test_several_urls_keep_the_first_as_server_url_and_one_url_changes_nothing():
    one = RunConfig(server_url=A).validate()
    assert one.server_urls == (A,) and one.display_url == A
    several = RunConfig(server_urls=(A, B)).validate()
    assert several.server_url == A and several.server_urls == (A, B)
    assert several.display_url == f"{A}, {B}"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (RunConfig(server_urls=(A, B), launch_server="demo"), "--launch-server starts one server"),
        (RunConfig(server_urls=(A, A + "/")), "is given twice"),
        (RunConfig(server_urls=(A, "b:1")), "--server-url must start with http:// or https://, got 'b:1'"),
    ],
)
def test_several_urls_are_checked_in_one_line(config, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        config.validate()
