// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * weir_lb - the stateful layer-4 load balancer (XDP).
 *
 * Packets to a VIP look up the connection table: a hit is rewritten towards
 * its DIP; a miss is dispatched in-band by the AWFD tables and installed, with
 * no round trip to user space (HNLB II-A, Spotlight IV-B). In nat mode the
 * DIP's replies match the reverse table and are rewritten back to the VIP.
 * In ipip and gue mode the packet is encapsulated to the DIP (encap.h),
 * which replies to the client directly, as in dsr.
 * Everything else is passed to the kernel or dropped, as configured.
 *
 * That is the xdp tier (cfg_tier). In the software tier this program only
 * steers: VIP traffic and nat replies go to the AF_XDP workers, which keep
 * the connection table, dispatch and rewrite. In the hybrid tier (HNLB) the
 * connection table is the bounded fast table the workers fill: a hit is
 * forwarded here as in the xdp tier, anything else goes to the workers.
 * In both, SYNs reach the workers within a budget (admission.h), so a flood
 * of them cannot crowd out the packets of established connections.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "weir.h"
#include "lib/features.h"
#include "lib/parse.h"
#include "lib/maps.h"
#include "lib/stats.h"
#include "lib/hash.h"
#include "lib/dispatch.h"
#include "lib/conntrack.h"
#include "lib/nat.h"
#include "lib/forward.h"
#include "lib/encap.h"
#include "lib/telemetry.h"
#include "lib/software.h"
#include "lib/admission.h"
#include "lib/sync.h"
#include "lib/vip_match.h"
#include "lib/reverse_restore.h"
#include "lib/quic.h"

/* Load-time knobs, set by the loader from the configuration. */
const volatile __u32 cfg_not_vip_action = WEIR_ACT_PASS;
const volatile __u32 cfg_icmp_action = WEIR_ACT_PASS;
const volatile __u32 cfg_fragment_action = WEIR_ACT_PASS;
const volatile __u32 cfg_malformed_action = WEIR_ACT_DROP;
const volatile __u32 cfg_nonsyn_miss = WEIR_NONSYN_DISPATCH;
const volatile __u32 cfg_hash_seed = 0x77656972; /* "weir" */

/* Run-time switches in the program's .bss, which the control plane writes
 * while the program runs: a reload turns them on and off. */
volatile __u32 passive_telemetry_on = 0; /* 1: time nat requests (telemetry.h) */

/* Whether to time nat requests and replies now: only a program that
 * carries telemetry (features.h) reads the switch. */
static __always_inline int telemetry_on(void)
{
	return feature_on(WEIR_FEAT_TELEMETRY) && passive_telemetry_on;
}

static __always_inline int verdict(__u32 action, __u32 pass_stat, __u32 drop_stat)
{
	if (action == WEIR_ACT_DROP) {
		stat_inc(drop_stat);
		return XDP_DROP;
	}
	stat_inc(pass_stat);
	return XDP_PASS;
}

/* The verdict on a packet the parser did not find balanceable, as
 * configured. Not inlined: one call site for every such kind, and their
 * counters, out of the stream of the packets that are balanced. */
static __noinline int not_balanced(int parse_result)
{
	switch (parse_result) {
	case PARSE_NOT_IP:
		return verdict(cfg_not_vip_action, WEIR_STAT_PASS_NOT_IP, WEIR_STAT_DROP_NOT_VIP);
	case PARSE_ICMP:
		return verdict(cfg_icmp_action, WEIR_STAT_PASS_ICMP, WEIR_STAT_DROP_ICMP);
	case PARSE_FRAGMENT:
		return verdict(cfg_fragment_action, WEIR_STAT_PASS_FRAGMENT,
			       WEIR_STAT_DROP_FRAGMENT);
	case PARSE_OTHER_L4:
		return verdict(cfg_not_vip_action, WEIR_STAT_PASS_NOT_VIP, WEIR_STAT_DROP_NOT_VIP);
	default:
		return verdict(cfg_malformed_action, WEIR_STAT_PASS_MALFORMED,
			       WEIR_STAT_DROP_MALFORMED);
	}
}

/* Picks a DIP for a new connection from the VIP's current table and fills
 * `entry` for it, dated by the packet's reading of the coarse clock
 * (`now_ns`); NULL when the VIP has no available DIP. A DIP of the other
 * address family serves only a VIP that encapsulates. Not inlined: the
 * unrolled hash's spills would count against the caller's frame. */
static __noinline struct weir_dip *dispatch(const struct packet *pkt,
						 const struct weir_vip *vip,
						 struct weir_conn *entry, __u64 now_ns)
{
	__u32 dip_id, version, hash = weir_flow_hash(&pkt->key, cfg_hash_seed);
	struct weir_dip *dip;

	if (awfd_select(vip->vip_id, hash, &dip_id, &version) < 0)
		return NULL;
	dip = bpf_map_lookup_elem(&dips, &dip_id);
	if (!dip || !(dip->flags & WEIR_DIP_F_LIVE))
		return NULL;
	if (dip->family != pkt->key.family && !is_encap_mode(vip->mode))
		return NULL;
	entry->dip_id = dip_id;
	entry->dip_gen = dip->gen;
	entry->table_version = version;
	entry->created_ns = now_ns;
	entry->atime = ticks_of(now_ns);
	return dip;
}

/* What the handshake step decided, besides the DIP. */
struct handshake {
	__u64 now_ns; /* the packet's reading of the coarse clock */
	__u32 now;    /* the same in ticks */
	__u32 syn;
	__u32 dip_id;
	__u32 new_conn;  /* an entry was promoted to `conns` */
	__u32 drop_stat; /* with no DIP: the counter of the drop */
};

/* A TCP packet with no established entry. A SYN is dispatched by the
 * current table into the half-open table (a retransmitted SYN keeps the DIP
 * its first one got); the client's next packet promotes the entry to
 * `conns`. A non-SYN packet with no entry at all (a table lost across a
 * restart, a flow moved here) is dispatched as configured and goes through
 * the same half-open step. Returns the DIP, or NULL with `hs->drop_stat`
 * set. `entry` is the caller's zeroed scratch entry: one on the stack, not
 * two, keeps the frame within BPF's 512 bytes with dispatch()'s on top.
 * A nat SYN's half-open entry carries its reverse entry, so the SYN costs
 * one insert; the client's ACK writes the reverse entry to rev_nat.
 * A SYN inserts before it looks: a new connection's SYN (the common case,
 * and every SYN of a flood) makes no lookup in the half-open table, only a
 * retransmission (the insert finds its entry) does. */
static __always_inline struct weir_dip *handshake(struct xdp_md *ctx, const struct packet *pkt,
					     const struct weir_vip *vip, struct handshake *hs,
					     struct weir_conn *entry)
{
	__u32 rev_vip = nat_mode(vip->mode) ? vip->vip_id : NO_REVERSE;
	struct weir_dip *fresh = NULL, *dip = NULL;
	struct weir_half_open *half;
	__u32 now = hs->now;

	if (hs->syn) {
		fresh = dispatch(pkt, vip, entry, hs->now_ns);
		if (fresh && install_half_open(ctx, pkt, entry, rev_vip, BPF_NOEXIST) != -EEXIST) {
			hs->dip_id = entry->dip_id;
			return fresh;
		}
	}
	half = bpf_map_lookup_elem(&half_open, &pkt->key);
	if (half && !half_open_expired(&half->conn, now))
		dip = conn_dip(&half->conn);
	if (dip && hs->syn) {
		stat_inc(WEIR_STAT_SYN_RETRANSMIT);
		hs->dip_id = half->conn.dip_id;
		return dip;
	}
	if (dip) {
		*entry = half->conn;
		entry->atime = now;
		conn_note_close(entry, pkt->tcp_flags, WEIR_CONN_F_FIN_CLIENT, now);
		if (rev_vip != NO_REVERSE && telemetry_on())
			telemetry_request(entry, pkt, entry->dip_id);
		if (conn_update(&pkt->key, entry) == 0) {
			stat_inc(WEIR_STAT_CONN_NEW);
			hs->new_conn = 1;
		} else {
			stat_inc(WEIR_STAT_CONN_INSTALL_FAIL);
		}
		sync_announce(pkt, dip, entry);
		if (rev_vip != NO_REVERSE)
			install_reverse(ctx, pkt, dip, rev_vip);
		bpf_map_delete_elem(&half_open, &pkt->key);
		hs->dip_id = entry->dip_id;
		return dip;
	}

	if (!hs->syn) {
		stat_inc(WEIR_STAT_NONSYN_MISS);
		if (cfg_nonsyn_miss == WEIR_NONSYN_DROP) {
			hs->drop_stat = WEIR_STAT_DROP_NONSYN_MISS;
			return NULL;
		}
		fresh = dispatch(pkt, vip, entry, hs->now_ns);
	}
	/* A SYN here found a stale entry (expired, or its DIP removed) to
	 * replace, or had no DIP to go to. */
	if (!fresh) {
		hs->drop_stat = WEIR_STAT_DROP_NO_BACKEND;
		return NULL;
	}
	install_half_open(ctx, pkt, entry, rev_vip, BPF_ANY);
	hs->dip_id = entry->dip_id;
	return fresh;
}

/* Counts a client packet of a connection to `dip`, rewrites it (nat) or
 * encapsulates it (ipip, gue), and sends it. `event`: WEIR_STAT_CONN_HIT
 * when it had an entry (counted with the outcome), else STAT_NO_EVENT.
 * A hit looks up nothing but its entry: a nat reply whose reverse entry
 * was evicted writes it back itself (reverse_restore.h). */
static __always_inline int to_dip(struct xdp_md *ctx, struct packet *pkt,
				  const struct weir_vip *vip, const struct weir_dip *dip,
				  __u32 dip_id, int new_conn, __u32 event)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 bytes = data_end - data;
	__u32 len = pkt->l3_len;

	traffic_add(&vip_traffic, vip->vip_id, bytes, new_conn);
	traffic_add(&dip_traffic, dip_id, bytes, new_conn);

	if (nat_mode(vip->mode)) {
		if (rewrite_endpoint(data, data_end, pkt, 1, dip->addr, dip->port) < 0) {
			stat_outcome(event, WEIR_STAT_DROP_MALFORMED);
			return XDP_DROP;
		}
	} else if (is_encap_mode(vip->mode)) {
		len = encapsulate(ctx, pkt, dip, vip->mode);
		if (!len) {
			stat_outcome(event, WEIR_STAT_DROP_TOO_BIG);
			return XDP_DROP;
		}
	}
	/* One call site: forward_to_dip() is inlined once. */
	return forward_to_dip(ctx, dip, len, event);
}

/* What balance() hands new_connection() and gets back. */
struct new_conn {
	__u64 now_ns;   /* the packet's reading of the coarse clock */
	__u32 now;      /* the same in ticks */
	__u32 stale;    /* the packet's entry names a removed DIP */
	__u32 dip_id;   /* out */
	__u32 created;  /* out: an entry was promoted or installed in `conns` */
};

/* A packet to a VIP with no usable entry: a TCP handshake step, or a UDP
 * packet or one whose entry's DIP is gone, dispatched and installed. Fills
 * `nc` and returns the DIP, or NULL when the packet is dropped (counted).
 * `entry` is balance()'s zeroed scratch entry. Not inlined: the handshake,
 * dispatch and installs are a new connection's work, kept out of the
 * instruction stream that every hit runs through. */
static __noinline struct weir_dip *new_connection(struct xdp_md *ctx, struct packet *pkt,
						  const struct weir_vip *vip,
						  struct weir_conn *entry, struct new_conn *nc)
{
	int nat = nat_mode(vip->mode);
	struct weir_dip *dip;

	if (!nc->stale)
		stat_inc(WEIR_STAT_CONN_MISS);
	if (!nc->stale && pkt->key.proto == IPPROTO_TCP) {
		struct handshake hs = {
			.now_ns = nc->now_ns,
			.now = nc->now,
			.syn = (pkt->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN,
		};

		dip = handshake(ctx, pkt, vip, &hs, entry);
		if (!dip) {
			stat_inc(hs.drop_stat);
			return NULL;
		}
		nc->dip_id = hs.dip_id;
		nc->created = hs.new_conn;
		return dip;
	}
	/* UDP (no handshake to wait for), or an entry whose DIP is gone. */
	dip = dispatch(pkt, vip, entry, nc->now_ns);
	if (!dip) {
		stat_inc(WEIR_STAT_DROP_NO_BACKEND);
		return NULL;
	}
	nc->dip_id = entry->dip_id;
	if (nat && telemetry_on())
		telemetry_request(entry, pkt, nc->dip_id);
	if (conn_update(&pkt->key, entry) == 0)
		stat_inc(WEIR_STAT_CONN_NEW);
	else
		stat_inc(WEIR_STAT_CONN_INSTALL_FAIL);
	sync_announce(pkt, dip, entry);
	if (nat)
		install_reverse(ctx, pkt, dip, vip->vip_id);
	nc->created = 1;
	return dip;
}

/* The xdp tier's VIP packet. A hit runs only the lines up to the first
 * call of new_connection(): its lookup, its DIP's slot, the freshness and
 * close checks, and to_dip(). */
static __always_inline int balance(struct xdp_md *ctx, struct packet *pkt,
				   const struct weir_vip *vip)
{
	int tcp = pkt->key.proto == IPPROTO_TCP;
	int syn = tcp && (pkt->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
	int nat = nat_mode(vip->mode);
	__u64 now_ns = coarse_now_ns();
	__u32 now = ticks_of(now_ns), dip_id = 0;
	struct weir_conn *conn, entry = {};
	__u32 quic = QUIC_NOT_QUIC, event = STAT_NO_EVENT;
	int quic_vip = feature_on(WEIR_FEAT_QUIC) && vip->quic_sid_len && !tcp;
	struct weir_dip *dip = NULL;
	int new_conn = 0, stale = 0;

	/* A QUIC connection ID that names a DIP wins over the 5-tuple (quic.h).
	 * nat looks up the 5-tuple entry first: its DIP, when it owns the ID,
	 * saves the server ID's lookup; the entry of a new client address is
	 * written. A client's Initial or 0-RTT of another handshake than its
	 * entry's is a new connection on a reused tuple, as a SYN is. `to` in
	 * a block of its own shares its stack with later blocks' variables. */
	{
		struct quic_target to = {};

		if (quic_vip && !nat)
			quic = quic_route(ctx, pkt, vip, NULL, &to);
		conn = quic == QUIC_ROUTED ? NULL : conn_lookup(&pkt->key);
		if (quic_vip && nat) {
			quic = quic_route(ctx, pkt, vip, conn, &to);
			if (quic == QUIC_ROUTED)
				quic_nat_track(ctx, pkt, to.dip, to.dip_id, vip->vip_id, now,
					       conn, &entry);
		}
		if (quic == QUIC_ROUTED) {
			dip = to.dip;
			dip_id = to.dip_id;
			goto send;
		}
		if (to.handshake && quic_reused_tuple(pkt, vip, conn, &entry, to.handshake))
			conn = NULL;
	}
	if (conn) {
		dip = conn_dip(conn);
		/* The hit first and expected, so that it is the straight line
		 * through the compiled code; the rest in the order of their rules. */
		if (__builtin_expect(dip && !syn && !conn_expired(conn, pkt->key.proto, now), 1)) {
			dip_id = conn->dip_id;
			conn_touch(conn, now);
			if (tcp)
				conn_note_close(conn, pkt->tcp_flags, WEIR_CONN_F_FIN_CLIENT, now);
			if (nat && telemetry_on())
				telemetry_request(conn, pkt, dip_id);
			event = WEIR_STAT_CONN_HIT;
		} else if (syn) {
			/* A SYN opens a new connection that reuses the 5-tuple: the
			 * old one is over, the current table decides. */
			stat_inc(WEIR_STAT_CONN_REUSED);
			conn_forget(pkt, dip, nat);
			conn = NULL;
		} else if (conn_expired(conn, pkt->key.proto, now)) {
			stat_inc(WEIR_STAT_CONN_EXPIRED);
			conn_forget(pkt, dip, nat);
			conn = NULL;
		} else {
			/* Its DIP was removed: the connection is lost anyway, start anew. */
			stat_inc(WEIR_STAT_CONN_STALE);
			stale = 1;
		}
	}

	if (__builtin_expect(!conn || stale, 0)) {
		/* A new entry is dated by the clock itself: coarse_now_ns() may
		 * hand a hit the reading of a jiffy before. */
		__u64 exact_ns = bpf_ktime_get_coarse_ns();
		struct new_conn nc = {
			.now_ns = exact_ns,
			.now = ticks_of(exact_ns),
			.stale = stale,
		};

		dip = new_connection(ctx, pkt, vip, &entry, &nc);
		if (!dip)
			return XDP_DROP;
		dip_id = nc.dip_id;
		new_conn = nc.created;
	}
	if (quic)
		quic_count(&dip_quic, dip_id, quic);
	/* One call site: to_dip() is inlined once. */
send:
	return to_dip(ctx, pkt, vip, dip, dip_id, new_conn, event);
}

/* The hybrid tier. A packet whose connection the fast table holds is
 * forwarded here, with the xdp tier's expiry and close rules, and counted in
 * the entry's `hits`. Everything else goes to the software tier, which keeps
 * the full table, dispatches and installs fast entries: a miss, and every
 * SYN (a new connection on the tuple, or one the workers have not confirmed;
 * its fast entry goes, as in the xdp tier). An expired entry, or one whose
 * DIP was removed, goes too. A SYN beyond the workers' budget is dropped
 * first (admission.h). */
static __always_inline int fast_path(struct xdp_md *ctx, struct packet *pkt,
				     const struct weir_vip *vip)
{
	int tcp = pkt->key.proto == IPPROTO_TCP;
	int syn = tcp && (pkt->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
	int nat = nat_mode(vip->mode);
	__u32 now = now_ticks(), dip_id;
	struct weir_conn *conn;
	struct weir_dip *dip;

	/* Before the lookup: a SYN beyond the budget leaves the fast entry of
	 * its tuple as it was. */
	if (syn && !syn_admitted())
		return XDP_DROP;
	conn = conn_lookup(&pkt->key);
	if (!conn)
		goto miss;
	dip = conn_dip(conn);
	if (syn) {
		stat_inc(WEIR_STAT_CONN_REUSED);
		conn_forget(pkt, dip, nat);
		goto miss;
	}
	if (conn_expired(conn, pkt->key.proto, now)) {
		stat_inc(WEIR_STAT_CONN_EXPIRED);
		conn_forget(pkt, dip, nat);
		goto miss;
	}
	if (!dip) {
		stat_inc(WEIR_STAT_CONN_STALE);
		conn_forget(pkt, dip, nat);
		goto miss;
	}
	dip_id = conn->dip_id;
	conn->hits += 1;
	conn_touch(conn, now);
	if (tcp)
		conn_note_close(conn, pkt->tcp_flags, WEIR_CONN_F_FIN_CLIENT, now);
	if (nat && telemetry_on())
		telemetry_request(conn, pkt, dip_id);
	return to_dip(ctx, pkt, vip, dip, dip_id, 0, WEIR_STAT_CONN_HIT);
miss:
	stat_inc(WEIR_STAT_CONN_MISS);
	return to_software(ctx, pkt, cfg_hash_seed);
}

/* A FIN or RST of a DIP: its connection's entry learns it. Not inlined:
 * the client's tuple and the lookup are the closing packets' work, not
 * every reply's. */
static __noinline void server_closing(const struct packet *pkt, const struct weir_rev_nat *rev)
{
	conn_note_server_close(pkt, rev);
}

/* A nat DIP's reply, rewritten back to the VIP. `rev` is read in place: a
 * copy would be no more consistent with a writer on another CPU, whose
 * update it could tear as well. */
static __always_inline int reverse_nat(struct xdp_md *ctx, struct packet *pkt,
				       const struct weir_rev_nat *rev)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (pkt->key.proto == IPPROTO_TCP && (pkt->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)))
		server_closing(pkt, rev);
	traffic_add(&vip_traffic, rev->vip_id, data_end - data, 0);
	if (telemetry_on())
		telemetry_reply(pkt, rev);
	if (rewrite_endpoint(data, data_end, pkt, 0, rev->vip, rev->vport) < 0) {
		stat_outcome(WEIR_STAT_REV_NAT, WEIR_STAT_DROP_MALFORMED);
		return XDP_DROP;
	}
	return send_out(ctx, rev->ifindex, rev->client_mac, rev->lb_mac, WEIR_STAT_REV_NAT);
}

/* The nat VIPs of the DIP endpoint a packet comes from, or NULL when it
 * comes from none. */
static __always_inline struct weir_nat_endpoint *nat_endpoint_of(const struct packet *pkt)
{
	struct weir_endpoint ep = {};

	__builtin_memcpy(ep.addr, pkt->key.src, sizeof(ep.addr));
	ep.port = pkt->key.sport;
	ep.proto = pkt->key.proto;
	ep.family = pkt->key.family;
	return bpf_map_lookup_elem(&nat_endpoints, &ep);
}

/* Such a packet is a reply whose connection XDP does not know (or no one
 * does): forwarded by the kernel it would reach the client with the DIP's
 * address. When the FIB says the kernel would forward it, it goes to the
 * software tier, which knows the connection or drops the reply; in the xdp
 * tier it is dropped. Anything else goes to the kernel: replies addressed
 * to this host (health checks, the operator's own connections to the DIP),
 * and packets the kernel will not forward anyway. Not inlined: its FIB
 * query would count against the main frame's stack. */
static __noinline int reply_without_state(struct xdp_md *ctx, const struct packet *pkt)
{
	struct bpf_fib_lookup fib = {};
	long rc;

	fib.family = pkt->key.family == WEIR_AF_INET6 ? AF_INET6 : AF_INET;
	fib.ifindex = ctx->ingress_ifindex;
	if (pkt->key.family == WEIR_AF_INET6)
		__builtin_memcpy(fib.ipv6_dst, pkt->key.dst, 16);
	else
		fib.ipv4_dst = pkt->key.dst[0];
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		if (cfg_tier != WEIR_TIER_XDP)
			return to_software(ctx, pkt, cfg_hash_seed);
		stat_inc(WEIR_STAT_DROP_REPLY_NO_STATE);
		return XDP_DROP;
	}
	stat_inc(WEIR_STAT_PASS_NOT_VIP);
	return XDP_PASS;
}

/* A packet to no VIP with no reverse entry: a reply of a nat DIP whose
 * state is elsewhere, or not a reply at all. The hybrid tier has only the
 * fast table's reverse entries and no half-open one. In the xdp tier a
 * reply with no reverse entry may be a SYN-ACK (its half-open entry
 * carries it) or one whose entry was evicted (restored from its
 * connection). Not inlined: none of this is a hit's work. */
static __noinline int not_a_known_reply(struct xdp_md *ctx, struct packet *pkt)
{
	struct weir_nat_endpoint *ep = nat_endpoint_of(pkt);
	struct weir_half_open *half;
	struct weir_rev_nat *rev = NULL;

	if (!ep)
		return verdict(cfg_not_vip_action, WEIR_STAT_PASS_NOT_VIP, WEIR_STAT_DROP_NOT_VIP);
	if (cfg_tier == WEIR_TIER_XDP) {
		half = pkt->key.proto == IPPROTO_TCP ? half_open_of_reply(pkt, ep) : NULL;
		rev = half ? &half->rev : restore_reverse(ctx, pkt, ep);
	}
	if (!rev)
		return reply_without_state(ctx, pkt);
	return reverse_nat(ctx, pkt, rev);
}

SEC("xdp")
int weir_lb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct weir_vip_key vkey = {};
	struct weir_rev_nat *rev;
	struct packet pkt = {};
	struct weir_vip *vip;
	int rc;

	rc = parse_packet(data, data_end, &pkt);
	if (rc != PARSE_OK)
		return not_balanced(rc);

	__builtin_memcpy(vkey.addr, pkt.key.dst, sizeof(vkey.addr));
	vkey.port = pkt.key.dport;
	vkey.proto = pkt.key.proto;
	vkey.family = pkt.key.family;
	vip = vip_match(&vkey);
	if (vip) {
		if (cfg_tier == WEIR_TIER_SOFTWARE) {
			if (opens_connection(&pkt) && !syn_admitted())
				return XDP_DROP;
			return to_software(ctx, &pkt, cfg_hash_seed);
		}
		if (cfg_tier == WEIR_TIER_HYBRID)
			return fast_path(ctx, &pkt, vip);
		return balance(ctx, &pkt, vip);
	}

	/* Replies come from the DIPs of nat VIPs only. The software tier
	 * keeps every reverse entry itself. */
	if (!feature_on(WEIR_FEAT_NAT))
		return verdict(cfg_not_vip_action, WEIR_STAT_PASS_NOT_VIP, WEIR_STAT_DROP_NOT_VIP);
	rev = cfg_tier != WEIR_TIER_SOFTWARE ? rev_lookup(&pkt.key) : NULL;
	if (!rev)
		return not_a_known_reply(ctx, &pkt);
	/* The one inlined copy of the rewrite back on the hot path. */
	return reverse_nat(ctx, &pkt, rev);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
