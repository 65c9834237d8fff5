/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * parse.h - bounds-checked parsing of Ethernet, IPv4/IPv6 and TCP/UDP into a
 * struct packet. Every read is checked against data_end first; a packet
 * that is too short or whose length fields disagree with its size is
 * PARSE_MALFORMED, never read past. So is an IPv6 extension chain longer
 * than the parser follows: its end, which may be a fragment header, is
 * unknown.
 */
#ifndef WEIR_PARSE_H
#define WEIR_PARSE_H

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include "weir.h"

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
/* Hop-by-hop, routing and destination-options headers followed. */
#define IPV6_EXT_MAX 4
/* Packet offsets are masked with this before use so the verifier can bound
 * them; parsing refuses anything that would not fit. */
#define PKT_OFF_MASK 0x3fff

enum parse_result {
	PARSE_OK,
	PARSE_NOT_IP,
	PARSE_ICMP,
	PARSE_FRAGMENT,
	PARSE_OTHER_L4, /* IP but neither TCP, UDP nor ICMP: not balanced */
	PARSE_MALFORMED, /* also an IPv6 extension chain longer than IPV6_EXT_MAX */
};

struct packet {
	struct weir_flow_key key;
	__u32 l3_off;  /* offset of the IP header (ETH_HLEN: no VLAN tags) */
	__u32 l4_off;  /* offset of the TCP/UDP header, <= PKT_OFF_MASK */
	__u32 l3_len;  /* IP datagram length as the header says */
	__u32 payload_len; /* L4 payload bytes (past the TCP or UDP header) */
	__u8 tcp_flags;
};

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_ACK 0x10
#define TCP_FLAG_RST 0x04

static __always_inline int parse_l4(void *data, void *data_end, struct packet *pkt, __u8 proto)
{
	void *l4 = data + (pkt->l4_off & PKT_OFF_MASK);
	__u32 l4_len = pkt->l3_off + pkt->l3_len - pkt->l4_off;

	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end || l4_len < sizeof(*th))
			return PARSE_MALFORMED;
		if (th->doff < 5 || (__u32)th->doff * 4 > l4_len)
			return PARSE_MALFORMED;
		pkt->key.sport = th->source;
		pkt->key.dport = th->dest;
		pkt->tcp_flags = ((__u8 *)th)[13];
		pkt->payload_len = l4_len - (__u32)th->doff * 4;
		return PARSE_OK;
	}
	if (proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end || l4_len < sizeof(*uh))
			return PARSE_MALFORMED;
		if (bpf_ntohs(uh->len) < sizeof(*uh) || bpf_ntohs(uh->len) > l4_len)
			return PARSE_MALFORMED;
		pkt->key.sport = uh->source;
		pkt->key.dport = uh->dest;
		pkt->payload_len = bpf_ntohs(uh->len) - sizeof(*uh);
		return PARSE_OK;
	}
	return PARSE_OTHER_L4;
}

static __always_inline int parse_ipv4(void *data, void *data_end, struct packet *pkt)
{
	struct iphdr *iph = data + pkt->l3_off;
	__u32 avail = data_end - (void *)iph;
	__u32 ihl_len;

	if ((void *)(iph + 1) > data_end)
		return PARSE_MALFORMED;
	if (iph->version != 4 || iph->ihl < 5)
		return PARSE_MALFORMED;
	ihl_len = (__u32)iph->ihl * 4;
	pkt->l3_len = bpf_ntohs(iph->tot_len);
	/* Ethernet may pad short frames, so the datagram may end before the frame. */
	if (pkt->l3_len < ihl_len || pkt->l3_len > avail)
		return PARSE_MALFORMED;
	pkt->l4_off = pkt->l3_off + ihl_len;
	pkt->key.family = WEIR_AF_INET;
	pkt->key.proto = iph->protocol;
	pkt->key.src[0] = iph->saddr;
	pkt->key.dst[0] = iph->daddr;
	if (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return PARSE_FRAGMENT;
	if (iph->protocol == IPPROTO_ICMP)
		return PARSE_ICMP;
	return parse_l4(data, data_end, pkt, iph->protocol);
}

static __always_inline int parse_ipv6(void *data, void *data_end, struct packet *pkt)
{
	struct ipv6hdr *ip6h = data + pkt->l3_off;
	__u32 avail = data_end - (void *)ip6h;
	__u8 nexthdr;
	__u32 off;

	if ((void *)(ip6h + 1) > data_end)
		return PARSE_MALFORMED;
	if (ip6h->version != 6)
		return PARSE_MALFORMED;
	pkt->l3_len = sizeof(*ip6h) + bpf_ntohs(ip6h->payload_len);
	if (pkt->l3_len > avail)
		return PARSE_MALFORMED;
	pkt->key.family = WEIR_AF_INET6;
	__builtin_memcpy(pkt->key.src, &ip6h->saddr, 16);
	__builtin_memcpy(pkt->key.dst, &ip6h->daddr, 16);
	nexthdr = ip6h->nexthdr;
	off = pkt->l3_off + sizeof(*ip6h);

#pragma unroll
	for (int i = 0; i < IPV6_EXT_MAX; i++) {
		struct ipv6_opt_hdr *opt;

		if (nexthdr != IPPROTO_HOPOPTS && nexthdr != IPPROTO_ROUTING &&
		    nexthdr != IPPROTO_DSTOPTS)
			break;
		opt = data + (off & PKT_OFF_MASK);
		if ((void *)(opt + 1) > data_end)
			return PARSE_MALFORMED;
		nexthdr = opt->nexthdr;
		off += ((__u32)opt->hdrlen + 1) * 8;
		if (off > pkt->l3_off + pkt->l3_len || off > PKT_OFF_MASK)
			return PARSE_MALFORMED;
	}
	if (nexthdr == IPPROTO_FRAGMENT)
		return PARSE_FRAGMENT;
	/* Still in the chain after IPV6_EXT_MAX headers: what follows may be a
	 * fragment header, so this must not pass as a non-VIP packet. */
	if (nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_ROUTING ||
	    nexthdr == IPPROTO_DSTOPTS)
		return PARSE_MALFORMED;
	pkt->key.proto = nexthdr;
	pkt->l4_off = off;
	if (nexthdr == IPPROTO_ICMPV6)
		return PARSE_ICMP;
	return parse_l4(data, data_end, pkt, nexthdr);
}

/* Fills `pkt` from the frame; pkt must be zeroed by the caller. */
static __always_inline int parse_packet(void *data, void *data_end, struct packet *pkt)
{
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return PARSE_MALFORMED;
	pkt->l3_off = sizeof(*eth);
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(data, data_end, pkt);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(data, data_end, pkt);
	return PARSE_NOT_IP;
}

#endif /* WEIR_PARSE_H */
