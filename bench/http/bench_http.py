"""Requests per second through sandtrap's HTTP proxy vs direct, from inside a
sandbox, to the same local server, in the same run; and sandlock 0.9.0's proxy.

Run with the venv that has sandlock (``/work/venv-bench``) and sandtrap importable:

    SANDTRAP_LIB=build/libsandtrap.so PYTHONPATH=bindings/python/src \
        /work/venv-bench/bin/python bench/http/bench_http.py [-n 2000] [-r 5]

The client (in the sandbox) makes N GET requests on one kept-alive connection with
http.client (which ignores proxy variables) and prints the rate it saw; the "go"
rows do the same with bench/http/client (built here with ``go build``), which also
speaks HTTP/2: prior knowledge (h2c) and ALPN h2 under interception, through the
proxy (which sends every stream on to this HTTP/1.1 server as HTTP/1.1). Rounds
interleave the contenders; the medians are printed.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

CLIENT = r"""
import http.client, ssl, sys, time
port, n, tls = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
if tls:
    c = http.client.HTTPSConnection("localhost", port, context=ssl._create_unverified_context(), timeout=10)
else:
    c = http.client.HTTPConnection("localhost", port, timeout=10)
def one():
    c.request("GET", "/ok/x")
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
one()
t = time.perf_counter()
for _ in range(n):
    one()
print(n / (time.perf_counter() - t))
"""


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # header and body in one segment (flushed per response): no Nagle stall

    def do_GET(self) -> None:
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: object) -> None:
        pass


def serve(tls: bool, d: Path) -> int:
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)  # localhost: 127.0.0.1 first here
    if tls:
        cert, key = d / "c.pem", d / "k.pem"
        if cert.exists():
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            s.socket = ctx.wrap_socket(s.socket, server_side=True)
            threading.Thread(target=s.serve_forever, daemon=True).start()
            return s.server_address[1]
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
        )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        s.socket = ctx.wrap_socket(s.socket, server_side=True)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s.server_address[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("-r", type=int, default=5)
    a = ap.parse_args()
    if "SANDTRAP_BENCH_CERTS" not in os.environ:
        # the engine (a Go library) reads its environment as the process started:
        # make the server's certificate first, then re-exec with SSL_CERT_FILE (the
        # host's bundle and it), the trust store interception verifies against
        d = Path(tempfile.mkdtemp())
        serve(True, d)
        bundle = d / "bundle.pem"
        host = Path("/etc/ssl/certs/ca-certificates.crt")
        bundle.write_bytes((host.read_bytes() if host.exists() else b"") + (d / "c.pem").read_bytes())
        env = dict(os.environ, SANDTRAP_BENCH_CERTS=str(d), SSL_CERT_FILE=str(bundle))
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    import sandtrap

    d = Path(os.environ["SANDTRAP_BENCH_CERTS"])
    ro = ["/usr", "/lib", "/bin", "/etc", str(d)]
    port, tport = serve(False, d), serve(True, d)
    goclient = d / "client"
    repo = Path(__file__).resolve().parents[2]
    subprocess.run(
        ["go", "build", "-o", str(goclient), "./bench/http/client"],
        cwd=repo,
        check=True,
        env=dict(os.environ, CGO_ENABLED="0"),
    )
    runs: dict[str, tuple[object, int, str]] = {
        "sandtrap direct (net_allow)": (sandtrap.Sandbox(fs_readable=ro, net_allow=[f"127.0.0.1:{port}"]), port, "0"),
        "sandtrap via proxy (http_allow)": (
            sandtrap.Sandbox(fs_readable=ro, http_allow=["GET localhost/ok/*"], http_ports=[port, tport]),
            port,
            "0",
        ),
        "sandtrap https direct (net_allow)": (
            sandtrap.Sandbox(fs_readable=ro, net_allow=[f"127.0.0.1:{tport}"]),
            tport,
            "1",
        ),
        "sandtrap https via proxy (SNI, not intercepted)": (
            sandtrap.Sandbox(fs_readable=ro, http_allow=["GET localhost/ok/*"], http_ports=[port, tport]),
            tport,
            "1",
        ),
        # the proxy verifies the upstream against the host's store: SSL_CERT_FILE,
        # set by the re-exec below, holds the bench server's certificate
        "sandtrap https via proxy (intercepted)": (
            sandtrap.Sandbox(
                fs_readable=ro, http_allow=["GET localhost/ok/*"], http_ports=[port, tport], http_intercept=True
            ),
            tport,
            "1",
        ),
    }
    direct = sandtrap.Sandbox(fs_readable=ro, net_allow=[f"127.0.0.1:{port}", f"127.0.0.1:{tport}"])
    proxied = sandtrap.Sandbox(fs_readable=ro, http_allow=["GET localhost/ok/*"], http_ports=[port, tport])
    intercepted = sandtrap.Sandbox(
        fs_readable=ro, http_allow=["GET localhost/ok/*"], http_ports=[port, tport], http_intercept=True
    )
    for name, sb, p, mode in [
        ("go direct (http/1.1)", direct, port, "h1"),
        ("go via proxy (http/1.1)", proxied, port, "h1"),
        ("go via proxy (h2c prior knowledge)", proxied, port, "h2c"),
        ("go https direct (http/1.1)", direct, tport, "tls-h1"),
        ("go https via proxy (intercepted, http/1.1)", intercepted, tport, "tls-h1"),
        ("go https via proxy (intercepted, ALPN h2)", intercepted, tport, "tls-h2"),
    ]:
        runs[name] = (sb, p, "go:" + mode)
    try:
        import sandlock

        runs["sandlock direct (net_allow)"] = (
            sandlock.Sandbox(fs_readable=ro, net_allow=[f"127.0.0.1:{port}"]),
            port,
            "0",
        )
        runs["sandlock via proxy (http_allow)"] = (
            sandlock.Sandbox(fs_readable=ro, http_allow=["GET localhost/ok/*"], http_ports=[port]),
            port,
            "0",
        )
    except Exception as e:
        print("sandlock:", e)
    res: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(a.r):
        for name, (sb, p, tls) in runs.items():
            if tls.startswith("go:"):
                argv = [str(goclient), tls[3:], str(p), str(a.n)]
            else:
                argv = ["/usr/bin/python3", "-c", CLIENT, str(p), str(a.n), tls]
            r = sb.run(argv)  # type: ignore[attr-defined]
            try:
                res[name].append(float(r.stdout))
            except ValueError:
                print(name, "failed:", r.stdout[-300:], r.stderr[-600:])
    out = {k: round(statistics.median(v)) if v else None for k, v in res.items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
