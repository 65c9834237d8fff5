/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* stats.h - per-CPU counters; no atomics on the hot path. */
#ifndef WEIR_STATS_H
#define WEIR_STATS_H

#include "maps.h"

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		*v += 1;
}

static __always_inline void traffic_add(void *map, __u32 idx, __u64 bytes, int new_conn)
{
	struct weir_traffic *t = bpf_map_lookup_elem(map, &idx);

	if (!t)
		return;
	t->packets += 1;
	t->bytes += bytes;
	t->new_conns += new_conn;
}

#endif /* WEIR_STATS_H */
