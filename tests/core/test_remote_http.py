"""The remote engines' HTTP: one kept-alive pool per server, the SSE format as the spec frames it, a stop while the
server has not answered yet, and the route — straight to a LAN server, through the system proxy
(``HTTPS_PROXY``/``HTTP_PROXY``, ``NO_PROXY``) for any other or when the engine says so. Loopback servers
(tests/remote_stub.py) and a loopback proxy (tests/proxy_stub.py), no mocks."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.core.engine.protocol import LoadParams
from hisho.core.remote import endpoints, pool
from hisho.core.remote.engine import RemoteEngine
from hisho.core.remote.http import Endpoint, RemoteError, call
from hisho.core.remote.probe import probe
from tests.proxy_stub import ProxyServer
from tests.remote_stub import MODEL, StubServer

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def no_system_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    yield
    pool.close_all()


def _say(ep: Endpoint) -> str:
    eng = RemoteEngine(ep)
    eng.load(LoadParams(model_path=""))
    return eng.generate(messages=[{"role": "user", "content": "hi"}]).collect().text


def test_calls_to_one_server_share_a_connection() -> None:
    with StubServer("ok", keep_alive=True) as srv:
        ep = Endpoint("box", srv.url)
        for _ in range(4):
            assert call(ep, "GET", "/v1/models")["data"][0]["id"] == MODEL
        assert probe(ep).ok
    assert len(srv.connections) == 1


def test_a_connection_the_server_dropped_is_sent_again_once() -> None:
    with StubServer("stale", keep_alive=True) as srv:
        ep = Endpoint("box", srv.url)
        call(ep, "GET", "/v1/models")
        assert call(ep, "GET", "/v1/models")["data"][0]["id"] == MODEL   # the 2nd request met a closed socket
    assert len(srv.connections) == 2


def test_event_stream_framed_every_way_the_spec_allows() -> None:
    with StubServer("framing") as srv:
        eng = RemoteEngine(Endpoint("box", srv.url))
        eng.load(LoadParams(model_path=""))
        stream = eng.generate(messages=[{"role": "user", "content": "hi"}])
        res = stream.collect()
    assert res.text == "Framéd three ways" and res.stop_reason == "stop"


def test_stop_while_the_server_has_not_answered_closes_the_request() -> None:
    with StubServer("slow", delay_s=60.0, keep_alive=True) as srv:       # the probe leaves a kept-alive connection
        eng = RemoteEngine(Endpoint("box", srv.url))
        eng.load(LoadParams(model_path=""))
        stream = eng.generate(messages=[{"role": "user", "content": "a long prompt"}])
        done = threading.Event()
        threading.Thread(target=lambda: (stream.collect(), done.set()), daemon=True).start()
        assert _until(lambda: bool(srv.requests)), "the request never reached the server"
        stream.cancel()
        assert done.wait(30), "the stop did not end the wait for the server"
        assert not srv.answered.is_set()                      # it returned while the server was still busy
    assert stream.result is not None and stream.result.stop_reason == "cancelled"


def _until(cond: object, timeout: float = 30.0) -> bool:
    ev = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if callable(cond) and cond():
            return True
        ev.wait(0.05)
    return False


# ----- the route -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("url, proxied", [
    ("http://127.0.0.1:8080", False), ("http://localhost:8080", False), ("http://[::1]:8080", False),
    ("http://192.168.1.20:8080", False), ("http://10.0.0.5", False), ("http://172.20.1.1", False),
    ("http://100.101.12.7:8080", False),               # a Tailscale address
    ("http://workstation:8080", False), ("http://gpu.local:8000", False), ("http://box.lan", False),
    ("https://gpu-box.tail1234.ts.net", False),
    ("https://api.example.com", True), ("http://8.8.8.8:8080", True), ("https://inference.my-company.com/v1", True),
])
def test_a_lan_address_goes_direct_by_default(url: str, proxied: bool) -> None:
    assert Endpoint("box", url).proxied is proxied
    assert Endpoint("box", url, use_proxy=not proxied).proxied is (not proxied)   # the engine's own choice wins


def test_the_proxy_choice_is_kept_only_when_set(tmp_path: Path) -> None:
    path = tmp_path / "engines.json"
    eps = [Endpoint("lan", "http://192.168.1.2:8080"), Endpoint("lan-via", "http://192.168.1.3:8080", use_proxy=True),
           Endpoint("net-direct", "https://api.example.com", use_proxy=False)]
    endpoints.save_endpoints(eps, path)
    assert '"use_proxy"' not in path.read_text().split('"lan-via"')[0]     # the default is not written
    got = endpoints.load_endpoints(path)
    assert [(e.name, e.use_proxy, e.proxied) for e in got] == [
        ("lan", None, False), ("lan-via", True, True), ("net-direct", False, False)]


def test_an_engine_set_to_the_proxy_goes_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with ProxyServer() as proxy, StubServer("ok") as srv:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        ep = Endpoint("box", srv.url, use_proxy=True)
        assert _say(ep) == "Hello from the stub."
        info = probe(ep)
    assert info.ok and f"through the proxy {proxy.url}" in info.summary()
    assert f"GET {srv.url}/v1/models" in proxy.seen
    assert f"POST {srv.url}/v1/chat/completions" in proxy.seen


def test_a_lan_engine_does_not_go_through_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    with ProxyServer() as proxy, StubServer("ok") as srv:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        assert _say(Endpoint("box", srv.url)) == "Hello from the stub."      # 127.0.0.1: direct by default
        monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
        assert _say(Endpoint("box", srv.url, use_proxy=True)) == "Hello from the stub."   # NO_PROXY wins
    assert proxy.seen == []


def test_a_proxy_that_is_down_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with ProxyServer() as dead:
        url = dead.url
    monkeypatch.setenv("HTTP_PROXY", "http://user:secret@" + url.removeprefix("http://"))
    with StubServer("ok") as srv:
        info = probe(Endpoint("box", srv.url, use_proxy=True))
    assert f"through the proxy {url}" in info.error and "HTTPS_PROXY" in info.error
    assert "secret" not in info.error and "\n" not in info.error


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(crt)], check=True, capture_output=True)
    return str(crt), str(key)


def test_https_goes_through_the_proxy_as_a_tunnel(monkeypatch: pytest.MonkeyPatch,
                                                   cert: tuple[str, str]) -> None:
    with ProxyServer() as proxy, StubServer("ok", tls=cert) as srv:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        ep = Endpoint("box", srv.url, verify_tls=False, use_proxy=True)
        assert _say(ep) == "Hello from the stub."
        strict = probe(Endpoint("box", srv.url, use_proxy=True))          # a self-signed certificate
    assert f"CONNECT 127.0.0.1:{srv.server_address[1]}" in proxy.seen
    assert "TLS check failed" in strict.error and f"through the proxy {proxy.url}" in strict.error


def test_a_socks_proxy_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:1")
    with pytest.raises(RemoteError) as err:
        call(Endpoint("box", "https://api.example.com"), "GET", "/v1/models")
    assert "\n" not in str(err.value) and ("proxy" in str(err.value))


def test_reading_the_engines_does_not_import_the_http_client(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "engines.json"
    endpoints.save_endpoints([Endpoint("box", "http://192.168.1.2:8080")], path)
    code = ("import sys; from hisho.core.remote import endpoints; import hisho.core.remote.engine; "
            f"print(endpoints.load_endpoints(__import__('pathlib').Path({str(path)!r}))[0].proxied, "
            "'httpx2' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]              # the window's start pays for it only when used
