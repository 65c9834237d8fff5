/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * encap.h - the ipip and gue modes: the client's IP datagram is put, as it
 * is, behind an outer IP header to the DIP (IPIP, proto 4, or IPv6-in-IPv6,
 * next header 41), and for gue a UDP header too (GUE variant 1, RFC 8086
 * 5: the inner IP header follows UDP directly). The DIP strips it (weir
 * decap, or the kernel's ipip/fou) and replies to the client directly, as in
 * dsr.
 *
 * The outer header carries the flow's entropy so that the DIP's NIC spreads
 * flows over its queues (RSS): a derived outer source address (unless one is
 * configured), the UDP source port (gue) and the IPv6 flow label. The
 * entropy is a cheap fold of the 5-tuple, not weir_flow_hash: it is needed
 * on every packet, and only has to be stable per flow.
 */
#ifndef WEIR_ENCAP_H
#define WEIR_ENCAP_H

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include "weir.h"
#include "csum.h"
#include "features.h"
#include "parse.h"

#define IP_DF 0x4000
#define ENCAP_TTL 64

/* Load-time knobs (weir_dataplane::loader::Encap). */
const volatile __u32 cfg_encap_mtu = 1500;    /* largest outer IP datagram sent */
const volatile __be32 cfg_encap_src_v4 = 0;   /* 0: derived from the flow */
const volatile __be32 cfg_encap_src_v6[4] = {}; /* all 0: derived from the flow */
const volatile __be16 cfg_gue_port = bpf_htons(WEIR_GUE_PORT);

/* Whether a VIP of `mode` encapsulates in this program (features.h). */
static __always_inline int is_encap_mode(__u8 mode)
{
	return (feature_on(WEIR_FEAT_IPIP) && mode == WEIR_MODE_IPIP) ||
	       (feature_on(WEIR_FEAT_GUE) && mode == WEIR_MODE_GUE);
}

/* Stable per flow, spread over flows: the client's address and both ports,
 * folded and mixed. */
static __always_inline __u32 flow_entropy(const struct weir_flow_key *k)
{
	__u32 h = k->src[0] ^ k->src[1] ^ k->src[2] ^ k->src[3];

	h ^= ((__u32)k->sport << 16) | k->dport;
	h ^= h >> 16;
	h *= 0x45d9f3b;
	h ^= h >> 16;
	return h;
}

/* The UDP source port of a gue packet: in the dynamic range (RFC 8086 5.6.1). */
static __always_inline __be16 gue_sport(__u32 entropy)
{
	return bpf_htons(0xc000 | (entropy & 0x3fff));
}

/* The inner datagram's DSCP and ECN, which the outer header copies. */
static __always_inline __u8 inner_tos(const __u8 *inner, __u8 inner_family)
{
	if (inner_family == WEIR_AF_INET6)
		return (__u8)((inner[0] << 4) | (inner[1] >> 4));
	return inner[1];
}

/* The checksum of the outer IPv4 header from the values written (id 0, DF),
 * summed as the 16-bit words sit in memory: not read back from the packet,
 * whose byte-wide stores a 16-bit load could not forward from. */
static __always_inline __u16 ipv4_header_csum(__u8 tos, __be16 tot_len, __u8 proto,
					      __be32 saddr, __be32 daddr)
{
	__u32 sum = 0x45 | ((__u32)tos << 8);

	sum += tot_len;
	sum += bpf_htons(IP_DF);
	sum += ENCAP_TTL | ((__u32)proto << 8);
	sum += (saddr & 0xffff) + (saddr >> 16);
	sum += (daddr & 0xffff) + (daddr >> 16);
	return ~csum_fold32(sum);
}

static __always_inline void put_udp(struct udphdr *uh, __u32 entropy, __u32 len)
{
	uh->source = gue_sport(entropy);
	uh->dest = cfg_gue_port;
	uh->len = bpf_htons(len);
	/* 0: no checksum. IPv4 allows it; for IPv6 tunnels RFC 6935 does, and
	 * the inner datagram carries its own. */
	uh->check = 0;
}

/* Grows the frame by `hdr` bytes at the head and checks that Ethernet, the
 * outer IP header, a UDP header and the inner datagram's first two bytes
 * fit; NULL when they do not. `ip_len`: the outer IP header's size. */
static __always_inline struct ethhdr *grow(struct xdp_md *ctx, __u32 hdr, __u32 ip_len,
					   __u8 **inner)
{
	void *data, *data_end;

	if (bpf_xdp_adjust_head(ctx, -(int)hdr))
		return NULL;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + ETH_HLEN + ip_len + sizeof(struct udphdr) > data_end)
		return NULL;
	*inner = data + ETH_HLEN + (hdr & 0xff);
	if ((void *)(*inner + 2) > data_end)
		return NULL;
	return data;
}

static __always_inline __u32 encap_v4(struct xdp_md *ctx, const struct packet *pkt,
				      const struct weir_dip *dip, int gue, __u32 entropy)
{
	__u32 hdr = sizeof(struct iphdr) + (gue ? sizeof(struct udphdr) : 0);
	__u32 len = pkt->l3_len + hdr;
	__u8 tos, proto = gue ? IPPROTO_UDP
			      : (pkt->key.family == WEIR_AF_INET6 ? IPPROTO_IPV6 : IPPROTO_IPIP);
	__be32 saddr = cfg_encap_src_v4 ? cfg_encap_src_v4
					: bpf_htonl(WEIR_ENCAP_SRC_V4_PREFIX | (entropy & 0xffff));
	__be16 tot_len = bpf_htons(len);
	struct ethhdr *eth;
	struct iphdr *iph;
	__u8 *inner;

	if (len > cfg_encap_mtu)
		return 0;
	eth = grow(ctx, hdr, sizeof(*iph), &inner);
	if (!eth)
		return 0;
	eth->h_proto = bpf_htons(ETH_P_IP);
	iph = (void *)(eth + 1);
	tos = inner_tos(inner, pkt->key.family);
	*(__u8 *)iph = 0x45; /* version 4, 5 words */
	iph->tos = tos;
	iph->tot_len = tot_len;
	iph->id = 0;
	iph->frag_off = bpf_htons(IP_DF); /* too big is caught here, by encap_mtu */
	iph->ttl = ENCAP_TTL;
	iph->protocol = proto;
	iph->saddr = saddr;
	iph->daddr = dip->addr[0];
	iph->check = ipv4_header_csum(tos, tot_len, proto, saddr, dip->addr[0]);
	if (gue)
		put_udp((void *)(iph + 1), entropy, len - sizeof(*iph));
	return len;
}

static __always_inline __u32 encap_v6(struct xdp_md *ctx, const struct packet *pkt,
				      const struct weir_dip *dip, int gue, __u32 entropy)
{
	__u32 hdr = sizeof(struct ipv6hdr) + (gue ? sizeof(struct udphdr) : 0);
	__u32 len = pkt->l3_len + hdr;
	struct ipv6hdr *ip6h;
	struct ethhdr *eth;
	__u8 *inner;
	__u8 tos;

	if (len > cfg_encap_mtu)
		return 0;
	eth = grow(ctx, hdr, sizeof(*ip6h), &inner);
	if (!eth)
		return 0;
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	ip6h = (void *)(eth + 1);
	tos = inner_tos(inner, pkt->key.family);
	/* version 6, the inner traffic class, the flow's label (ECMP entropy) */
	*(__be32 *)ip6h = bpf_htonl((6u << 28) | ((__u32)tos << 20) | (entropy & 0xfffff));
	ip6h->payload_len = bpf_htons(len - sizeof(*ip6h));
	ip6h->nexthdr = gue ? IPPROTO_UDP
			    : (pkt->key.family == WEIR_AF_INET6 ? IPPROTO_IPV6 : IPPROTO_IPIP);
	ip6h->hop_limit = ENCAP_TTL;
	if (cfg_encap_src_v6[0] | cfg_encap_src_v6[1] | cfg_encap_src_v6[2] |
	    cfg_encap_src_v6[3]) {
		ip6h->saddr.in6_u.u6_addr32[0] = cfg_encap_src_v6[0];
		ip6h->saddr.in6_u.u6_addr32[1] = cfg_encap_src_v6[1];
		ip6h->saddr.in6_u.u6_addr32[2] = cfg_encap_src_v6[2];
		ip6h->saddr.in6_u.u6_addr32[3] = cfg_encap_src_v6[3];
	} else {
		ip6h->saddr.in6_u.u6_addr32[0] = bpf_htonl(WEIR_ENCAP_SRC_V6_PREFIX0);
		ip6h->saddr.in6_u.u6_addr32[1] = bpf_htonl(WEIR_ENCAP_SRC_V6_PREFIX1);
		ip6h->saddr.in6_u.u6_addr32[2] = 0;
		ip6h->saddr.in6_u.u6_addr32[3] = bpf_htonl(entropy);
	}
	__builtin_memcpy(&ip6h->daddr, dip->addr, sizeof(ip6h->daddr));
	if (gue)
		put_udp((void *)(ip6h + 1), entropy, len - sizeof(*ip6h));
	return len;
}

/* Encapsulates the packet towards `dip` (mode ipip or gue). Returns the
 * outer IP datagram's length, or 0 when it would exceed cfg_encap_mtu or
 * the frame cannot grow: the caller counts drop_too_big. Not inlined: four
 * header layouts are the encapsulating VIPs' code, which nat and dsr hits
 * do not run through. */
static __noinline __u32 encapsulate(struct xdp_md *ctx, const struct packet *pkt,
					 const struct weir_dip *dip, __u8 mode)
{
	/* Called for an encapsulating mode only: without ipip, it is gue. */
	int gue = feature_on(WEIR_FEAT_GUE) &&
		  (!feature_on(WEIR_FEAT_IPIP) || mode == WEIR_MODE_GUE);
	__u32 entropy = flow_entropy(&pkt->key);

	if (dip->family == WEIR_AF_INET6)
		return encap_v6(ctx, pkt, dip, gue, entropy);
	return encap_v4(ctx, pkt, dip, gue, entropy);
}

#endif /* WEIR_ENCAP_H */
