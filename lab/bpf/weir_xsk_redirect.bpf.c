// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * weir_xsk_redirect - the simplest steering to AF_XDP, used by weir-afxdp's
 * tests and benchmarks: every packet goes to the AF_XDP socket registered
 * in xsks at the index of the RX queue it arrived on. A queue with no
 * socket passes its packets to the kernel (bpf_redirect_map's fallback
 * action), so an interface keeps working while its sockets come and go.
 *
 * The kernel checks that the socket is bound to this interface and queue;
 * one bound elsewhere makes the redirect fail and the packet is dropped.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* One slot per RX queue; user space sizes it to the interface's queues. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp")
int xsk_redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
