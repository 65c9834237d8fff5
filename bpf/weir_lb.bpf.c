// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * weir_lb - the stateful layer-4 load balancer (XDP).
 *
 * Packets to a VIP look up the connection table: a hit is rewritten towards
 * its DIP; a miss is dispatched in-band by the AWFD tables and installed, with
 * no round trip to user space (HNLB II-A, Spotlight IV-B). In nat mode the
 * DIP's replies match the reverse table and are rewritten back to the VIP.
 * Everything else is passed to the kernel or dropped, as configured.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "weir.h"
#include "lib/parse.h"
#include "lib/maps.h"
#include "lib/stats.h"
#include "lib/hash.h"
#include "lib/dispatch.h"
#include "lib/nat.h"
#include "lib/forward.h"
#include "lib/telemetry.h"

/* Load-time knobs, set by the loader from the configuration. */
const volatile __u32 cfg_not_vip_action = WEIR_ACT_PASS;
const volatile __u32 cfg_icmp_action = WEIR_ACT_PASS;
const volatile __u32 cfg_fragment_action = WEIR_ACT_PASS;
const volatile __u32 cfg_malformed_action = WEIR_ACT_DROP;
const volatile __u32 cfg_nonsyn_miss = WEIR_NONSYN_DISPATCH;
const volatile __u32 cfg_hash_seed = 0x77656972; /* "weir" */

/* One established nat packet in 64 re-checks its reverse entry. */
#define REV_CHECK_MASK 63
const volatile __u32 cfg_passive_telemetry = 0; /* 1: time nat requests (telemetry.h) */

static __always_inline int verdict(__u32 action, __u32 pass_stat, __u32 drop_stat)
{
	if (action == WEIR_ACT_DROP) {
		stat_inc(drop_stat);
		return XDP_DROP;
	}
	stat_inc(pass_stat);
	return XDP_PASS;
}

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

/* Make sure the reply of a nat connection finds its way back (the reverse
 * entry lives in its own LRU and may have been evicted independently). */
static __always_inline void ensure_reverse(struct xdp_md *ctx, const struct packet *pkt,
					   const struct weir_dip *dip, __u32 vip_id)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct weir_flow_key rkey = {};
	struct weir_rev_nat rev = {};
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return;
	reverse_key(pkt, dip, &rkey);
	if (bpf_map_lookup_elem(&rev_nat, &rkey))
		return;
	__builtin_memcpy(rev.vip, pkt->key.dst, sizeof(rev.vip));
	rev.vport = pkt->key.dport;
	rev.family = pkt->key.family;
	rev.vip_id = vip_id;
	rev.ifindex = ctx->ingress_ifindex;
	__builtin_memcpy(rev.client_mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(rev.lb_mac, eth->h_dest, ETH_ALEN);
	bpf_map_update_elem(&rev_nat, &rkey, &rev, BPF_ANY);
}

static __always_inline int balance(struct xdp_md *ctx, struct packet *pkt,
				   const struct weir_vip *vip)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 bytes = data_end - data;
	struct weir_conn *conn, fresh = {};
	struct weir_dip *dip = NULL;
	__u32 dip_id, version, hash;
	int new_conn = 0;

	conn = bpf_map_lookup_elem(&conns, &pkt->key);
	if (conn) {
		dip_id = conn->dip_id;
		dip = bpf_map_lookup_elem(&dips, &dip_id);
		if (dip && (dip->flags & WEIR_DIP_F_LIVE) && dip->gen == conn->dip_gen) {
			stat_inc(WEIR_STAT_CONN_HIT);
			if (cfg_passive_telemetry && vip->mode == WEIR_MODE_NAT)
				telemetry_request(conn, pkt, dip_id);
		} else {
			/* Its DIP was removed: the connection is lost anyway, start anew. */
			stat_inc(WEIR_STAT_CONN_STALE);
			dip = NULL;
		}
	} else {
		stat_inc(WEIR_STAT_CONN_MISS);
		if (pkt->key.proto == IPPROTO_TCP && !(pkt->tcp_flags & TCP_FLAG_SYN)) {
			stat_inc(WEIR_STAT_NONSYN_MISS);
			if (cfg_nonsyn_miss == WEIR_NONSYN_DROP) {
				stat_inc(WEIR_STAT_DROP_NONSYN_MISS);
				return XDP_DROP;
			}
		}
	}

	if (!dip) {
		hash = weir_flow_hash(&pkt->key, cfg_hash_seed);
		if (awfd_select(vip->vip_id, hash, &dip_id, &version) < 0) {
			stat_inc(WEIR_STAT_DROP_NO_BACKEND);
			return XDP_DROP;
		}
		dip = bpf_map_lookup_elem(&dips, &dip_id);
		if (!dip || !(dip->flags & WEIR_DIP_F_LIVE) || dip->family != pkt->key.family) {
			stat_inc(WEIR_STAT_DROP_NO_BACKEND);
			return XDP_DROP;
		}
		fresh.dip_id = dip_id;
		fresh.dip_gen = dip->gen;
		fresh.table_version = version;
		fresh.created_ns = bpf_ktime_get_ns();
		if (cfg_passive_telemetry && vip->mode == WEIR_MODE_NAT)
			telemetry_request(&fresh, pkt, dip_id);
		if (bpf_map_update_elem(&conns, &pkt->key, &fresh, BPF_ANY) == 0)
			stat_inc(WEIR_STAT_CONN_NEW);
		else
			stat_inc(WEIR_STAT_CONN_INSTALL_FAIL);
		new_conn = 1;
	}

	traffic_add(&vip_traffic, vip->vip_id, bytes, new_conn);
	traffic_add(&dip_traffic, dip_id, bytes, new_conn);

	if (vip->mode == WEIR_MODE_NAT) {
		/* Replies keep the reverse entry fresh in its LRU, so an established
		 * connection only re-checks it now and then (the lookup is a third
		 * of the nat hit path's cost). */
		if (new_conn || (bpf_get_prandom_u32() & REV_CHECK_MASK) == 0)
			ensure_reverse(ctx, pkt, dip, vip->vip_id);
		if (rewrite_endpoint(data, data_end, pkt, 1, dip->addr, dip->port) < 0) {
			stat_inc(WEIR_STAT_DROP_MALFORMED);
			return XDP_DROP;
		}
	}
	return forward_to_dip(ctx, dip, pkt->l3_len);
}

static __always_inline int reverse_nat(struct xdp_md *ctx, struct packet *pkt,
				       const struct weir_rev_nat *rev)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct weir_rev_nat r = *rev; /* the map value may change under us */

	stat_inc(WEIR_STAT_REV_NAT);
	traffic_add(&vip_traffic, r.vip_id, data_end - data, 0);
	if (cfg_passive_telemetry)
		telemetry_reply(pkt, &r);
	if (rewrite_endpoint(data, data_end, pkt, 0, r.vip, r.vport) < 0) {
		stat_inc(WEIR_STAT_DROP_MALFORMED);
		return XDP_DROP;
	}
	return send_out(ctx, r.ifindex, r.client_mac, r.lb_mac);
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

	stat_inc(WEIR_STAT_RX);
	rc = parse_packet(data, data_end, &pkt);
	switch (rc) {
	case PARSE_OK:
		break;
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

	__builtin_memcpy(vkey.addr, pkt.key.dst, sizeof(vkey.addr));
	vkey.port = pkt.key.dport;
	vkey.proto = pkt.key.proto;
	vkey.family = pkt.key.family;
	vip = bpf_map_lookup_elem(&vips, &vkey);
	if (vip)
		return balance(ctx, &pkt, vip);

	rev = bpf_map_lookup_elem(&rev_nat, &pkt.key);
	if (rev)
		return reverse_nat(ctx, &pkt, rev);

	return verdict(cfg_not_vip_action, WEIR_STAT_PASS_NOT_VIP, WEIR_STAT_DROP_NOT_VIP);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
