"""QUIC-LB plaintext connection IDs (draft-ietf-quic-load-balancers).

A connection ID is: a first octet with the config rotation codepoint in its
top three bits and the ID's length minus one in its low five (the draft's
length self-description), then the server ID, then a random nonce. Every
load balancer with the same configuration routes it to the same server.
"""

import os

# aioquic's short-header parser reads the connection ID with this length.
CID_LEN = 8
# The draft asks for at least four octets of nonce.
MIN_NONCE = 4


def parse_server_id(text: str) -> bytes:
    """A server ID as weir's configuration writes it: hex, with or without 0x."""
    digits = text[2:] if text.lower().startswith("0x") else text
    try:
        sid = bytes.fromhex(digits)
    except ValueError:
        raise ValueError(f"server ID {text!r} is not hex (write it as in weir's config, e.g. 0b01)")
    if not 1 <= len(sid) <= CID_LEN - 1 - MIN_NONCE:
        raise ValueError(
            f"server ID {text!r} has {len(sid)} octets; these connection IDs of "
            f"{CID_LEN} octets hold 1 to {CID_LEN - 1 - MIN_NONCE}"
        )
    return sid


def encode(config_id: int, server_id: bytes) -> bytes:
    """A fresh connection ID carrying `server_id` under `config_id`."""
    if not 0 <= config_id <= 6:
        raise ValueError(f"config_id {config_id} is not a routable codepoint (0 to 6)")
    first = (config_id << 5) | (CID_LEN - 1)
    return bytes([first]) + server_id + os.urandom(CID_LEN - 1 - len(server_id))


def decode(cid: bytes, server_id_len: int) -> tuple[int, bytes]:
    """The (config_id, server_id) a connection ID carries."""
    return cid[0] >> 5, cid[1 : 1 + server_id_len]
