"""Test hosts made of Linux network namespaces (root only): each host its own network stack
and address, joined by a bridge in a namespace of its own, so that nothing here touches the
machine's own network (its root namespace gets no interface, address or route).

``Network`` makes them: ``host(name)`` a host on the bridge (10.203.N.i/24), and
``private_link(a, b)`` a point-to-point link between two hosts on a subnet of its own
(10.204.N.0/30), so that a host on it reaches only the other end: a namespace forwards
nothing (its ip_forward is 0), so the hosts behind that other end stay unreachable, as for a
reader outside a Kubernetes cluster that reaches only its ingress. ``cut(host)`` takes a
host's link down at the bridge (the host stays up, its packets go nowhere) and ``mend(host)``
brings it back.

Processes run on a host with ``Host.command``: ``ip netns exec`` enters the namespace and
then executes the command itself, so the process's pid is the command's. Calls from the test
process go through ``Host.run_here``: a thread that enters the namespace (setns) before it
opens its sockets; a socket stays in the namespace it was opened in."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000


def why_not_available() -> str | None:
    """Why this process cannot make test hosts here (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); run the multi-host tier as root, as .ci/run does"
    if shutil.which("ip") is None:
        return "the ip command (Debian's iproute2) is not installed"
    probe = f"ss-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Host:
    name: str
    netns: str
    address: str                 # on the bridge
    switch_port: str | None      # its link's end at the bridge (cut and mended there)
    other_addresses: list[str] = field(default_factory=list)

    def command(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def run_here(self, fn: Callable[[], T]) -> T:
        """``fn()`` on a thread inside this host's network namespace."""
        out: dict[str, Any] = {}

        def inside() -> None:
            try:
                libc = ctypes.CDLL("libc.so.6", use_errno=True)
                with open(f"/var/run/netns/{self.netns}") as ns:
                    if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {self.netns} failed")
                out["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                out["error"] = exc

        thread = threading.Thread(target=inside, name=f"in-{self.name}")
        thread.start()
        thread.join()
        if "error" in out:
            raise out["error"]
        return out["value"]

    def listeners(self) -> list[tuple[str, int, int | None]]:
        """(address, port, pid) of every listening TCP socket on this host."""
        done = subprocess.run(self.command("ss", "-Hltnp"), capture_output=True, text=True, check=True)
        found = []
        for line in done.stdout.splitlines():
            fields = line.split()
            local = fields[3]
            address, _, port = local.rpartition(":")
            pid = None
            if "pid=" in line:
                pid = int(line.split("pid=", 1)[1].split(",", 1)[0])
            address = address.strip("[]")
            found.append((address.removeprefix("::ffff:"), int(port), pid))  # gRPC's IPv4-mapped form
        return found


class Network:
    """Hosts on one bridge; ``index`` keeps two networks (two xdist workers) apart."""

    def __init__(self, tag: str, index: int = 0):
        self.tag = tag[:6]
        self.index = index
        self.switch = f"{self.tag}-sw"
        self.hosts: dict[str, Host] = {}
        self._links = 0
        _ip("netns", "add", self.switch)
        self._in(self.switch, "link", "add", "br0", "type", "bridge")
        self._in(self.switch, "link", "set", "br0", "up")
        self._in(self.switch, "link", "set", "lo", "up")

    @staticmethod
    def _in(netns: str, *args: str) -> None:
        _ip("-n", netns, *args)

    def host(self, name: str) -> Host:
        number = len(self.hosts) + 1
        netns = f"{self.tag}-{name}"
        _ip("netns", "add", netns)
        self._in(netns, "link", "set", "lo", "up")
        inner, outer = f"h{number}", f"{self.tag}p{number}"
        _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
        _ip("link", "set", inner, "netns", netns)
        _ip("link", "set", outer, "netns", self.switch)
        address = f"10.203.{self.index}.{number}"
        self._in(netns, "link", "set", inner, "name", "eth0")
        self._in(netns, "addr", "add", f"{address}/24", "dev", "eth0")
        self._in(netns, "link", "set", "eth0", "up")
        self._in(self.switch, "link", "set", outer, "master", "br0")
        self._in(self.switch, "link", "set", outer, "up")
        host = self.hosts[name] = Host(name, netns, address, outer)
        return host

    def lone_host(self, name: str) -> Host:
        """A host on no bridge: it reaches only what ``private_link`` joins it to."""
        netns = f"{self.tag}-{name}"
        _ip("netns", "add", netns)
        self._in(netns, "link", "set", "lo", "up")
        host = self.hosts[name] = Host(name, netns, "", None)
        return host

    def private_link(self, a: Host, b: Host) -> tuple[str, str]:
        """A link of its own between ``a`` and ``b``: their addresses on it."""
        self._links += 1
        n = self._links
        base = 4 * n
        ends = (f"{self.tag}l{n}a", f"{self.tag}l{n}b")
        _ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        addresses = (f"10.204.{self.index}.{base + 1}", f"10.204.{self.index}.{base + 2}")
        for host, end, address in zip((a, b), ends, addresses, strict=True):
            _ip("link", "set", end, "netns", host.netns)
            self._in(host.netns, "addr", "add", f"{address}/30", "dev", end)
            self._in(host.netns, "link", "set", end, "up")
            host.other_addresses.append(address)
        if not b.address:
            b.address = addresses[1]
        return addresses

    def cut(self, host: Host) -> None:
        assert host.switch_port is not None
        self._in(self.switch, "link", "set", host.switch_port, "down")

    def mend(self, host: Host) -> None:
        assert host.switch_port is not None
        self._in(self.switch, "link", "set", host.switch_port, "up")

    def close(self) -> None:
        for host in self.hosts.values():
            subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True)
            _kill_all_in(host.netns)
            subprocess.run(["ip", "netns", "delete", host.netns], capture_output=True)
        subprocess.run(["ip", "netns", "delete", self.switch], capture_output=True)


def _kill_all_in(netns: str) -> None:
    done = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    for pid in done.stdout.split():
        try:
            os.kill(int(pid), 9)
        except (OSError, ValueError):
            pass
