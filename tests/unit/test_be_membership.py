"""BE membership (planner.be_membership) against real listening sockets: a BE whose port
stops answering leaves the routings after the configured failed probes and comes back at
its first answered probe; with none left a plan would route nowhere, which is an error."""

from __future__ import annotations

import socket

import pytest
from support.waits import free_port

from starscan.core.errors import NoLiveBackend
from starscan.planner.be_membership import BeMembership


def _listener(port: int | None = None) -> socket.socket:
    """A listener on ``port``, or on a port no other socket is handed (B's is bound again
    after it was closed)."""
    port = free_port() if port is None else port
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_a_be_that_stops_answering_leaves_and_comes_back():
    a, b = _listener(), _listener()
    ea, eb = (f"127.0.0.1:{s.getsockname()[1]}" for s in (a, b))
    members = BeMembership([ea, eb], interval_s=0.5, failures=2)
    members.probe_once()
    assert members.live() == (ea, eb)
    routings = {members.routings_of(t)[0] for t in range(10)}
    assert routings == {ea, eb}  # each BE is the first routing of some tablets
    assert all(sorted(members.routings_of(t)) == sorted([ea, eb]) for t in range(10))
    port_b = b.getsockname()[1]
    b.close()
    members.probe_once()
    assert members.live() == (ea, eb)  # one failed probe is not enough
    members.probe_once()
    assert members.live() == (ea,)
    assert members.routings_of(7) == [ea]
    b = _listener(port_b)
    members.probe_once()
    assert members.live() == (ea, eb)
    a.close()
    b.close()
    members.probe_once()
    members.probe_once()
    with pytest.raises(NoLiveBackend) as refused:
        members.routings_of(1)
    assert refused.value.http_status == 503 and ea in refused.value.message
