"""A node's ports: one that is in use stops `starscan serve` at once, with an error that
names the port, the setting that chose it and the process holding it (gRPC's own message for
the Flight ports names none of them)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from starscan.app.ports import holder_of

pytestmark = pytest.mark.slow  # starts `starscan serve` processes of its own


def _held() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_the_holder_of_a_listening_port_is_named_by_pid_and_command():
    with _held() as sock:
        held = holder_of(sock.getsockname()[1])
    assert held is not None and held.startswith(f"pid {os.getpid()} (") and "python" in held.lower(), held


@pytest.mark.parametrize("setting", ["be_flight_port", "be_port", "be_http_port"])
def test_a_be_whose_port_is_in_use_stops_at_once_naming_port_setting_and_holder(tmp_path, setting):
    from support.waits import free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
    ports = {"be_port": free_port(), "be_http_port": free_port(), "be_flight_port": free_port()}
    with _held() as sock:
        ports[setting] = sock.getsockname()[1]
        env.update({f"STARSCAN_{k.upper()}": str(v) for k, v in ports.items()},
                   SPARK_LOCAL_IP="127.0.0.1", STARSCAN_WARMUP_ROWS="0")
        done = subprocess.run([sys.executable, "-m", "starscan", "serve", "--role", "be", "--warehouse", str(tmp_path / "wh"),
                               "--bind-host", "127.0.0.1", "--demo-scale", "0"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode != 0
    said = done.stderr
    port = ports[setting]
    assert f"port {port} on 127.0.0.1 ({setting}) is in use by pid {os.getpid()} (" in said, said[-2000:]
    assert f"set {setting} to a free port" in said
    assert "Server did not start properly" not in said and "Traceback" not in said
