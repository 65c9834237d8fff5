/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * nat.h - rewriting addresses and ports in place with incremental checksum
 * updates: the IPv4 header checksum, and the TCP/UDP checksum that covers
 * the pseudo-header. An IPv4 UDP checksum of zero means "none" and stays so.
 */
#ifndef WEIR_NAT_H
#define WEIR_NAT_H

#include "parse.h"
#include "csum.h"

#define L4_CSUM_NONE ((__u16 *)0)

/* Where the L4 checksum of the packet sits, or NULL when there is none. */
static __always_inline __u16 *l4_csum(void *data, void *data_end, const struct packet *pkt)
{
	void *l4 = data + (pkt->l4_off & PKT_OFF_MASK);

	if (pkt->key.proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end)
			return L4_CSUM_NONE;
		return &th->check;
	}
	if (pkt->key.proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end)
			return L4_CSUM_NONE;
		if (pkt->key.family == WEIR_AF_INET && uh->check == 0)
			return L4_CSUM_NONE;
		return &uh->check;
	}
	return L4_CSUM_NONE;
}

static __always_inline void udp_csum_fixup(const struct packet *pkt, __u16 *check)
{
	/* A computed UDP checksum of 0 is sent as all ones (RFC 768). */
	if (pkt->key.proto == IPPROTO_UDP && *check == 0)
		*check = 0xffff;
}

/* Rewrite the destination (dst = 1) or the source (dst = 0) address and port. */
static __always_inline int rewrite_endpoint(void *data, void *data_end, struct packet *pkt,
					    int dst, const __be32 *addr, __be16 port)
{
	__u16 *check = l4_csum(data, data_end, pkt);
	__be16 *l4_port;
	void *l4 = data + (pkt->l4_off & PKT_OFF_MASK);

	if ((void *)((__be16 *)l4 + 2) > data_end)
		return -1;
	l4_port = (__be16 *)l4 + (dst ? 1 : 0);

	if (pkt->key.family == WEIR_AF_INET) {
		struct iphdr *iph = data + ETH_HLEN;
		__be32 *field;

		if ((void *)(iph + 1) > data_end)
			return -1;
		field = dst ? &iph->daddr : &iph->saddr;
		csum_replace4(&iph->check, *field, addr[0]);
		if (check)
			csum_replace4(check, *field, addr[0]);
		*field = addr[0];
	} else {
		struct ipv6hdr *ip6h = data + ETH_HLEN;
		__be32 *field;

		if ((void *)(ip6h + 1) > data_end)
			return -1;
		field = dst ? ip6h->daddr.in6_u.u6_addr32 : ip6h->saddr.in6_u.u6_addr32;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			if (check)
				csum_replace4(check, field[i], addr[i]);
			field[i] = addr[i];
		}
	}
	if (port && port != *l4_port) {
		if (check)
			csum_replace2(check, *l4_port, port);
		*l4_port = port;
	}
	if (check)
		udp_csum_fixup(pkt, check);
	return 0;
}

#endif /* WEIR_NAT_H */
