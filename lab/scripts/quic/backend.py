"""An HTTP/3 backend for weir's lab, on aioquic.

Serves HTTP/3 (ALPN "h3"): a GET of any path is answered with status 200,
the backend's name in an `x-backend` header and as the body; any other
method gets 405. Every connection ID it issues (the
handshake's source connection ID and each NEW_CONNECTION_ID) carries its
QUIC-LB server ID, so a load balancer can route the connection by it
whatever the client's address.

    backend.py --name backend-1 --server-id 0b01 --config-id 0 \
        --listen 10.77.1.2:4433 [--listen 10.77.100.2:4433]

Listens on each address (a DSR backend also listens on the VIP, so that its
replies leave from the VIP's address). Prints "ready" once it listens, and
runs until it is interrupted.
"""

import argparse
import asyncio
import datetime
import os
import signal
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import aioquic.asyncio.server as quic_server
from aioquic.asyncio import serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection, QuicConnectionId
from aioquic.quic.events import ProtocolNegotiated, QuicEvent

import quic_lb_cid


def self_signed(name: str):
    """A throwaway certificate: the lab's client does not verify it."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert, key


def server_id_connection(config_id: int, server_id: bytes):
    """A QuicConnection class whose every host connection ID carries the
    server ID. aioquic draws them with os.urandom in two places: the first
    one in __init__, the later ones in _replenish_connection_ids."""

    class ServerIdConnection(QuicConnection):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            first = self._host_cids[0]
            first.cid = quic_lb_cid.encode(config_id, server_id)
            self.host_cid = first.cid
            self._local_initial_source_connection_id = first.cid

        def _replenish_connection_ids(self) -> None:
            while len(self._host_cids) < min(8, self._remote_active_connection_id_limit):
                self._host_cids.append(
                    QuicConnectionId(
                        cid=quic_lb_cid.encode(config_id, server_id),
                        sequence_number=self._host_cid_seq,
                        stateless_reset_token=os.urandom(16),
                    )
                )
                self._host_cid_seq += 1

    return ServerIdConnection


def http3_backend(name: str):
    """A QuicConnectionProtocol answering every HTTP/3 request as this
    backend."""
    body = (name + "\n").encode()

    class Http3Backend(QuicConnectionProtocol):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._http: H3Connection | None = None

        def quic_event_received(self, event: QuicEvent) -> None:
            # HTTP/3 starts once the handshake agreed on "h3".
            if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
                self._http = H3Connection(self._quic)
            if self._http is not None:
                for h3_event in self._http.handle_event(event):
                    self.answer(h3_event)

        def answer(self, event: H3Event) -> None:
            if not isinstance(event, HeadersReceived):
                return
            method = dict(event.headers).get(b":method")
            headers = [(b"x-backend", name.encode()), (b"content-type", b"text/plain")]
            if method == b"GET":
                status, payload = b"200", body
            else:
                status, payload = b"405", b"only GET is served\n"
                headers.append((b"allow", b"GET"))
            headers.append((b"content-length", str(len(payload)).encode()))
            self._http.send_headers(event.stream_id, [(b":status", status)] + headers)
            self._http.send_data(event.stream_id, payload, end_stream=True)
            # The answer leaves with this datagram's own transmit.

    return Http3Backend


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--listen {text!r}: write it as ADDRESS:PORT")
    return host, int(port)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="the name every response carries")
    p.add_argument("--server-id", required=True, help="the QUIC-LB server ID, hex")
    p.add_argument("--config-id", type=int, default=0, help="config rotation codepoint, 0-6")
    p.add_argument("--listen", type=parse_listen, action="append", required=True)
    args = p.parse_args()
    try:
        server_id = quic_lb_cid.parse_server_id(args.server_id)
        quic_lb_cid.encode(args.config_id, server_id)
    except ValueError as e:
        sys.exit(f"backend.py: {e}")

    # The server builds its connections by this module-level name.
    quic_server.QuicConnection = server_id_connection(args.config_id, server_id)
    config = QuicConfiguration(
        is_client=False, alpn_protocols=H3_ALPN, connection_id_length=quic_lb_cid.CID_LEN
    )
    cert, key = self_signed(args.name)
    config.certificate, config.private_key = cert, key

    protocol = http3_backend(args.name)
    servers = [
        await serve(host, port, configuration=config, create_protocol=protocol)
        for host, port in args.listen
    ]
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        s.close()


if __name__ == "__main__":
    asyncio.run(main())
