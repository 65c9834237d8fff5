/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * admission.h - the budget of new connections XDP hands to the software
 * tier's workers (tiers software and hybrid).
 *
 * SYNs and the packets of established connections share each worker's
 * AF_XDP receive ring. A SYN flood fills the ring faster than the worker
 * drains it, and the kernel then drops whatever comes next: established
 * packets as much as SYNs. So SYNs (TCP, SYN without ACK: the packets that
 * open a connection) pass a per-CPU token bucket before they are steered,
 * and one beyond it is dropped here and counted (`drop_syn_budget`, an
 * outcome). Every other packet, established ones included, never meets the
 * budget. The bucket is kept as GCRA's theoretical arrival time: one
 * per-CPU word, no division on the hot path, no atomics. A budget of 0
 * (cfg_syn_interval_ns) admits everything.
 */
#ifndef WEIR_ADMISSION_H
#define WEIR_ADMISSION_H

#include "parse.h"
#include "stats.h"

/* Load-time: nanoseconds per admitted SYN on one CPU (1e9 / rate); 0 = no
 * budget. */
const volatile __u64 cfg_syn_interval_ns = 0;
/* Load-time: how far ahead of now the bucket may run, (burst - 1) *
 * interval: a burst of that many SYNs passes at once. */
const volatile __u64 cfg_syn_tolerance_ns = 0;

/* Per CPU: the time at which the bucket is full again (GCRA's TAT). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} syn_budget SEC(".maps");

/* A TCP SYN without ACK: the packet that opens a connection. */
static __always_inline int opens_connection(const struct packet *pkt)
{
	return pkt->key.proto == IPPROTO_TCP &&
	       (pkt->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
}

/* Whether a SYN may go on to the workers. One that may not is counted; the
 * caller drops it. */
static __always_inline int syn_admitted(void)
{
	__u32 key = 0;
	__u64 *tat, now, start;

	if (!cfg_syn_interval_ns)
		return 1;
	tat = bpf_map_lookup_elem(&syn_budget, &key);
	if (!tat)
		return 1; /* cannot happen: a one-entry array */
	now = bpf_ktime_get_ns();
	start = *tat > now ? *tat : now;
	if (start - now > cfg_syn_tolerance_ns) {
		stat_inc(WEIR_STAT_DROP_SYN_BUDGET);
		return 0;
	}
	*tat = start + cfg_syn_interval_ns;
	return 1;
}

#endif /* WEIR_ADMISSION_H */
