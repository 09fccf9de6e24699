"""Who may send a fleet work: whoever can submit to the scheduler runs code as root on every worker (a scenario's
`command`, `env` and guestfish scripts are code). So a plain (unencrypted, unauthenticated) scheduler address is
refused unless the user says `--insecure`, before any connection is tried: loopback included, since any local
user can connect to a loopback port (`fleet local` speaks mutual TLS); and a worker listens only on the
interface that reaches its scheduler, never on every interface."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

from guestbench.util.errors import UserError
from guestbench.run.fleet.tls import DOC

ENCRYPTED = ("tls", "wss")  # Dask's protocols with TLS (mutual authentication when configured: docs/fleet.md)
SHOWN = 80  # the most of a hostile address an error line quotes
REFUSAL_WAIT_S = 1.0  # a loopback connect is refused or accepted at once; past this, Dask's client decides


def parse(address: str, source: str, key: str, default_port: int | None = 8786) -> tuple[str, str, int]:
    """(protocol, host, port) of a Dask address ("tcp" when none is given, as Dask reads it; the port Dask's
    default unless `default_port` is None, when one must be given), or one line."""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        protocol, location = parse_address(address)
        host, port = parse_host_port(location, default_port)
    except (ValueError, TypeError):
        raise UserError("is not a scheduler address; allowed: tls://HOST:PORT (or tcp://HOST:PORT)",
                        source=source, key=key[:SHOWN]) from None
    return protocol, host, int(port)


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (a name is resolved; one that does not resolve is not)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        found = {str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in found)


def listening_here(port: int) -> bool:
    """Whether a socket of this network namespace listens on TCP `port` (on any address; /proc/net/tcp and tcp6,
    the latter absent without IPv6). Unreadable: assumed yes."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as rows:  # read row by row: a busy host's tables hold every socket it has
                for row in rows:
                    fields = row.split()  # sl local_address rem_address st ...; st 0A is LISTEN; a header first
                    if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except FileNotFoundError:
            if not table.endswith("6"):
                return True
        except OSError:
            return True
    return False


def nobody_there(address: str) -> bool:
    """Whether a loopback scheduler address given with its port surely has no scheduler behind it: nothing in this
    network namespace listens on the port, and a plain connection is refused (a forwarded loopback port, as some
    container set-ups make, has no listener here and still answers). Dask's client would retry the refusal for its
    whole time-out; a listener is never connected to here, so a scheduler's log shows no failed handshake."""
    try:
        protocol, host, port = parse(address, "", "", default_port=None)  # no port: Dask's own error says so
    except UserError:
        return False
    if protocol not in ("tcp", "tls", "ws", "wss") or not is_loopback(host) or listening_here(port):
        return False
    try:
        with socket.create_connection((host, port), timeout=REFUSAL_WAIT_S):
            return False
    except ConnectionRefusedError:
        return True
    except (OSError, UnicodeError):
        return False


def refuse_plain(address: str, insecure: bool, source: str, key: str, warn: Callable[[str], None]) -> None:
    """Refuse a plain-text scheduler address unless `insecure`; with it, say what it costs. Loopback is no trust
    boundary: every local user reaches a loopback port."""
    protocol, host, _ = parse(address, source, key)
    if protocol in ENCRYPTED or protocol == "inproc":  # inproc: this process only
        return
    who = "any local user" if is_loopback(host) else "anyone"
    if not insecure:
        raise UserError(f"plain {protocol}:// to a scheduler lets {who} who reaches its port run code as root on "
                        f"every worker; use tls:// with certificates ({DOC}) or pass --insecure",
                        source=source, key=key[:SHOWN])
    reach = "any local user" if is_loopback(host) else f"whoever reaches {host[:SHOWN]}"
    warn(f"warning: --insecure: {protocol}:// is neither encrypted nor authenticated; {reach} can run code as "
         f"root on every worker of this fleet")


def listen_host(address: str, source: str, key: str) -> str:
    """The local address a worker listens on: loopback for a loopback scheduler, else the address the kernel
    would send from to reach the scheduler (a UDP socket's connect() picks the route; no packet is sent)."""
    _, host, port = parse(address, source, key)
    if is_loopback(host):
        return "::1" if ":" in host else "127.0.0.1"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError) as e:
        raise UserError(f"cannot resolve the scheduler's host ({e})", source=source, key=key[:SHOWN]) from None
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.connect(sockaddr)
                local = str(s.getsockname()[0])
        except OSError:
            continue
        if not ipaddress.ip_address(local.split("%")[0]).is_unspecified:
            return local
    raise UserError("no route from this host to the scheduler; allowed: an address this host can reach",
                    source=source, key=key[:SHOWN])
