/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * forward.h - choosing the next hop and sending the frame: XDP_TX when it
 * leaves by the interface it came in on, XDP_REDIRECT through `tx_ports`
 * otherwise. The next hop is the one the control plane resolved into the
 * DIP's slot (weir_dip.nh): no lookup at all. Without one it comes from the
 * kernel's FIB (bpf_fib_lookup), or from the DIP's configured MAC when the
 * FIB is off or has no neighbour.
 */
#ifndef WEIR_FORWARD_H
#define WEIR_FORWARD_H

#include <linux/if_ether.h>
#include "maps.h"
#include "stats.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* Set at load time: 1 = next hop from the FIB, 0 = configured MACs only. */
const volatile __u32 cfg_fib_lookup = 1;

/* Sets the MACs and sends the frame by `ifindex`; `event` is the path's
 * event for the outcome counter (stat_outcome). */
static __always_inline int send_out(struct xdp_md *ctx, __u32 ifindex, const __u8 *dmac,
				    const __u8 *smac, __u32 event)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 outcome = WEIR_STAT_TX;
	int action = XDP_TX;

	if ((void *)(eth + 1) > data_end) {
		stat_outcome(event, WEIR_STAT_DROP_MALFORMED);
		return XDP_DROP;
	}
	__builtin_memcpy(eth->h_dest, dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, smac, ETH_ALEN);
	if (ifindex != ctx->ingress_ifindex) {
		action = bpf_redirect_map(&tx_ports, ifindex, XDP_DROP);
		outcome = action == XDP_REDIRECT ? WEIR_STAT_REDIRECT : WEIR_STAT_DROP_REDIRECT;
	}
	/* One counting site for the three ends: each stat_outcome() is
	 * several inlined counter updates. */
	stat_outcome(event, outcome);
	return action;
}

/* Sends to `dip` by the kernel's FIB, or by its configured MAC when the
 * FIB is off or has no neighbour: a DIP whose next hop the control plane
 * has not resolved into its slot (yet). Not inlined: the FIB query's 64
 * bytes and its branches stay out of the frame and the instruction stream
 * of forward_to_dip(), which every packet to a DIP runs. */
static __noinline int forward_unresolved(struct xdp_md *ctx, const struct weir_dip *dip,
					 __u32 l3_len, __u32 event)
{
	struct bpf_fib_lookup fib = {};
	const __u8 *dmac, *smac;
	struct weir_iface *iface;
	__u32 ifindex = ctx->ingress_ifindex;
	long rc;

	if (cfg_fib_lookup) {
		fib.family = dip->family == WEIR_AF_INET6 ? AF_INET6 : AF_INET;
		fib.ifindex = ctx->ingress_ifindex;
		fib.tot_len = l3_len;
		if (dip->family == WEIR_AF_INET6)
			__builtin_memcpy(fib.ipv6_dst, dip->addr, 16);
		else
			fib.ipv4_dst = dip->addr[0];
		rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), BPF_FIB_LOOKUP_DIRECT);
		if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
			ifindex = fib.ifindex;
			dmac = fib.dmac;
			smac = fib.smac;
			goto send;
		}
		if (rc != BPF_FIB_LKUP_RET_NO_NEIGH) {
			stat_outcome(event, WEIR_STAT_DROP_NO_ROUTE);
			return XDP_DROP;
		}
		ifindex = fib.ifindex;
		if (!dip->mac_set) {
			/* The kernel forwards the rewritten packet and resolves the neighbour. */
			stat_outcome(event, WEIR_STAT_PASS_NO_NEIGH);
			return XDP_PASS;
		}
		stat_inc(WEIR_STAT_MAC_FALLBACK);
	} else if (!dip->mac_set) {
		stat_outcome(event, WEIR_STAT_DROP_NO_ROUTE);
		return XDP_DROP;
	}
	iface = bpf_map_lookup_elem(&ifaces, &ifindex);
	if (!iface) {
		stat_outcome(event, WEIR_STAT_DROP_NO_ROUTE);
		return XDP_DROP;
	}
	dmac = dip->mac;
	smac = iface->mac;
send:
	return send_out(ctx, ifindex, dmac, smac, event);
}

/* Send to `dip` (already rewritten). `l3_len` is the IP datagram length;
 * `event` the path's event for the outcome counter (stat_outcome). The
 * next hop resolved into the DIP's slot is the common case and the only
 * one inlined. */
static __always_inline int forward_to_dip(struct xdp_md *ctx, const struct weir_dip *dip,
					  __u32 l3_len, __u32 event)
{
	if (!dip->nh.ifindex)
		return forward_unresolved(ctx, dip, l3_len, event);
	return send_out(ctx, dip->nh.ifindex, dip->nh.dmac, dip->nh.smac, event);
}

#endif /* WEIR_FORWARD_H */
