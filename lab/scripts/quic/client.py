"""An HTTP/3 client for weir's lab, on aioquic.

Opens --connections connections to the VIP at once; each makes --requests
HTTP/3 GET requests --interval-ms apart, and reads the backend that served
each from the response (status 200, the `x-backend` header, the same name
as the body; see backend.py). With
--migrate-after K, each connection moves after its K-th request to a new
local UDP port and to the next connection ID the server issued, as a client
does when its NAT rebinds or it changes networks.

Prints "established" once every handshake ended (made or failed), then one
JSON object a line per connection when it ends:
  {"conn": 3, "served_by": ["backend-2", ...], "ports": [40001, 51234],
   "cids": ["1f0b02...", "1f0b02..."], "error": null}
"ports" and "cids" are the local port and the connection ID the client
addressed the server by, before and (when it migrated) after the move.
"error" says why a connection ended early: a request that timed out or was
not answered as above, or a connection that could not be made. Exits 0 when
every connection made all its requests, 1 otherwise.
"""

import argparse
import asyncio
import json
import os
import signal
import socket
import ssl
import sys

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, QuicEvent


class BadResponse(Exception):
    """A response that does not name one backend the way backend.py does."""


class Http3Client(QuicConnectionProtocol):
    """Sends HTTP/3 GET requests on one QUIC connection."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._http = H3Connection(self._quic)
        # Per request stream: (headers, body, future of the whole response).
        self._responses: dict[int, tuple[list, bytearray, asyncio.Future]] = {}

    async def get(self, authority: str, path: str) -> tuple[dict, bytes]:
        """GETs `path`: the response's headers and body."""
        stream_id = self._quic.get_next_available_stream_id()
        self._http.send_headers(
            stream_id,
            [
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", authority.encode()),
                (b":path", path.encode()),
            ],
            end_stream=True,
        )
        done = self._loop.create_future()
        self._responses[stream_id] = ([], bytearray(), done)
        self.transmit()
        try:
            return await done
        finally:
            self._responses.pop(stream_id, None)

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ConnectionTerminated):
            for _, _, done in self._responses.values():
                if not done.done():
                    done.set_exception(ConnectionError(f"connection closed: {event.reason_phrase}"))
        for h3_event in self._http.handle_event(event):
            self.received(h3_event)

    def received(self, event: H3Event) -> None:
        if not isinstance(event, (HeadersReceived, DataReceived)):
            return
        response = self._responses.get(event.stream_id)
        if response is None:
            return
        headers, body, done = response
        if isinstance(event, HeadersReceived):
            headers.extend(event.headers)
        else:
            body.extend(event.data)
        if event.stream_ended and not done.done():
            done.set_result((dict(headers), bytes(body)))


def local_port(protocol: QuicConnectionProtocol) -> int:
    return protocol._transport.get_extra_info("sockname")[1]


def peer_cid(protocol: QuicConnectionProtocol) -> str:
    return protocol._quic._peer_cid.cid.hex()


async def migrate(protocol: QuicConnectionProtocol) -> None:
    """Moves the connection to a new local port and the next peer connection
    ID (RFC 9000 section 9.5: a new path uses a new connection ID)."""
    old = protocol._transport
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", 0, 0, 0))
    loop = asyncio.get_running_loop()
    # The protocol takes the new transport in connection_made.
    await loop.create_datagram_endpoint(lambda: protocol, sock=sock)
    protocol._quic.change_connection_id()
    protocol.transmit()
    old.close()


async def request(protocol: Http3Client, authority: str, timeout: float) -> str:
    """One GET: the backend that answered it."""
    headers, body = await asyncio.wait_for(protocol.get(authority, "/which"), timeout)
    status = headers.get(b":status", b"").decode()
    backend = headers.get(b"x-backend", b"").decode()
    if status != "200" or not backend or body.decode().strip() != backend:
        raise BadResponse(f"status {status!r}, x-backend {backend!r}, body {body[:80]!r}")
    return backend


async def one_connection(i, args, established, all_established) -> dict:
    record = {"conn": i, "served_by": [], "ports": [], "cids": [], "error": None}
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.idle_timeout = args.timeout_s * 4
    host, port = args.vip
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    try:
        async with asyncio.timeout(args.timeout_s):
            cm = connect(host, port, configuration=config, create_protocol=Http3Client)
            protocol = await cm.__aenter__()
    except (Exception, asyncio.TimeoutError) as e:
        record["error"] = f"handshake: {type(e).__name__} {e}".strip()
        established.append(False)
        if len(established) == args.connections:
            all_established.set()
        return record
    try:
        established.append(True)

        if len(established) == args.connections:
            all_established.set()
        await all_established.wait()
        record["ports"].append(local_port(protocol))
        record["cids"].append(peer_cid(protocol))
        for k in range(args.requests):
            if k and args.interval_ms:
                await asyncio.sleep(args.interval_ms / 1000)
            if args.migrate_after and k == args.migrate_after:
                await migrate(protocol)
                record["ports"].append(local_port(protocol))
                record["cids"].append(peer_cid(protocol))
            try:
                record["served_by"].append(await request(protocol, authority, args.timeout_s))
            except asyncio.TimeoutError:
                record["error"] = f"request {k + 1} timed out after {args.timeout_s} s"
                break
            except Exception as e:
                record["error"] = f"request {k + 1}: {type(e).__name__} {e}"
                break
    finally:
        try:
            async with asyncio.timeout(2):
                await cm.__aexit__(None, None, None)
        except (Exception, asyncio.TimeoutError):
            pass
    return record


def parse_vip(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--vip {text!r}: write it as ADDRESS:PORT")
    return host, int(port)


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vip", type=parse_vip, required=True)
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--requests", type=int, default=1)
    p.add_argument("--interval-ms", type=int, default=0)
    p.add_argument("--migrate-after", type=int, default=0, help="0: never")
    p.add_argument("--timeout-s", type=float, default=3.0, help="per handshake and request")
    args = p.parse_args()
    if args.connections < 1 or args.requests < 1:
        sys.exit("client.py: --connections and --requests must be at least 1")
    if args.migrate_after >= args.requests:
        sys.exit("client.py: --migrate-after must be below --requests (0 to never migrate)")

    established: list[bool] = []
    all_established = asyncio.Event()

    async def run(i: int) -> dict:
        return await one_connection(i, args, established, all_established)

    async def announce() -> None:
        await all_established.wait()
        print("established", flush=True)

    announcer = asyncio.ensure_future(announce())
    ok = True
    for done in asyncio.as_completed([run(i) for i in range(args.connections)]):
        record = await done
        ok = ok and record["error"] is None
        print(json.dumps(record), flush=True)
    await announcer
    return 0 if ok else 1


if __name__ == "__main__":
    # Interrupted: stop at once, with no report (the connections' records
    # would be incomplete).
    signal.signal(signal.SIGINT, lambda *_: os._exit(130))
    sys.exit(asyncio.run(main()))
