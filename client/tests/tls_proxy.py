"""A TLS front for the live server that requires client certificates (as seed 003's
datacenters do), and a throwaway CA issuing its server certificate and users' certificates.
Loopback only; the CA's files live in the test's tmp_path."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    return path


class CertAuthority:
    """A certificate authority whose certificate is `cert` (PEM file)."""

    def __init__(self, directory: Path, common: str = "PaddleCloud test CA"):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.certificate = (
            x509.CertificateBuilder().subject_name(_name(common)).issuer_name(_name(common))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(self.key, hashes.SHA256()))
        self.cert = self.dir / "ca.pem"
        self.cert.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, server: bool) -> tuple[Path, Path]:
        """A certificate for a server (SAN 127.0.0.1, localhost) or a client; returns (cert, key)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder().subject_name(_name(name)).issuer_name(self.certificate.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                  else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path = self.dir / f"{name}.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cert_path, _write_key(key, self.dir / f"{name}-key.pem")


class ClientCertProxy:
    """Terminates TLS on 127.0.0.1:<port>, refusing any client without a certificate signed by
    `ca`, and passes the bytes on to `upstream` (http://host:port)."""

    def __init__(self, upstream: str, ca: CertAuthority):
        host, port = upstream.split("//", 1)[-1].rstrip("/").rsplit(":", 1)
        self.upstream = ("127.0.0.1" if host == "localhost" else host, int(port))
        cert, key = ca.issue("server", server=True)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.cert))
        self.context.load_cert_chain(cert, key)
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.handshakes_refused = 0
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(started,), daemon=True, name="tls-proxy")
        self.thread.start()
        started.wait(10)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(
            self._handle, "127.0.0.1", 0, ssl=self.context, ssl_handshake_timeout=10))
        self.port = self.server.sockets[0].getsockname()[1]
        self.loop.set_exception_handler(self._on_error)
        started.set()
        self.loop.run_forever()

    def _on_error(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if isinstance(context.get("exception"), (ssl.SSLError, ConnectionError)):
            self.handshakes_refused += 1  # a client without an acceptable certificate
            return
        loop.default_exception_handler(context)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    def close(self) -> None:
        async def shutdown() -> None:
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:  # connections still open (keep-alive): end them, not leave them pending
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
