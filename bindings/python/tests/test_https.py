"""HTTPS interception and credentials through the Python binding (issue 18): a
local HTTPS server stands in for api.test (its name mapped by the library's test
hook, its self-signed certificate added to the trust the proxy verifies upstreams
against by the test hook SANDTRAP_TEST_UPSTREAM_CA), in a process of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_HOST_SIDE = r"""
import http.server, json, os, socket, ssl, sys, threading
from sandtrap import Sandbox
cert, key, ca_out = sys.argv[1:4]
seen = []
class H(http.server.BaseHTTPRequestHandler):
    def _any(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        seen.append([self.command, self.path, self.headers.get("Authorization")])
        out = ("hit " + self.command + " " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = _any
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
port = srv.server_address[1]
threading.Thread(target=srv.serve_forever, daemon=True).start()
bundle = "/etc/ssl/certs/ca-certificates.crt"
sb = Sandbox(
    fs_readable=["/usr", "/lib", "/etc"],
    http_allow=["GET api.test/ok/*", "POST api.test/v1/*"],
    http_ports=[port],
    http_intercept=True,
    http_inject_ca=[bundle],
    http_ca_out=ca_out,
    credentials={"api": "env:TEST_API_KEY"},
    http_auth=["POST api.test/v1/* bearer api"],
)
res = {}
for name, argv in {
    "ok": ["/usr/bin/curl", "-sS", "--noproxy", "*", "--resolve", f"api.test:{port}:127.0.0.1", "-w", " %{http_code}", f"https://api.test:{port}/ok/1"],
    "other": ["/usr/bin/curl", "-sS", "--noproxy", "*", "--resolve", f"api.test:{port}:127.0.0.1", "-w", " %{http_code}", f"https://api.test:{port}/admin"],
    "post": ["/usr/bin/curl", "-sS", "-X", "POST", "-d", "{}", "-w", " %{http_code}", f"https://api.test:{port}/v1/chat"],
    "env": ["/usr/bin/env"],
}.items():
    r = sb.run(argv)
    res[name] = {"out": r.stdout.decode(), "err": r.stderr.decode(), "denials": [d.address for d in r.denials]}
res["http"] = sb.isolation()["net"]["http"]
res["seen"] = seen
print(json.dumps(res, default=str))
"""


def test_https_interception_and_credentials(tmp_path: Path) -> None:
    hook = os.environ.get("SANDTRAP_TESTHOOK_LIB")
    if not hook:
        pytest.skip("needs the library built with the test hook (make test-python sets SANDTRAP_TESTHOOK_LIB)")
    if shutil.which("openssl") is None or not Path("/usr/bin/curl").exists():
        pytest.skip("openssl makes the upstream's certificate; curl is the client")
    if not Path("/etc/ssl/certs/ca-certificates.crt").exists():
        pytest.skip("no /etc/ssl/certs/ca-certificates.crt on this host")
    cert, key, ca_out = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "sandbox-ca.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=api.test",
            "-addext",
            "subjectAltName=DNS:api.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    secret = "sk-" + os.urandom(12).hex()
    env = dict(
        os.environ,
        SANDTRAP_LIB=hook,
        SANDTRAP_TEST_HOSTS="api.test=127.0.0.1",
        SANDTRAP_TEST_UPSTREAM_CA=str(cert),
        TEST_API_KEY=secret,
    )
    out = subprocess.run(
        [sys.executable, "-c", _HOST_SIDE, str(cert), str(key), str(ca_out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    res = json.loads(out.stdout)
    assert res["ok"]["out"] == "hit GET /ok/1 200", res["ok"]
    assert res["other"]["out"].endswith(" 403") and "no http_allow rule matches" in res["other"]["out"], res["other"]
    assert any("GET api.test/admin" in d for d in res["other"]["denials"]), res["other"]
    assert res["post"]["out"] == "hit POST /v1/chat 200", res["post"]  # through https_proxy (CONNECT)
    assert ["POST", "/v1/chat", "Bearer " + secret] in res["seen"], res["seen"]
    assert ["GET", "/ok/1", None] in res["seen"], res["seen"]
    assert secret not in res["env"]["out"] and "TEST_API_KEY" not in res["env"]["out"], res["env"]
    assert res["http"]["https"] == "intercepted" and res["http"]["auth"] == ["POST api.test/v1/* bearer api"], res[
        "http"
    ]
    assert secret not in json.dumps(res["http"])
    assert ca_out.read_text().startswith("-----BEGIN CERTIFICATE-----")
