/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * reverse_restore.h - a nat reply whose reverse entry is gone. The reverse
 * entry lives in its own LRU table and may be evicted apart from its
 * connection; rather than re-check it from the client's direction (a second
 * table lookup on the hit path of every connection that has been idle), the
 * reply that misses it finds its connection and writes it back. Only replies
 * of established connections whose reverse entry is lost pay: they look up
 * the client's tuple under each VIP their endpoint serves, as a SYN-ACK does
 * in the half-open table, and ask the FIB for the way back to the client.
 */
#ifndef WEIR_REVERSE_RESTORE_H
#define WEIR_REVERSE_RESTORE_H

#include "conntrack.h"
#include "flow_table.h"
#include "forward.h"
#include "vip_match.h"

/* Whether `dip` is the endpoint a reply to client tuple `fkey` comes from. */
static __always_inline int dip_sent_reply(const struct weir_dip *dip, const struct packet *pkt,
					  const struct weir_flow_key *fkey)
{
	return dip->addr[0] == pkt->key.src[0] && dip->addr[1] == pkt->key.src[1] &&
	       dip->addr[2] == pkt->key.src[2] && dip->addr[3] == pkt->key.src[3] &&
	       (dip->port ? dip->port : fkey->dport) == pkt->key.sport;
}

/* The way back to the client of a reply: the egress, the client's next hop
 * and this host's MAC on it, from the FIB. 0 on success. */
static __always_inline int route_to_client(struct xdp_md *ctx, const struct packet *pkt,
					   struct weir_rev_nat *rev)
{
	struct bpf_fib_lookup fib = {};

	fib.family = pkt->key.family == WEIR_AF_INET6 ? AF_INET6 : AF_INET;
	fib.ifindex = ctx->ingress_ifindex;
	if (pkt->key.family == WEIR_AF_INET6)
		__builtin_memcpy(fib.ipv6_dst, pkt->key.dst, 16);
	else
		fib.ipv4_dst = pkt->key.dst[0];
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return -1;
	rev->ifindex = fib.ifindex;
	__builtin_memcpy(rev->client_mac, fib.dmac, ETH_ALEN);
	__builtin_memcpy(rev->lb_mac, fib.smac, ETH_ALEN);
	return 0;
}

/* Writes back the reverse entry of the established nat connection a reply
 * without one belongs to: the connection is the client's tuple under one of
 * the VIPs of the replying endpoint `ep`, with a live entry dispatched to
 * that endpoint. Returns the entry in rev_nat, or NULL when there is no
 * such connection or no route back to its client. Not inlined: its keys,
 * the entry and the FIB query would count against the caller's frame. */
static __noinline struct weir_rev_nat *restore_reverse(struct xdp_md *ctx,
							const struct packet *pkt,
							const struct weir_nat_endpoint *ep)
{
	struct weir_flow_key fkey = {};
	struct weir_rev_nat rev = {};
	__u32 count = ep->count, now = now_ticks(), i;

	__builtin_memcpy(fkey.src, pkt->key.dst, sizeof(fkey.src));
	fkey.sport = pkt->key.dport;
	fkey.proto = pkt->key.proto;
	fkey.family = pkt->key.family;
	/* Not unrolled: each round inlines a table lookup of both families. */
#pragma clang loop unroll(disable)
	for (i = 0; i < WEIR_ENDPOINT_VIPS && i < count; i++) {
		struct weir_conn *conn;
		struct weir_dip *dip;

		__builtin_memcpy(fkey.dst, ep->vips[i].addr, sizeof(fkey.dst));
		fkey.dport = ep->vips[i].port;
		conn = conn_lookup(&fkey);
		if (!conn || conn_expired(conn, fkey.proto, now))
			continue;
		dip = conn_dip(conn);
		if (dip && dip_sent_reply(dip, pkt, &fkey))
			break;
	}
	if (i >= WEIR_ENDPOINT_VIPS || i >= count)
		return NULL;
	/* A block of its own: the key's slot is reused by the FIB query's. */
	{
		struct weir_vip_key vkey = {};
		struct weir_vip *vip;

		__builtin_memcpy(vkey.addr, fkey.dst, sizeof(vkey.addr));
		vkey.port = fkey.dport;
		vkey.proto = fkey.proto;
		vkey.family = fkey.family;
		vip = vip_match(&vkey);
		if (!vip || vip->mode != WEIR_MODE_NAT)
			return NULL;
		rev.vip_id = vip->vip_id;
	}
	__builtin_memcpy(rev.vip, fkey.dst, sizeof(rev.vip));
	rev.vport = fkey.dport;
	rev.family = fkey.family;
	if (route_to_client(ctx, pkt, &rev) < 0 || rev_update(&pkt->key, &rev) < 0)
		return NULL;
	return rev_lookup(&pkt->key);
}

#endif /* WEIR_REVERSE_RESTORE_H */
