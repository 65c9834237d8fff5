/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * conntrack.h - the life of a connection entry: when it is created, found,
 * refreshed, promoted and forgotten. Entries age by idle time, with a
 * timeout per state (half-open, established, closing, closed; UDP), and a
 * TCP connection enters `conns` only once its handshake is done, so
 * half-open connections (a SYN flood) compete only among themselves in the
 * bounded `half_open` table. The loader sets the timeouts; `weir serve`
 * deletes expired entries in the background with the same clock and rules
 * (weir_dataplane::conntrack), and the data plane treats an expired entry it
 * meets as absent, so the two never disagree about a live connection.
 */
#ifndef WEIR_CONNTRACK_H
#define WEIR_CONNTRACK_H

#include "flow_table.h"
#include "maps.h"
#include "parse.h"
#include "stats.h"

#define SECS_TO_TICKS(s) ((__u32)(((__u64)(s) * 1000000000ULL) >> WEIR_TICK_SHIFT))

/* Idle timeouts per state (defaults as IPVS's: 15 min established, 2 min
 * closing, 5 min UDP); the loader writes the configured ones. */
const volatile struct weir_conn_timeouts cfg_timeouts = {
	.tcp_half_open = SECS_TO_TICKS(30),
	.tcp_established = SECS_TO_TICKS(900),
	.tcp_closing = SECS_TO_TICKS(120),
	.tcp_closed = SECS_TO_TICKS(10),
	.udp = SECS_TO_TICKS(300),
};

/* An entry's atime is rewritten at most once a second: a write per packet
 * would bounce the entry's cache line between CPUs for no gain. */
#define ATIME_REFRESH SECS_TO_TICKS(1)

static __always_inline __u32 now_ticks(void)
{
	return (__u32)(bpf_ktime_get_coarse_ns() >> WEIR_TICK_SHIFT);
}

static __always_inline __u32 conn_timeout(const struct weir_conn *c, __u8 proto)
{
	const __u8 both_fins = WEIR_CONN_F_FIN_CLIENT | WEIR_CONN_F_FIN_SERVER;
	__u8 f = c->close_flags;

	if (proto != IPPROTO_TCP)
		return cfg_timeouts.udp;
	if ((f & WEIR_CONN_F_RST) || (f & both_fins) == both_fins)
		return cfg_timeouts.tcp_closed;
	if (f)
		return cfg_timeouts.tcp_closing;
	return cfg_timeouts.tcp_established;
}

/* Idle past its state's timeout (wrapping arithmetic on 32-bit ticks;
 * timeouts are below 2^31 ticks). An atime ahead of `now` is not idle:
 * another CPU used the entry after this one read the clock. */
static __always_inline int conn_expired(const struct weir_conn *c, __u8 proto, __u32 now)
{
	return (__s32)(now - c->atime) > (__s32)conn_timeout(c, proto);
}

static __always_inline int half_open_expired(const struct weir_conn *c, __u32 now)
{
	return (__s32)(now - c->atime) > (__s32)cfg_timeouts.tcp_half_open;
}

/* Refreshes the entry's atime if it is ATIME_REFRESH old; returns whether
 * it did (at most once a second per connection). */
static __always_inline int conn_touch(struct weir_conn *c, __u32 now)
{
	if (now - c->atime < ATIME_REFRESH)
		return 0;
	c->atime = now;
	return 1;
}

/* Notes a FIN or RST seen in one direction (`fin` says which side's FIN
 * flag it is); the closing state's shorter timeout runs from now. */
static __always_inline void conn_note_close(struct weir_conn *c, __u8 tcp_flags, __u8 fin,
					    __u32 now)
{
	__u8 f = c->close_flags;

	if (tcp_flags & TCP_FLAG_RST)
		f |= WEIR_CONN_F_RST;
	if (tcp_flags & TCP_FLAG_FIN)
		f |= fin;
	if (f == c->close_flags)
		return;
	if (!c->close_flags)
		stat_inc(WEIR_STAT_CONN_CLOSING);
	c->close_flags = f;
	c->atime = now;
}

/* The DIP of an entry, if that slot still holds the DIP it was dispatched
 * to (else the DIP was removed). */
static __always_inline struct weir_dip *conn_dip(const struct weir_conn *c)
{
	__u32 id = c->dip_id;
	struct weir_dip *dip = bpf_map_lookup_elem(&dips, &id);

	if (dip && (dip->flags & WEIR_DIP_F_LIVE) && dip->gen == c->dip_gen)
		return dip;
	return NULL;
}

/* The tuple of the DIP's replies to a client packet dispatched to `dip`. */
static __always_inline void reverse_key(const struct packet *pkt, const struct weir_dip *dip,
					struct weir_flow_key *rkey)
{
	__builtin_memcpy(rkey->src, dip->addr, sizeof(rkey->src));
	__builtin_memcpy(rkey->dst, pkt->key.src, sizeof(rkey->dst));
	rkey->sport = dip->port ? dip->port : pkt->key.dport;
	rkey->dport = pkt->key.sport;
	rkey->proto = pkt->key.proto;
	rkey->family = pkt->key.family;
}

/* The client's tuple (client -> VIP) of a reply that matched `rev`. */
static __always_inline void forward_key_of_reply(const struct packet *pkt,
						 const struct weir_rev_nat *rev,
						 struct weir_flow_key *fkey)
{
	__builtin_memcpy(fkey->src, pkt->key.dst, sizeof(fkey->src));
	__builtin_memcpy(fkey->dst, rev->vip, sizeof(fkey->dst));
	fkey->sport = pkt->key.dport;
	fkey->dport = rev->vport;
	fkey->proto = pkt->key.proto;
	fkey->family = pkt->key.family;
}

/* Which table install_reverse() writes. */
enum rev_table {
	REV_ESTABLISHED, /* rev_nat/rev_nat4 (flow_table.h) */
	REV_HALF_OPEN,   /* half_open_rev, before the handshake is done */
};

/* Writes the reverse entry of a nat connection into `table`: the VIP to
 * restore and the L2 path the client's packet came by, which the reply
 * leaves by. Not inlined: its keys would otherwise sit on the caller's
 * stack once per call site, past BPF's 512 bytes. */
static __noinline void install_reverse(struct xdp_md *ctx, enum rev_table table,
					    const struct packet *pkt, const struct weir_dip *dip,
					    __u32 vip_id)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct weir_flow_key rkey = {};
	struct weir_rev_nat rev = {};
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return;
	reverse_key(pkt, dip, &rkey);
	__builtin_memcpy(rev.vip, pkt->key.dst, sizeof(rev.vip));
	rev.vport = pkt->key.dport;
	rev.family = pkt->key.family;
	rev.vip_id = vip_id;
	rev.ifindex = ctx->ingress_ifindex;
	__builtin_memcpy(rev.client_mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(rev.lb_mac, eth->h_dest, ETH_ALEN);
	if (table == REV_HALF_OPEN)
		bpf_map_update_elem(&half_open_rev, &rkey, &rev, BPF_ANY);
	else
		rev_update(&rkey, &rev);
}

/* Drops an established entry and, in nat mode, its reverse entry (when its
 * DIP is still known: a removed DIP's reverse entry just ages out). */
static __noinline void conn_forget(const struct packet *pkt, const struct weir_dip *dip,
					int nat)
{
	struct weir_flow_key rkey = {};

	conn_delete(&pkt->key);
	if (nat && dip) {
		reverse_key(pkt, dip, &rkey);
		rev_delete(&rkey);
	}
}

/* A FIN or RST of the DIP (nat replies): the forward entry learns it. */
static __always_inline void conn_note_server_close(const struct packet *pkt,
						   const struct weir_rev_nat *rev)
{
	struct weir_flow_key fkey = {};
	struct weir_conn *conn;

	if (pkt->key.proto != IPPROTO_TCP || !(pkt->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)))
		return;
	forward_key_of_reply(pkt, rev, &fkey);
	conn = conn_lookup(&fkey);
	if (conn)
		conn_note_close(conn, pkt->tcp_flags, WEIR_CONN_F_FIN_SERVER, now_ticks());
}

#endif /* WEIR_CONNTRACK_H */
