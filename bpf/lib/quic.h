/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * quic.h - routing QUIC by the server ID in the destination connection ID
 * (draft-ietf-quic-load-balancers, plaintext algorithm).
 *
 * A DIP of a QUIC VIP issues connection IDs whose first octet carries the
 * VIP's config rotation codepoint in its top three bits and whose next
 * quic_sid_len octets are the DIP's server ID. A packet whose DCID carries
 * a server ID a live DIP of the VIP owns goes to that DIP, whatever its
 * client address and port: a connection survives migration, NAT
 * rebinding, table changes and drains. Anything else falls back to the
 * 5-tuple connection table like any UDP datagram: a client's first
 * packets (Initial, 0-RTT, whose DCID the client chose), version
 * negotiation, CIDs of another config rotation, too short or malformed
 * headers, and server IDs no live DIP owns; the last are counted as
 * unknown when the DCID must have been chosen by a server (a short header,
 * a Handshake packet), since they mean a removed DIP or a backend that
 * encodes the wrong ID.
 *
 * In nat a routed packet also needs the 5-tuple entry of its client
 * address, whose reverse entry un-NATs the replies; that lookup comes
 * first. When the entry's DIP owns the packet's server ID (quic_sid_owners,
 * an array slot, not a hash lookup), the packet goes there with the one
 * table lookup a UDP hit makes: an established connection on an address it
 * has used before. Otherwise (a new address after migration or rebinding,
 * an entry another connection left, a server ID that moved) the ID's owner
 * is looked up in quic_server_ids and the entry is written for it.
 *
 * A client's Initial and 0-RTT packets carry a DCID the client chose, the
 * same in every retransmission of its first flight; after the server's
 * first Initial it uses the server's CIDs. The 5-tuple entry such a packet
 * opens keeps a hash of that DCID (weir_conn.quic_handshake), so that an
 * Initial or 0-RTT with another one, on a client address and port whose
 * entry is alive, is told apart as a new connection, as a SYN on a reused
 * TCP tuple is: the entry goes and the current table decides.
 */
#ifndef WEIR_QUIC_LIB_H
#define WEIR_QUIC_LIB_H

#include "weir_quic.h"
#include "conntrack.h"
#include "encap.h"
#include "flow_table.h"
#include "hash.h"
#include "maps.h"
#include "parse.h"

#define QUIC_LONG_HEADER 0x80
#define QUIC_LONG_TYPE_MASK 0x30
#define QUIC_V1 0x00000001
#define QUIC_V2 0x6b3343cf
/* Long header: flags, version (4), DCID length, DCID. */
#define QUIC_LONG_DCID_OFF 6
/* Short header: flags, DCID. */
#define QUIC_SHORT_DCID_OFF 1

/* weir_lb's flow-hash seed (weir_lb.bpf.c): it also seeds the hash of a
 * handshake's DCID, so that a client cannot choose DCIDs that collide. */
extern const volatile __u32 cfg_hash_seed;

enum quic_verdict {
	QUIC_NOT_QUIC = 0, /* not a QUIC VIP */
	QUIC_ROUTED,
	QUIC_FALLBACK,
	QUIC_UNKNOWN,      /* a fallback whose server ID no live DIP owns */
};

/* Whether a long header with these first octet and version is a client's
 * Initial or 0-RTT packet of QUIC v1 or v2, whose DCID, until the server's
 * first Initial, is the one the client chose for the handshake. */
static __always_inline int quic_opens_handshake(__u8 first, __u32 version)
{
	__u8 type = (first & QUIC_LONG_TYPE_MASK) >> 4;

	if (version == QUIC_V1)
		return type == 0 || type == 1;
	if (version == QUIC_V2)
		return type == 1 || type == 2;
	return 0;
}

/* Whether the DCID of a long header with these first octet and version
 * may have been chosen by the client: an Initial or 0-RTT packet of QUIC
 * v1 or v2, or any packet of a version weir does not know. */
static __always_inline int quic_client_chosen(__u8 first, __u32 version)
{
	__u8 type = (first & QUIC_LONG_TYPE_MASK) >> 4;

	if (version == QUIC_V1)
		return type == 0 || type == 1; /* Initial, 0-RTT */
	if (version == QUIC_V2)
		return type == 1 || type == 2; /* Initial, 0-RTT (RFC 9369) */
	return 1;
}

static __always_inline void quic_count(void *map, __u32 idx, __u32 verdict)
{
	struct weir_quic_counters *c = bpf_map_lookup_elem(map, &idx);

	if (!c)
		return;
	if (verdict == QUIC_ROUTED) {
		c->cid_routed += 1;
		return;
	}
	c->cid_fallback += 1;
	if (verdict == QUIC_UNKNOWN)
		c->cid_unknown += 1;
}

static __always_inline void quic_count_reused(void *map, __u32 idx)
{
	struct weir_quic_counters *c = bpf_map_lookup_elem(map, &idx);

	if (c)
		c->reused_tuple += 1;
}

/* Reads the server ID from the UDP payload of `pkt` into `key`; returns
 * QUIC_ROUTED when there is one, QUIC_UNKNOWN when there is one in a DCID
 * a server chose, QUIC_FALLBACK when there is none. A client's Initial or
 * 0-RTT sets `*handshake_dcid` to its DCID's length plus one. */
static __always_inline __u32 quic_server_id(void *data, void *data_end,
					     const struct packet *pkt,
					     const struct weir_vip *vip,
					     struct weir_quic_sid_key *key, int *server_chosen,
					     __u32 *handshake_dcid)
{
	__u8 *p = data + ((pkt->l4_off + sizeof(struct udphdr)) & PKT_OFF_MASK);
	__u32 sid_len = vip->quic_sid_len, dcid_off, dcid_len;
	__u8 *dcid;

	if ((void *)(p + QUIC_LONG_DCID_OFF) > data_end)
		goto short_only;
	if (p[0] & QUIC_LONG_HEADER) {
		__u32 version = ((__u32)p[1] << 24) | ((__u32)p[2] << 16) |
				((__u32)p[3] << 8) | p[4];

		/* Version negotiation comes from servers; a longer DCID is no
		 * QUIC v1 or v2 one; a DCID past the datagram is a truncated
		 * packet. */
		if (version == 0 || pkt->payload_len < QUIC_LONG_DCID_OFF)
			return QUIC_FALLBACK;
		dcid_len = p[5];
		if (dcid_len > WEIR_QUIC_CID_MAX ||
		    pkt->payload_len < QUIC_LONG_DCID_OFF + dcid_len)
			return QUIC_FALLBACK;
		*server_chosen = !quic_client_chosen(p[0], version);
		if (quic_opens_handshake(p[0], version))
			*handshake_dcid = dcid_len + 1;
		dcid_off = QUIC_LONG_DCID_OFF;
		goto dcid;
	}
short_only:
	if ((void *)(p + 1) > data_end || pkt->payload_len < 1 || (p[0] & QUIC_LONG_HEADER))
		return QUIC_FALLBACK;
	/* A short header does not say its DCID's length: the server ID's
	 * octets must be there, whatever follows. */
	dcid_len = pkt->payload_len - QUIC_SHORT_DCID_OFF;
	*server_chosen = 1;
	dcid_off = QUIC_SHORT_DCID_OFF;
dcid:
	if (dcid_len < 1 + sid_len || pkt->payload_len < dcid_off + 1 + sid_len)
		return QUIC_FALLBACK;
	dcid = p + dcid_off;
	if ((void *)(dcid + 1) > data_end)
		return QUIC_FALLBACK;
	if (dcid[0] >> 5 != vip->quic_config_id)
		return QUIC_FALLBACK;
	/* A bounded loop: the verifier checks each octet's read. */
	for (__u32 i = 0; i < WEIR_QUIC_SID_MAX && i < sid_len; i++) {
		if ((void *)(dcid + 2 + i) > data_end)
			return QUIC_FALLBACK;
		key->sid[i] = dcid[1 + i];
	}
	return QUIC_ROUTED;
}

/* The handshake a client's Initial or 0-RTT belongs to: Murmur3-32, seeded
 * as the flow hash, over the five little-endian words of its DCID (the
 * `len` octets at the long header's DCID offset, zero-padded to 20), then
 * the length; the low 24 bits, 0 taken as 1 (0 means none in an entry).
 * weir_core::quic_lb::handshake_id computes the same. 0 when the DCID is
 * not all in the packet. */
static __always_inline __u32 quic_handshake_id(void *data, void *data_end,
					       const struct packet *pkt, __u32 len)
{
	__u8 *dcid = data + ((pkt->l4_off + sizeof(struct udphdr) + QUIC_LONG_DCID_OFF) &
			     PKT_OFF_MASK);
	__u32 w[WEIR_QUIC_CID_MAX / 4] = {}, h = cfg_hash_seed;
	__u8 *octets = (__u8 *)w;

	for (__u32 i = 0; i < WEIR_QUIC_CID_MAX && i < len; i++) {
		if ((void *)(dcid + i + 1) > data_end)
			return 0;
		octets[i] = dcid[i];
	}
#pragma unroll
	for (int i = 0; i < WEIR_QUIC_CID_MAX / 4; i++)
		h = murmur3_block(h, w[i]);
	h = fmix32(h ^ len) & 0xffffff;
	return h ? h : 1;
}

/* The handshake recorded in a 5-tuple entry (0: none). */
static __always_inline __u32 quic_entry_handshake(const struct weir_conn *conn)
{
	return conn->quic_handshake[0] | (__u32)conn->quic_handshake[1] << 8 |
	       (__u32)conn->quic_handshake[2] << 16;
}

/* Where quic_route() sends a routed packet; for one it does not route, the
 * handshake a client's Initial or 0-RTT belongs to (quic_handshake_id()),
 * else 0. */
struct quic_target {
	struct weir_dip *dip;
	__u32 dip_id;
	__u32 handshake;
};

static __always_inline int quic_sid_key_equal(const struct weir_quic_sid_key *a,
					      const struct weir_quic_sid_key *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	for (__u32 i = 0; i < sizeof(*a) / sizeof(__u32); i++)
		if (x[i] != y[i])
			return 0;
	return 1;
}

/* The DIP of `conn` (a packet's 5-tuple entry) if it is live and owns the
 * server ID in `key`, else NULL. */
static __always_inline struct weir_dip *quic_entry_owner(const struct weir_conn *conn,
							 const struct weir_quic_sid_key *key)
{
	__u32 id = conn->dip_id;
	struct weir_quic_sid_owner *owner = bpf_map_lookup_elem(&quic_sid_owners, &id);

	if (!owner || !owner->owned || owner->dip_gen != conn->dip_gen ||
	    !quic_sid_key_equal(&owner->key, key))
		return NULL;
	return conn_dip(conn);
}

/* Routes a packet to a QUIC VIP by its connection ID: returns QUIC_ROUTED
 * with the DIP and its slot in `*to`, or the kind of fallback (counted for
 * the VIP; the caller counts it for the DIP the 5-tuple table picks).
 * `conn` is the packet's 5-tuple entry, or NULL: when its DIP owns the
 * server ID, quic_server_ids is not looked up. Not inlined: the header
 * walk's key and spills get a frame of their own, off the caller's, which
 * its deepest callee leaves no room in, and only QUIC VIPs' packets run
 * it. */
static __noinline __u32 quic_route(struct xdp_md *ctx, const struct packet *pkt,
				   const struct weir_vip *vip, const struct weir_conn *conn,
				   struct quic_target *to)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct weir_quic_sid_key key = { .vip_id = vip->vip_id };
	struct weir_quic_route *route;
	struct weir_dip *dip;
	int server_chosen = 0;
	__u32 verdict, handshake_dcid = 0;

	verdict = quic_server_id(data, data_end, pkt, vip, &key, &server_chosen,
				 &handshake_dcid);
	if (verdict == QUIC_ROUTED && conn) {
		dip = quic_entry_owner(conn, &key);
		if (dip) {
			to->dip = dip;
			to->dip_id = conn->dip_id;
			quic_count(&dip_quic, conn->dip_id, QUIC_ROUTED);
			goto count;
		}
	}
	if (verdict == QUIC_ROUTED) {
		route = bpf_map_lookup_elem(&quic_server_ids, &key);
		dip = route ? bpf_map_lookup_elem(&dips, &route->dip_id) : NULL;
		if (dip && (dip->flags & WEIR_DIP_F_LIVE) && dip->gen == route->dip_gen &&
		    (dip->family == pkt->key.family || is_encap_mode(vip->mode))) {
			to->dip = dip;
			to->dip_id = route->dip_id;
			quic_count(&dip_quic, route->dip_id, QUIC_ROUTED);
		} else {
			/* A removed DIP's IDs are reported, never re-routed by ID. */
			verdict = route || server_chosen ? QUIC_UNKNOWN : QUIC_FALLBACK;
		}
	}
count:
	quic_count(&vip_quic, vip->vip_id, verdict);
	if (verdict != QUIC_ROUTED && handshake_dcid)
		to->handshake = quic_handshake_id(data, data_end, pkt, handshake_dcid - 1);
	return verdict;
}

/* A client's Initial or 0-RTT that the table routes, of handshake
 * `handshake`: `entry`, balance()'s zeroed scratch entry, records it for
 * the entry a dispatch writes. When `conn`, its 5-tuple's entry, is live
 * and was opened by another handshake (or by none: an entry a routed
 * packet wrote), the packet is a new connection on a reused address and
 * port: the entry goes, its reverse entry with it, and the current table
 * decides (drains and weights hold), as for a SYN on a reused TCP tuple;
 * counted for the VIP and for the DIP the entry named. Returns 1 then. The
 * same handshake, a retransmission, keeps its entry and DIP; an expired or
 * stale entry is left to balance()'s rules. Not inlined: only a client's
 * first flight runs it. */
static __noinline int quic_reused_tuple(const struct packet *pkt, const struct weir_vip *vip,
					const struct weir_conn *conn, struct weir_conn *entry,
					__u32 handshake)
{
	struct weir_dip *dip;
	__u32 dip_id;

	entry->quic_handshake[0] = handshake;
	entry->quic_handshake[1] = handshake >> 8;
	entry->quic_handshake[2] = handshake >> 16;
	if (!conn || quic_entry_handshake(conn) == handshake)
		return 0;
	dip = conn_dip(conn);
	if (!dip || conn_expired(conn, pkt->key.proto, now_ticks()))
		return 0;
	dip_id = conn->dip_id;
	stat_inc(WEIR_STAT_CONN_REUSED);
	quic_count_reused(&vip_quic, vip->vip_id);
	quic_count_reused(&dip_quic, dip_id);
	conn_forget(pkt, dip, vip->mode == WEIR_MODE_NAT);
	return 1;
}

/* Writes the 5-tuple entry of a nat client address whose packet was routed
 * by its connection ID, and its reverse entry, in place of `old` (NULL, an
 * expired entry, or the entry of another connection that had the same
 * address and port, whose reverse entry goes with it). `entry` is the
 * caller's zeroed scratch entry with the routed DIP's slot, generation and
 * the time filled in. The entry has no table version (0): no table
 * dispatched it. It is not announced to other nodes (each routes the ID the
 * same way) and not counted as a new connection: the connection is the
 * QUIC one, which may have had other addresses before. Not inlined: it runs
 * once per client address, and its keys would count against the caller's
 * frame. */
static __noinline void quic_nat_install(struct xdp_md *ctx, const struct packet *pkt,
					const struct weir_conn *old, struct weir_conn *entry,
					__u32 vip_id)
{
	__u32 id = entry->dip_id;
	struct weir_dip *dip = bpf_map_lookup_elem(&dips, &id);

	if (!dip)
		return;
	if (old && old->dip_id != id)
		conn_forget(pkt, conn_dip(old), 1);
	entry->created_ns = bpf_ktime_get_ns();
	if (conn_update(&pkt->key, entry) < 0) {
		stat_inc(WEIR_STAT_CONN_INSTALL_FAIL);
		return;
	}
	install_reverse(ctx, pkt, dip, vip_id);
}

/* A nat packet routed by its connection ID to `dip`: its client address
 * (a migrated client's new one) needs a reverse entry for the replies. It
 * is kept the way a UDP datagram's is: `conn`, the packet's 5-tuple entry
 * (or NULL), is refreshed when it names `dip` (as it does when quic_route()
 * found the DIP through it); only a new address (or an expired entry, or
 * one another connection on the same address and port left to another
 * DIP) writes the entry and its reverse entry. The reverse
 * entry then ages with the 5-tuple entry (the sweeper deletes both), and a
 * reply whose reverse entry was evicted restores it from the 5-tuple entry
 * (reverse_restore.h), as a UDP connection's does. */
static __always_inline void quic_nat_track(struct xdp_md *ctx, const struct packet *pkt,
					   const struct weir_dip *dip, __u32 dip_id, __u32 vip_id,
					   __u32 now, struct weir_conn *conn,
					   struct weir_conn *entry)
{
	if (conn && conn->dip_id == dip_id && conn->dip_gen == dip->gen &&
	    !conn_expired(conn, pkt->key.proto, now)) {
		conn_touch(conn, now);
		return;
	}
	entry->dip_id = dip_id;
	entry->dip_gen = dip->gen;
	entry->atime = now;
	quic_nat_install(ctx, pkt, conn, entry, vip_id);
}

#endif /* WEIR_QUIC_LIB_H */
