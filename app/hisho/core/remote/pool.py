"""Where a remote engine's requests go: straight to the server or through the system proxy, on one kept-alive
connection pool per server. No Qt.

Rules of use:
- ``is_local_host(host)`` says whether an address is on this machine or the LAN (loopback, private, link-local
  and carrier-grade NAT ranges such as Tailscale's, ``localhost``, ``*.local``/``.lan``/``.internal``/
  ``.home.arpa``/``.ts.net``, and single-label names like ``workstation``). Such a server is reached directly by
  default: an internet proxy would not know it.
- ``system_proxy(url)`` is the proxy the system names for ``url`` (``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``,
  with ``NO_PROXY`` honoured; on macOS and Windows the system settings when the environment names none), '' for
  none. It is asked for each request; each proxy has its own pool.
- ``client(origin, verify_tls, proxy)`` is the shared ``httpx2.Client`` for that server and route; it is safe
  to use from several threads at once (a document summary's batch sends in parallel). ``keep=False`` gives the
  route's client for streams, which keeps no connection: each stream opens its own, so a stop can shut it at any
  moment, also before the server answers (a kept-alive connection is known to a request only once answered). ``close_all()`` drops
  every pool (tests, shutdown).
- ``shown(proxy)`` is a proxy address fit for a message: without the user name and password it may carry.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import urllib.request
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import httpx2  # imported with the first pool (see hisho.core.remote.http)

log = logging.getLogger("hisho.remote")

# Carrier-grade NAT: Tailscale and other overlay networks hand these out to machines on the user's own net.
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_LAN_SUFFIXES = (".localhost", ".local", ".lan", ".internal", ".home.arpa", ".ts.net")
# Connections kept open per server between requests; a batch may open more, which close when done.
_KEEP = 8
_KEEP_S = 30.0

_lock = threading.Lock()
_clients: dict[tuple[str, bool, str, bool], httpx2.Client] = {}


def is_local_host(host: str) -> bool:
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(_LAN_SUFFIXES):
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return bool(name) and "." not in name        # a bare host name: the LAN's own resolver answers it
    return ip.is_loopback or ip.is_private or ip.is_link_local or (ip.version == 4 and ip in _CGNAT)


def system_proxy(url: str) -> str:
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all") or ""
    if not proxy or not parts.hostname:
        return ""
    where = f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname
    if urllib.request.proxy_bypass(where):
        return ""
    return proxy if "://" in proxy else f"http://{proxy}"


def shown(proxy: str) -> str:
    parts = urlsplit(proxy)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "") if parts.hostname \
        else proxy


def client(origin: str, verify_tls: bool, proxy: str, keep: bool = True) -> httpx2.Client:
    """The pool for ``origin`` (``scheme://host:port``) reached through ``proxy`` ('' for directly)."""
    import httpx2

    key = (origin, verify_tls, proxy, keep)
    with _lock:
        got = _clients.get(key)
        if got is None:
            limits = httpx2.Limits(max_keepalive_connections=_KEEP if keep else 0, keepalive_expiry=_KEEP_S)
            # The route is chosen here, not by httpx2 from the environment: an explicit transport turns its
            # environment proxies off, so a LAN server stays direct even when HTTPS_PROXY is set.
            transport = httpx2.HTTPTransport(verify=verify_tls, limits=limits, proxy=proxy or None)
            got = httpx2.Client(transport=transport, headers={"User-Agent": "hisho"})
            _clients[key] = got
            log.debug("connection pool for %s (%s)", origin, f"through {shown(proxy)}" if proxy else "direct")
    return got


def close_all() -> None:
    with _lock:
        pools = list(_clients.values())
        _clients.clear()
    for p in pools:
        p.close()
