// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * weir_decap - decapsulation for backends behind weir's ipip and gue modes
 * (`weir decap`), for hosts whose kernel has no ipip/fou modules.
 *
 * A frame whose outer IP header is addressed to one of this host's
 * addresses (map `decap_addrs`) and carries IPIP (proto 4), IPv6-in-IP
 * (41) or GUE variant 1 (UDP to cfg_gue_port, the inner IP header right
 * after UDP) loses its outer headers here: the Ethernet header moves up,
 * its ethertype becomes the inner datagram's, and the kernel receives the
 * inner packet as if it had arrived that way (XDP_PASS). Everything else
 * passes untouched. An encapsulated packet that cannot be decapsulated
 * (truncated, inconsistent lengths, fragmented outer, an inner header of
 * the wrong version) is dropped: the kernel could not do better with it.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "weir.h"
#include "weir_decap.h"

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

/* Load-time knob (weir_dataplane::decap). */
const volatile __be16 cfg_gue_port = bpf_htons(WEIR_GUE_PORT);

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_DECAP_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} decap_stats SEC(".maps");

/* This host's addresses that encapsulated packets are decapsulated for. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct weir_decap_addr);
	__type(value, __u8);
} decap_addrs SEC(".maps");

/* What the outer headers say. */
struct outer {
	struct weir_decap_addr dst;
	__u32 hdr_len;  /* outer IP (+ UDP) bytes to strip */
	__u32 ip_len;   /* the outer datagram's length by its header */
	__u8 inner_ver; /* 4 or 6 as the outer header announces; 0: GUE, by the inner */
};

enum classify {
	ENCAP,
	NOT_ENCAP,
	MALFORMED,
};

static __always_inline int count(__u32 stat, int action)
{
	__u64 *v = bpf_map_lookup_elem(&decap_stats, &stat);

	if (v)
		*v += 1;
	return action;
}

/* The UDP header at `udp` is GUE to us: the outer datagram carries
 * `l4_len` bytes past the IP header. */
static __always_inline int classify_udp(struct udphdr *uh, void *data_end, __u32 l4_len,
					struct outer *o)
{
	if ((void *)(uh + 1) > data_end)
		return MALFORMED;
	if (uh->dest != cfg_gue_port)
		return NOT_ENCAP;
	if (bpf_ntohs(uh->len) != l4_len || l4_len <= sizeof(*uh))
		return MALFORMED;
	o->hdr_len += sizeof(*uh);
	o->inner_ver = 0;
	return ENCAP;
}

static __always_inline int classify_v4(void *data, void *data_end, struct outer *o)
{
	struct iphdr *iph = data + ETH_HLEN;
	__u32 ihl_len;

	if ((void *)(iph + 1) > data_end)
		return NOT_ENCAP;
	if (iph->protocol != IPPROTO_IPIP && iph->protocol != IPPROTO_IPV6 &&
	    iph->protocol != IPPROTO_UDP)
		return NOT_ENCAP;
	ihl_len = (__u32)iph->ihl * 4;
	o->ip_len = bpf_ntohs(iph->tot_len);
	if (iph->version != 4 || ihl_len < sizeof(*iph) || o->ip_len < ihl_len ||
	    o->ip_len > (__u32)(data_end - (void *)iph))
		return MALFORMED;
	o->dst.family = WEIR_AF_INET;
	o->dst.addr[0] = iph->daddr;
	o->hdr_len = ihl_len;
	if (iph->protocol == IPPROTO_UDP) {
		if (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET))
			return NOT_ENCAP; /* a UDP fragment: the kernel reassembles it */
		return classify_udp(data + ETH_HLEN + (ihl_len & 0x3f), data_end,
				    o->ip_len - ihl_len, o);
	}
	if (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return MALFORMED; /* weir sends DF; a fragment cannot be decapsulated alone */
	o->inner_ver = iph->protocol == IPPROTO_IPIP ? 4 : 6;
	return ENCAP;
}

static __always_inline int classify_v6(void *data, void *data_end, struct outer *o)
{
	struct ipv6hdr *ip6h = data + ETH_HLEN;

	if ((void *)(ip6h + 1) > data_end)
		return NOT_ENCAP;
	/* Extension headers are not followed: weir sends none. */
	if (ip6h->nexthdr != IPPROTO_IPIP && ip6h->nexthdr != IPPROTO_IPV6 &&
	    ip6h->nexthdr != IPPROTO_UDP)
		return NOT_ENCAP;
	o->ip_len = sizeof(*ip6h) + bpf_ntohs(ip6h->payload_len);
	if (ip6h->version != 6 || o->ip_len > (__u32)(data_end - (void *)ip6h))
		return MALFORMED;
	o->dst.family = WEIR_AF_INET6;
	__builtin_memcpy(o->dst.addr, &ip6h->daddr, sizeof(o->dst.addr));
	o->hdr_len = sizeof(*ip6h);
	if (ip6h->nexthdr == IPPROTO_UDP)
		return classify_udp((void *)(ip6h + 1), data_end, o->ip_len - sizeof(*ip6h), o);
	o->inner_ver = ip6h->nexthdr == IPPROTO_IPIP ? 4 : 6;
	return ENCAP;
}

SEC("xdp")
int weir_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct outer o = {};
	__u8 macs[2 * ETH_ALEN];
	__u8 *inner, ver;
	int rc;

	if ((void *)(eth + 1) > data_end)
		return count(WEIR_DECAP_STAT_NOT_ENCAP, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		rc = classify_v4(data, data_end, &o);
	else if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		rc = classify_v6(data, data_end, &o);
	else
		rc = NOT_ENCAP;
	if (rc == NOT_ENCAP)
		return count(WEIR_DECAP_STAT_NOT_ENCAP, XDP_PASS);
	if (rc == MALFORMED)
		return count(WEIR_DECAP_STAT_MALFORMED, XDP_DROP);
	if (!bpf_map_lookup_elem(&decap_addrs, &o.dst))
		return count(WEIR_DECAP_STAT_NOT_OURS, XDP_PASS);

	/* The inner datagram: at least its first byte, of the announced version. */
	inner = data + ETH_HLEN + (o.hdr_len & 0x7f);
	if ((void *)(inner + 1) > data_end || o.hdr_len >= o.ip_len)
		return count(WEIR_DECAP_STAT_MALFORMED, XDP_DROP);
	ver = inner[0] >> 4;
	if ((ver != 4 && ver != 6) || (o.inner_ver && ver != o.inner_ver))
		return count(WEIR_DECAP_STAT_MALFORMED, XDP_DROP);

	__builtin_memcpy(macs, eth, sizeof(macs));
	if (bpf_xdp_adjust_head(ctx, (int)(o.hdr_len & 0x7f)))
		return count(WEIR_DECAP_STAT_MALFORMED, XDP_DROP);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return count(WEIR_DECAP_STAT_MALFORMED, XDP_DROP);
	__builtin_memcpy(eth, macs, sizeof(macs));
	eth->h_proto = ver == 4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	return count(WEIR_DECAP_STAT_DECAPSULATED, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
