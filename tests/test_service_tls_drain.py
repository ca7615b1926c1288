"""``cassini serve`` over TLS (a self-signed certificate made here with ``cryptography``,
a client that verifies it) and its drain on SIGTERM (the request in flight finishes, a
new one gets 503, exit 0).  Real server processes on loopback."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time

import pytest
from helpers.service_util import call, error_of, serve_process

from cassini import api


def self_signed(tmp_path) -> tuple[str, str]:
    """(certificate, key) PEM files for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cassini-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def test_tls_with_a_verifying_client(tmp_path):
    cert, key = self_signed(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cassini.cli", "serve", "--port", "0", "--state", ":memory:",
         "--workers", "1", "--tls-cert", cert, "--tls-key", key],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stderr.readline()
        assert "listening on https://127.0.0.1:" in line, line + proc.stderr.read()
        port = int(line.split("127.0.0.1:")[1].split()[0])
        verifying = ssl.create_default_context(cafile=cert)
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=verifying)
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["status"] == "ok"
        conn.close()
        # a client that does not trust the certificate refuses the server
        untrusting = ssl.create_default_context()
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=untrusting)
        with pytest.raises(ssl.SSLCertVerificationError):
            conn.request("GET", "/healthz")
        conn.close()
        # plain HTTP on the TLS port gets no answer
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"200 OK" not in s.recv(4096)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        proc.stderr.close()


def test_tls_cert_without_key_exits_2(tmp_path):
    cert, _ = self_signed(tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "serve", "--port", "0", "--tls-cert", cert],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2 and "--tls-key" in r.stderr


def test_audit_log_in_a_missing_directory_exits_2_naming_the_flag(tmp_path):
    """One line naming --audit-log, exit 2, before anything starts; no directory made."""
    missing = tmp_path / "nonexistent_dir"
    for path, words in (
        (missing / "a.log", "no directory"),
        (tmp_path, "is a directory"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "cassini.cli", "serve", "--port", "0", "--state",
             ":memory:", "--audit-log", str(path)],
            capture_output=True, text=True, timeout=60,
        )
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert lines[0].startswith(f"cassini: error: --audit-log {path}: ") and words in lines[0]
    assert not missing.exists()


def test_sigterm_drains_in_flight_finish_new_get_503_exit_0():
    proc, port = serve_process("--workers", "1")
    body = json.dumps(api.example("score")).encode()
    slow = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        # a request in flight: its head and half its body are sent
        slow.sendall(
            b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[: len(body) // 2]
        )
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        status, headers, answer = call(port, "GET", "/healthz")
        assert status == 503 and headers["Connection"] == "close"
        message = error_of((status, headers, answer))["message"]
        assert "shutting down" in message and headers["Retry-After"] == "1"
        assert "replica" not in message  # one replica (docs/service.md): retry it later
        assert proc.poll() is None  # still waiting for the request in flight
        slow.sendall(body[len(body) // 2:])
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = slow.recv(65536)
            if not chunk:
                break
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
        assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["score"] > 0
        assert proc.wait(30) == 0
        assert "SIGTERM: stopped" in proc.stderr.read()
    finally:
        slow.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
