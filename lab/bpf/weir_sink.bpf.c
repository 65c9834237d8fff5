// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * weir_sink - the labs' packet sink, attached to a backend's interface so
 * that received traffic is measured where it arrives, not where it was sent.
 *
 * TCP and UDP frames that match the filter (protocol, destination port) are
 * counted per CPU, packets and bytes, optionally per flow (5-tuple) in
 * sink_flows, and then dropped, or passed when the backend must also serve
 * them. Everything else (ARP, ICMP, neighbour discovery, other ports) goes
 * to the kernel, counted only as `passed`.
 *
 * An IPIP or IPv6-in-IP frame (what weir's ipip mode sends a DIP) is
 * matched and counted by its inner datagram, so a sink behind an ipip VIP
 * counts what a decapsulating backend would serve; the frame's bytes still
 * include the outer header.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "weir.h"
#include "weir_traffic.h"
#include "lib/parse.h"

/* Load-time constants (weir-traffic sink.rs). */
const volatile __u32 cfg_drop = 1;        /* counted frames: 1 dropped, 0 passed */
const volatile __u32 cfg_proto = 0;       /* IPPROTO_TCP or IPPROTO_UDP; 0 both */
const volatile __be16 cfg_dport = 0;      /* destination port; 0 any */
const volatile __u32 cfg_track_flows = 0; /* 1: count packets per flow in sink_flows */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct weir_sink_stats);
} sink_stats SEC(".maps");

/* Packets per flow; sized at load time (1 when flows are not tracked). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct weir_flow_key);
	__type(value, __u64);
} sink_flows SEC(".maps");

static __always_inline void count_flow(struct weir_sink_stats *st, struct weir_flow_key *key)
{
	__u64 one = 1, *n;

	n = bpf_map_lookup_elem(&sink_flows, key);
	if (n) {
		/* Packets of one flow may arrive on every CPU. */
		__sync_fetch_and_add(n, 1);
		return;
	}
	if (bpf_map_update_elem(&sink_flows, key, &one, BPF_NOEXIST) == 0) {
		st->flows_new += 1;
		return;
	}
	/* Another CPU inserted it first, or the table is full. */
	n = bpf_map_lookup_elem(&sink_flows, key);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		st->flows_full += 1;
}

/* Parses the datagram inside an IPIP (4) or IPv6-in-IP (41) frame into
 * `pkt`; any other result of the outer parse stands. */
static __always_inline int parse_inner(void *data, void *data_end, struct packet *pkt, int rc)
{
	__u8 proto = pkt->key.proto;
	__u32 off = pkt->l4_off;

	if (rc != PARSE_OTHER_L4 || (proto != IPPROTO_IPIP && proto != IPPROTO_IPV6))
		return rc;
	__builtin_memset(pkt, 0, sizeof(*pkt));
	pkt->l3_off = off & PKT_OFF_MASK;
	return proto == IPPROTO_IPIP ? parse_ipv4(data, data_end, pkt)
				     : parse_ipv6(data, data_end, pkt);
}

SEC("xdp")
int weir_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct weir_sink_stats *st;
	struct packet pkt = {};
	__u32 zero = 0;

	st = bpf_map_lookup_elem(&sink_stats, &zero);
	if (!st)
		return XDP_PASS;
	if (parse_inner(data, data_end, &pkt, parse_packet(data, data_end, &pkt)) != PARSE_OK ||
	    (cfg_proto && pkt.key.proto != cfg_proto) ||
	    (cfg_dport && pkt.key.dport != cfg_dport)) {
		st->passed += 1;
		return XDP_PASS;
	}
	st->packets += 1;
	st->bytes += data_end - data;
	if (pkt.key.proto == IPPROTO_TCP &&
	    (pkt.tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN)
		st->syns += 1;
	if (cfg_track_flows)
		count_flow(st, &pkt.key);
	return cfg_drop ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
