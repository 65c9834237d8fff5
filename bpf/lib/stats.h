/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * stats.h - per-CPU counters; no atomics on the hot path. A packet counts
 * its outcome and the events of its path; RX is not counted (it is the sum
 * of the outcomes), and the common ends of a path are one combined counter
 * (enum weir_stat_path), so a connection hit or a reply costs one update of
 * `stats` besides its VIP's and DIP's traffic.
 */
#ifndef WEIR_STATS_H
#define WEIR_STATS_H

#include "maps.h"

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		*v += 1;
}

/* No event on the path to an outcome (stat_outcome). */
#define STAT_NO_EVENT WEIR_STAT_MAX

/* The packet ends in `outcome`, its path having met `event` (a connection
 * hit, a reverse-NAT reply) or STAT_NO_EVENT. Hit or reply and then TX or
 * redirect is one combined counter; anything else counts both. */
static __always_inline void stat_outcome(__u32 event, __u32 outcome)
{
	__u32 idx = outcome;

	if (event == WEIR_STAT_CONN_HIT && outcome == WEIR_STAT_TX)
		idx = WEIR_STAT_HIT_TX;
	else if (event == WEIR_STAT_CONN_HIT && outcome == WEIR_STAT_REDIRECT)
		idx = WEIR_STAT_HIT_REDIRECT;
	else if (event == WEIR_STAT_REV_NAT && outcome == WEIR_STAT_TX)
		idx = WEIR_STAT_REV_TX;
	else if (event == WEIR_STAT_REV_NAT && outcome == WEIR_STAT_REDIRECT)
		idx = WEIR_STAT_REV_REDIRECT;
	else if (event != STAT_NO_EVENT)
		stat_inc(event);
	/* Two counting sites, not three: every one is an inlined lookup. */
	stat_inc(idx);
}

static __always_inline void traffic_add(void *map, __u32 idx, __u64 bytes, int new_conn)
{
	struct weir_traffic *t = bpf_map_lookup_elem(map, &idx);

	if (!t)
		return;
	t->packets += 1;
	t->bytes += bytes;
	if (new_conn)
		t->new_conns += 1;
}

#endif /* WEIR_STATS_H */
