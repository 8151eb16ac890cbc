"""A real TLS-terminating proxy on 127.0.0.1 (Debian's stunnel, installed by scripts/tls-proxy.sh)
in front of a llama-server, with a CA and certificates made here (the `cryptography` package):
what a team puts in front of its model server so document text does not cross the network in
clear. For the https:// tests and the connection bench.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.llama_server import ROOT, die_with_parent, free_port

SCRIPT = ROOT / "scripts" / "tls-proxy.sh"


def stunnel_binary() -> str:
    done = subprocess.run([str(SCRIPT)], stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/tls-proxy.sh failed (exit {done.returncode}); its messages are above")
    return done.stdout.strip().splitlines()[-1]


@dataclass(frozen=True)
class Issued:
    cert: Path  # PEM
    key: Path  # PEM, unencrypted


class Authority:
    """A CA of our own: its certificate (`cert`, PEM) is what `modelServerCaFile` names."""

    def __init__(self, folder: Path, name: str = "cpc-lsp test CA") -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._name = subject
        self._cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        self.cert = folder / f"{name.replace(' ', '-')}.pem"
        self.cert.write_bytes(self._pem(self._cert))

    @staticmethod
    def _pem(cert) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, stem: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), expired: bool = False) -> Issued:
        """A server certificate for `hosts` (IP addresses or DNS names), valid now or expired."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = (
            (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
            if expired
            else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=10))
        )
        names = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        cert = (
            x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(self._name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        issued = Issued(self.folder / f"{stem}.pem", self.folder / f"{stem}.key")
        issued.cert.write_bytes(self._pem(cert))
        issued.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        os.chmod(issued.key, 0o600)
        return issued


class TlsProxy:
    """stunnel on 127.0.0.1: TLS with `issued` outside, plain HTTP to `upstream` inside."""

    def __init__(self, upstream: str, issued: Issued, folder: Path, host: str = "127.0.0.1") -> None:
        target = urlsplit(upstream)
        self.port = free_port()
        self.host = host
        conf = folder / f"stunnel-{self.port}.conf"
        conf.write_text(
            "foreground = yes\npid =\ndebug = 3\n"
            f"[llama]\naccept = 127.0.0.1:{self.port}\nconnect = {target.hostname}:{target.port}\n"
            f"cert = {issued.cert}\nkey = {issued.key}\n"
        )
        self.log_path = folder / f"stunnel-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [stunnel_binary(), str(conf)], stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"stunnel did not start: {self.log_path.read_text()[-2000:]}")
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __enter__(self) -> TlsProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
