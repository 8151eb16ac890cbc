"""A real load balancer (Debian's nginx) on 127.0.0.1 in front of several llama-servers, for the
multi-server tests and benchmark, with the configuration docs/shared-server.md gives a team.

What it does: `hash $http_x_cpc_document consistent` keeps each document on one server (the
engine sends the header on every request: a salted hash, engine.remote.servers.affinity_key);
`proxy_next_upstream error timeout http_503 non_idempotent` sends a request whose server is down
(refused, or still loading) to the next one on the ring, and `max_fails=1 fail_timeout=F` keeps
it away for F seconds, after which nginx tries it again; `add_header X-Cpc-Upstream
$upstream_addr always` tells the engine which server answered, so a document moved to another
server is checked there and what was known of the other one is forgotten (engine.remote
`recover`). `proxy_buffering off` passes a stream on token by token, and a client that closes a
stream closes it upstream too, which stops the server decoding.
No `keepalive` to the upstreams: a request nginx sent on a kept-alive connection to llama-server
now and then met "upstream prematurely closed connection" (1 in 208 requests under load, also
with `keepalive_timeout 4s`, under llama-server's 5 s idle close), which `max_fails=1` counts
against a healthy server; with a fresh connection per request, 0 in 442. The editor's connection
to nginx, the one across the network, stays kept alive.

The binary comes from scripts/load-balancer.sh (Debian's nginx-light; `make install-test` runs
it). The child gets SIGKILL when this process dies, as tests.support.llama_server's do.
"""

from __future__ import annotations

import functools
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.llama_server import die_with_parent, free_port

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = ROOT / "scripts" / "load-balancer.sh"

CONFIG = """\
master_process off;
worker_processes 1;
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    log_format cpc '$remote_addr "$request" $status doc=$http_x_cpc_document upstream=$upstream_addr';
    access_log {dir}/access.log cpc;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream llama_servers {{
        hash $http_x_cpc_document consistent;
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 64m;
        location / {{
            proxy_pass http://llama_servers;
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_read_timeout 600s;
            proxy_connect_timeout 2s;
            proxy_next_upstream error timeout http_503 non_idempotent;
            add_header X-Cpc-Upstream $upstream_addr always;
        }}
    }}
}}
"""


@functools.cache
def nginx_binary() -> Path | None:
    """nginx on this machine (scripts/load-balancer.sh installs Debian's), or None."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    return Path(found) if found else None


def install_nginx() -> Path:
    """Install it with the project's script when missing (apt-get, as root)."""
    if nginx_binary() is None:
        done = subprocess.run([str(INSTALL_SCRIPT)], stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/load-balancer.sh failed (exit {done.returncode}); its messages are above")
        nginx_binary.cache_clear()
    found = nginx_binary()
    if found is None:
        raise RuntimeError("nginx is not installed (scripts/load-balancer.sh)")
    return found


class Balancer:
    """One nginx process on 127.0.0.1 balancing `upstreams` (host:port); `url` is what
    `modelServer` is set to."""

    def __init__(self, upstreams: list[str], fail_timeout_s: int = 2, port: int | None = None) -> None:
        self.binary = install_nginx()
        self.upstreams = list(upstreams)
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="cpc-nginx-"))
        servers = "\n".join(f"        server {u} max_fails=1 fail_timeout={fail_timeout_s}s;" for u in self.upstreams)
        (self.dir / "nginx.conf").write_text(CONFIG.format(dir=self.dir, port=self.port, servers=servers))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> Balancer:
        command = [str(self.binary), "-p", str(self.dir), "-c", str(self.dir / "nginx.conf"), "-g", "daemon off;"]
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.dir / "stderr.log", "wb"),
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited ({self.process.returncode}):\n{self.errors()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nginx did not listen within {timeout:.0f} s:\n{self.errors()}")

    def errors(self) -> str:
        return "".join(
            (self.dir / n).read_text(errors="replace") for n in ("stderr.log", "error.log") if (self.dir / n).exists()
        )

    def access_log(self) -> list[str]:
        path = self.dir / "access.log"
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Balancer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
