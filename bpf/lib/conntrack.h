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

#include <linux/errno.h>
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

/* A reading of the coarse clock in ticks. A packet that may install an
 * entry reads the clock once and takes both the entry's created_ns and its
 * atime from that reading: no second, finer clock read per new connection. */
static __always_inline __u32 ticks_of(__u64 coarse_ns)
{
	return (__u32)(coarse_ns >> WEIR_TICK_SHIFT);
}

/* The coarse clock's last reading and the jiffies count it was taken at,
 * shared by every CPU. The coarse clock moves only when the kernel's tick
 * moves jiffies, so a packet in the jiffy of the last reading takes that
 * reading: one load the verifier inlines (bpf_jiffies64) instead of a
 * helper call per packet. Two CPUs refreshing it at once may leave the
 * previous jiffy's reading for the current one: the clock then lags by a
 * tick or two, within its own resolution (1-4 ms), which the idle
 * timeouts (seconds) and conn_expired()'s tolerance of an atime ahead of
 * `now` absorb. */
struct coarse_clock {
	__u64 jiffies;
	__u64 ns;
};
struct coarse_clock coarse_clock SEC(".data.clock") = {};

static __always_inline __u64 coarse_now_ns(void)
{
	__u64 jiffies = bpf_jiffies64();
	__u64 cached = coarse_clock.jiffies, ns;

	/* Jiffies read before the reading, and written after it: a CPU that
	 * sees a jiffy's count sees its reading (x86 keeps loads in order and
	 * stores in order). */
	barrier();
	ns = coarse_clock.ns;
	if (cached == jiffies && ns)
		return ns;
	ns = bpf_ktime_get_coarse_ns();
	coarse_clock.ns = ns;
	barrier();
	coarse_clock.jiffies = jiffies;
	return ns;
}

static __always_inline __u32 now_ticks(void)
{
	return ticks_of(coarse_now_ns());
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

/* Refreshes the entry's atime if it is ATIME_REFRESH old (at most once a
 * second per connection). */
static __always_inline void conn_touch(struct weir_conn *c, __u32 now)
{
	if (now - c->atime >= ATIME_REFRESH)
		c->atime = now;
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

/* Fills the reverse entry of a nat connection from its client's packet:
 * the VIP to restore and the L2 path the packet came by, which the replies
 * leave by. */
static __always_inline void fill_reverse(struct xdp_md *ctx, const struct packet *pkt,
					 __u32 vip_id, struct weir_rev_nat *rev)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return;
	__builtin_memcpy(rev->vip, pkt->key.dst, sizeof(rev->vip));
	rev->vport = pkt->key.dport;
	rev->family = pkt->key.family;
	rev->vip_id = vip_id;
	rev->ifindex = ctx->ingress_ifindex;
	__builtin_memcpy(rev->client_mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(rev->lb_mac, eth->h_dest, ETH_ALEN);
}

/* Writes the reverse entry of a nat connection into rev_nat. Not inlined:
 * its key and value would otherwise sit on the caller's stack once per
 * call site, past BPF's 512 bytes. */
static __noinline void install_reverse(struct xdp_md *ctx, const struct packet *pkt,
				       const struct weir_dip *dip, __u32 vip_id)
{
	struct weir_flow_key rkey = {};
	struct weir_rev_nat rev = {};

	reverse_key(pkt, dip, &rkey);
	fill_reverse(ctx, pkt, vip_id, &rev);
	rev_update(&rkey, &rev);
}

/* install_half_open()'s vip_id for a connection with no reverse entry. */
#define NO_REVERSE ((__u32)-1)

/* Inserts a half-open connection: `entry`, and with a `vip_id` (nat mode)
 * the reverse entry its DIP's replies use until the handshake is done, in
 * one entry. With BPF_NOEXIST in `flags` an entry already there stays and
 * the result is -EEXIST (not counted). Not inlined: the 80-byte value gets
 * a frame of its own rather than a place on the caller's. */
static __noinline long install_half_open(struct xdp_md *ctx, const struct packet *pkt,
					 const struct weir_conn *entry, __u32 vip_id, __u64 flags)
{
	struct weir_half_open half = {};
	long rc;

	half.conn = *entry;
	if (vip_id != NO_REVERSE)
		fill_reverse(ctx, pkt, vip_id, &half.rev);
	rc = bpf_map_update_elem(&half_open, &pkt->key, &half, flags);
	if (rc == 0)
		stat_inc(WEIR_STAT_HALF_OPEN_NEW);
	else if (rc != -EEXIST)
		stat_inc(WEIR_STAT_CONN_INSTALL_FAIL);
	return rc;
}

/* The half-open nat connection a reply with no reverse entry belongs to
 * (the SYN-ACK, before the client's ACK installs the reverse entry): the
 * client's tuple under each VIP the replying endpoint serves, whose entry
 * was dispatched to the address and port the reply comes from. Neither the
 * entry's age nor its DIP's removal is checked, as they are not for a reply
 * that matches a reverse entry: the sweeper removes old entries, and the
 * client's next packet finds out about the DIP. (A slot reused by another
 * address meanwhile no longer matches: that reply is dropped.) NULL when
 * there is none. Not inlined: its key would count against the caller's
 * frame. */
static __noinline struct weir_half_open *half_open_of_reply(const struct packet *pkt,
							     const struct weir_nat_endpoint *ep)
{
	struct weir_flow_key fkey = {};
	__u32 count = ep->count, id;

	__builtin_memcpy(fkey.src, pkt->key.dst, sizeof(fkey.src));
	fkey.sport = pkt->key.dport;
	fkey.proto = pkt->key.proto;
	fkey.family = pkt->key.family;
	for (__u32 i = 0; i < WEIR_ENDPOINT_VIPS && i < count; i++) {
		struct weir_half_open *half;
		struct weir_dip *dip;

		__builtin_memcpy(fkey.dst, ep->vips[i].addr, sizeof(fkey.dst));
		fkey.dport = ep->vips[i].port;
		half = bpf_map_lookup_elem(&half_open, &fkey);
		if (!half)
			continue;
		id = half->conn.dip_id;
		dip = bpf_map_lookup_elem(&dips, &id);
		if (dip && dip->addr[0] == pkt->key.src[0] && dip->addr[1] == pkt->key.src[1] &&
		    dip->addr[2] == pkt->key.src[2] && dip->addr[3] == pkt->key.src[3] &&
		    (dip->port ? dip->port : fkey.dport) == pkt->key.sport)
			return half;
	}
	return NULL;
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
