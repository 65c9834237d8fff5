/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * software.h - handing a packet to the software tier: the AF_XDP socket of
 * the worker that serves the queue it arrived on. Each interface has a block
 * of WEIR_MAX_QUEUES entries in `xsks` (its weir_iface.xsk_slot), so a
 * worker's socket for (interface, queue) has one fixed place. The kernel
 * delivers only to a socket bound to that very interface and queue; what it
 * drops after the verdict (a full RX ring) the socket's own statistics count.
 */
#ifndef WEIR_SOFTWARE_H
#define WEIR_SOFTWARE_H

#include "maps.h"
#include "stats.h"

/* Load-time: WEIR_TIER_* (weir.h). */
const volatile __u32 cfg_tier = WEIR_TIER_XDP;

static __always_inline int to_software(struct xdp_md *ctx)
{
	__u32 ifindex = ctx->ingress_ifindex, queue = ctx->rx_queue_index;
	struct weir_iface *iface = bpf_map_lookup_elem(&ifaces, &ifindex);

	if (iface && queue < WEIR_MAX_QUEUES &&
	    bpf_redirect_map(&xsks, iface->xsk_slot * WEIR_MAX_QUEUES + queue, XDP_DROP) ==
		    XDP_REDIRECT) {
		stat_inc(WEIR_STAT_TO_SOFTWARE);
		return XDP_REDIRECT;
	}
	stat_inc(WEIR_STAT_DROP_NO_WORKER);
	return XDP_DROP;
}

#endif /* WEIR_SOFTWARE_H */
