"""Relay tunnels are shared per network as probe slots are: one IPv4 /24 (IPv6 /48) holds at
most ``--group-share`` of ``--max-tunnels``, so several addresses of one network cannot take
every tunnel. A real ``notary serve`` relay (``--max-tunnels 8``, 2 per address, 4 per /24)
in front of a silent server: four addresses of 127.0.0.0/24 each try to hold 3 tunnels,
then a client from 127.0.1.0/24 asks for one. Twin: ``--group-share 0``, the four addresses
take all 8 and the new client gets 503."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import pytest
from loopback import free_port
from security_support import NotaryProcess, Results, ThreadServer, copy_identity

SUITE = "trust"
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 6)]


def hold(conn: socket.socket) -> None:
    conn.settimeout(10)
    with contextlib.suppress(OSError):
        while conn.recv(65536):
            pass


def tunnel(relay_port: int, source: str, dest_port: int) -> tuple[socket.socket, bytes]:
    s = socket.create_connection(("127.0.0.1", relay_port), timeout=10,
                                 source_address=(source, 0))
    s.sendall(f"CONNECT 127.0.0.1:{dest_port} HTTP/1.1\r\n\r\n".encode())
    return s, s.recv(200)


@pytest.mark.parametrize("group_share", ["default", "0"])
def test_one_network_cannot_take_every_tunnel(
    identity_dir: Path, tmp_path: Path, results: Results, group_share: str
) -> None:
    relay_port = free_port()
    with ThreadServer(hold) as silent:
        args = ["--allow-target", "127.0.0.0/8", "--relay-listen", f"127.0.0.1:{relay_port}",
                "--relay-port", str(silent.port), "--max-tunnels", "8",
                "--client-share", "0.25"]
        if group_share == "0":
            args += ["--group-share", "0"]
        n = NotaryProcess(copy_identity(identity_dir, tmp_path / "data"), args, tls=False)
        held: list[socket.socket] = []
        try:
            established = 0
            for source in ATTACKERS:
                for _ in range(3):  # one more than the per-address share
                    s, head = tunnel(relay_port, source, silent.port)
                    held.append(s)
                    established += head.startswith(b"HTTP/1.0 200")
            time.sleep(0.3)
            new, head = tunnel(relay_port, "127.0.1.9", silent.port)
            new.close()
        finally:
            for s in held:
                s.close()
            n.stop()
    if group_share == "default":
        assert established == 4, established
        assert head.startswith(b"HTTP/1.0 200 Connection Established"), head
        results.add(SUITE, "relay: 4 addresses of one /24 try to hold 3 tunnels each "
                    "(--max-tunnels 8, 2 per address, 4 per /24); a client of another /24 "
                    "connects", "the /24 holds 4, the new client's tunnel established",
                    f"held {established}, new: {head.split(b' ')[1].decode()}")
    else:
        assert established == 8, established
        assert head.startswith(b"HTTP/1.0 503"), head
        results.add(SUITE, "twin: the same with --group-share 0", "the /24 holds all 8, "
                    "the new client 503", f"held {established}, new: 503")
