// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * weir_gen - the labs' packet generator. User space runs it with
 * BPF_PROG_TEST_RUN in live-frames mode on a template frame, in the client's
 * network namespace; every run rewrites the copy of the template it is given
 * into one packet of one flow and returns XDP_TX, which sends it out of the
 * interface named in the run's context.
 *
 * Flow i of the flow space is the source address (base | host) and source
 * port (port_base + port index), with
 *   host       = i mod 2^host_bits, scrambled by a keyed bijection if asked,
 *   port index = (i >> host_bits) mod ports,
 * so flow i is always the same 5-tuple; weir-traffic's gen.rs computes the
 * same mapping in Rust. Only these fields and the checksums change. Live mode
 * recycles pages without restoring them, so a run may see the template, an
 * earlier packet, or what a receiver's XDP program made of one (a load
 * balancer that rewrote its destination in place, on a veth peer): every run
 * first writes the template's headers back, then the flow's fields, and the
 * checksums are updated from the template's (RFC 1624).
 */
#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "weir_traffic.h"
#include "lib/csum.h"

/* Load-time constants (weir-traffic gen.rs sets them from a GenSpec). */
const volatile __u32 cfg_ipv6 = 0;       /* 1: IPv6, 0: IPv4 */
const volatile __u32 cfg_tcp = 0;        /* 1: TCP, 0: UDP */
const volatile enum weir_gen_dist cfg_dist = WEIR_GEN_ROUND_ROBIN;
const volatile __u32 cfg_flows = 1;      /* flows drawn from (all but FRESH) */
const volatile __u32 cfg_host_bits = 0;  /* varied low bits of the source address */
const volatile __u32 cfg_host_mask = 0;  /* (1 << host_bits) - 1 */
const volatile __u32 cfg_src_base = 0;   /* varied source word, host order, host bits clear */
const volatile __u32 cfg_port_base = 0;  /* first source port */
const volatile __u32 cfg_ports = 1;      /* source ports used */
const volatile __u32 cfg_scramble = 0;   /* 1: hosts in a keyed order, not counting up */
const volatile __u32 cfg_key[2] = {};    /* the scramble's keys */
const volatile __u32 cfg_shift = 1;      /* the scramble's xorshift: (host_bits + 1) / 2 */
const volatile __u16 cfg_ip_csum = 0;    /* the template's checksums, as in memory */
const volatile __u16 cfg_l4_csum = 0;
/* The template's headers (Ethernet, IP, TCP or UDP). The payload is not
 * restored: the labs' receivers rewrite headers only. */
const volatile __u8 cfg_headers[WEIR_GEN_HEADERS_MAX] = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct weir_gen_state);
} gen_state SEC(".maps");

/* The Zipf alias table, cfg_flows columns (sized at load time). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct weir_gen_alias);
} gen_alias SEC(".maps");

#define SRC_OFF_V4 (ETH_HLEN + offsetof(struct iphdr, saddr))
/* The last 32 bits of the IPv6 source address. */
#define SRC_OFF_V6 (ETH_HLEN + offsetof(struct ipv6hdr, saddr) + 12)
#define IP_CSUM_OFF (ETH_HLEN + offsetof(struct iphdr, check))
#define L4_OFF_V4 (ETH_HLEN + sizeof(struct iphdr))
#define L4_OFF_V6 (ETH_HLEN + sizeof(struct ipv6hdr))

/* A uniform draw from [0, n) without a division (Lemire's multiply-shift). */
static __always_inline __u32 draw(__u32 n)
{
	return ((__u64)bpf_get_prandom_u32() * n) >> 32;
}

/* A keyed bijection on host_bits-bit numbers: xor, odd multiply, xorshift,
 * odd multiply, xor, each one invertible modulo 2^host_bits. */
static __always_inline __u32 scramble(__u32 x)
{
	x = (x ^ cfg_key[0]) & cfg_host_mask;
	x = (x * 0x9e3779b1U) & cfg_host_mask;
	x ^= x >> cfg_shift;
	x = (x * 0x85ebca6bU) & cfg_host_mask;
	return x ^ (cfg_key[1] & cfg_host_mask);
}

/* Sets the flow of this packet; -1 if a map is missing (cannot happen once
 * loaded). */
static __always_inline int pick_flow(__u64 *flow)
{
	struct weir_gen_state *st;
	struct weir_gen_alias *col;
	__u32 zero = 0, k;

	if (cfg_dist == WEIR_GEN_UNIFORM) {
		*flow = draw(cfg_flows);
		return 0;
	}
	if (cfg_dist == WEIR_GEN_ZIPF) {
		k = draw(cfg_flows);
		col = bpf_map_lookup_elem(&gen_alias, &k);
		if (!col)
			return -1;
		*flow = bpf_get_prandom_u32() < col->keep ? k : col->alias;
		return 0;
	}
	st = bpf_map_lookup_elem(&gen_state, &zero);
	if (!st)
		return -1;
	*flow = cfg_dist == WEIR_GEN_FRESH ? st->next : st->next % cfg_flows;
	st->next += st->stride;
	return 0;
}

/* Writes the template's headers over whatever the page holds. Byte by
 * byte through the volatile array: a memcpy from it would be folded into
 * the compile-time zeros. `len` is a load-time constant. */
static __always_inline void restore_headers(__u8 *data, __u32 len)
{
#pragma unroll
	for (__u32 i = 0; i < WEIR_GEN_HEADERS_MAX; i++) {
		if (i < len)
			data[i] = cfg_headers[i];
	}
}

SEC("xdp")
int weir_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l4_off = cfg_ipv6 ? L4_OFF_V6 : L4_OFF_V4;
	__u32 src_off = cfg_ipv6 ? SRC_OFF_V6 : SRC_OFF_V4;
	__u32 csum_off = l4_off + (cfg_tcp ? offsetof(struct tcphdr, check)
					   : offsetof(struct udphdr, check));
	__be32 tmpl_src = bpf_htonl(cfg_src_base);
	__be16 tmpl_sport = bpf_htons(cfg_port_base);
	__u16 l4_csum = cfg_l4_csum, ip_csum = cfg_ip_csum;
	__u32 host, port;
	__be32 src;
	__be16 sport;
	__u64 flow;

	/* The TCP header is the longer one; its end bounds every write below. */
	if (data + l4_off + (cfg_tcp ? sizeof(struct tcphdr) : sizeof(struct udphdr)) > data_end)
		return XDP_ABORTED;
	if (pick_flow(&flow) < 0)
		return XDP_ABORTED;
	restore_headers(data, l4_off + (cfg_tcp ? sizeof(struct tcphdr) : sizeof(struct udphdr)));
	host = flow & cfg_host_mask;
	if (cfg_scramble)
		host = scramble(host);
	port = cfg_port_base + (__u32)((flow >> cfg_host_bits) % cfg_ports);
	src = bpf_htonl(cfg_src_base | host);
	sport = bpf_htons(port);

	csum_replace4(&l4_csum, tmpl_src, src);
	csum_replace2(&l4_csum, tmpl_sport, sport);
	/* A UDP checksum of 0 means "none" (IPv4) or is invalid (IPv6). */
	if (!cfg_tcp && l4_csum == 0)
		l4_csum = 0xffff;
	*(__be32 *)(data + src_off) = src;
	*(__be16 *)(data + l4_off) = sport; /* the source port opens TCP and UDP headers */
	*(__u16 *)(data + csum_off) = l4_csum;
	if (!cfg_ipv6) {
		csum_replace4(&ip_csum, tmpl_src, src);
		*(__u16 *)(data + IP_CSUM_OFF) = ip_csum;
	}
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
