/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * weir_quic.h - what the load balancer shares with Rust to route QUIC by
 * the server ID in the destination connection ID (QUIC-LB, plaintext
 * algorithm). A QUIC VIP is a UDP VIP whose weir_vip has a server ID
 * length; its DIPs' server IDs sit in `quic_server_ids` (lib/quic.h).
 */
#ifndef WEIR_QUIC_H
#define WEIR_QUIC_H

#include <linux/types.h>

/* QUIC-LB: a server ID is 1 to 15 octets, after the connection ID's first
 * octet, whose top three bits are the config rotation codepoint. */
#define WEIR_QUIC_SID_MAX 15
#define WEIR_QUIC_CONFIG_ID_MAX 6     /* 7 (0b111) marks an unroutable CID */
#define WEIR_QUIC_CID_MAX 20          /* QUIC v1's connection ID limit */

/* quic_server_ids key: a VIP and one of its DIPs' server IDs, the bytes
 * past the VIP's server ID length zero. */
struct weir_quic_sid_key {
	__u32 vip_id;
	__u8 sid[WEIR_QUIC_SID_MAX];
	__u8 pad;
};
_Static_assert(sizeof(struct weir_quic_sid_key) == 20, "weir_quic_sid_key size");

/* quic_server_ids value: the DIP slot that owns the server ID, and the
 * slot's generation when it was written (a reused slot is another DIP). */
struct weir_quic_route {
	__u32 dip_id;
	__u32 dip_gen;
};
_Static_assert(sizeof(struct weir_quic_route) == 8, "weir_quic_route size");

/* quic_sid_owners value, indexed by DIP slot: the server ID the slot's DIP
 * owns (quic_server_ids the other way round). A nat packet whose 5-tuple
 * entry names a DIP that owns the server ID in the packet's DCID goes to
 * it without a lookup in quic_server_ids (lib/quic.h). User space keeps
 * the two maps together: a slot whose ID moves or goes is cleared before
 * quic_server_ids changes, and written after. */
struct weir_quic_sid_owner {
	struct weir_quic_sid_key key; /* the ID, as quic_server_ids keys it */
	__u32 dip_gen;                /* the slot's generation that owns it */
	__u32 owned;                  /* 0: the slot owns no server ID */
};
_Static_assert(sizeof(struct weir_quic_sid_owner) == 28, "weir_quic_sid_owner size");

/* Per-CPU QUIC counters of a VIP (`vip_quic`) and of a DIP (`dip_quic`,
 * the packets that went to it). */
struct weir_quic_counters {
	__u64 cid_routed;   /* routed by the server ID in the DCID (also when
			     * the 5-tuple entry's DIP owns it and
			     * quic_server_ids was not looked up) */
	__u64 cid_fallback; /* no usable server ID: the 5-tuple connection table
			     * decided (includes cid_unknown) */
	__u64 cid_unknown;  /* a server-chosen DCID whose server ID no live DIP
			     * of the VIP owns (a removed DIP, a misconfigured
			     * backend): fell back too */
	__u64 reused_tuple; /* a client's Initial or 0-RTT of another handshake
			     * than the one that opened its live 5-tuple entry:
			     * a new connection on a reused address and port,
			     * dispatched anew (counted for the VIP and for the
			     * DIP the entry named) */
};
_Static_assert(sizeof(struct weir_quic_counters) == 32, "weir_quic_counters size");

#endif /* WEIR_QUIC_H */
