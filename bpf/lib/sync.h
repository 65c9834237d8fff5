/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sync.h - announcing installed connections for connection sync. Each site
 * that installs an established entry in `conns` calls sync_announce() once;
 * with cfg_conn_sync off (a single node, or sync disabled) the verifier
 * prunes the call, so it costs nothing. The event goes into a ring buffer
 * that `weir serve`'s sync sender drains and sends to the other nodes; a
 * full ring drops the announcement and counts it.
 */
#ifndef WEIR_LIB_SYNC_H
#define WEIR_LIB_SYNC_H

#include "maps.h"
#include "parse.h"
#include "weir_sync.h"

/* Load-time: 1 = announce installs (the node is in a cluster with sync on). */
const volatile __u32 cfg_conn_sync = 0;

/* Installed connections for the sync sender; the loader sizes it (one page
 * when sync is off). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} sync_events SEC(".maps");

/* enum weir_sync_stat, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_SYNC_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} sync_stats SEC(".maps");

static __always_inline void sync_stat(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&sync_stats, &idx);

	if (v)
		*v += 1;
}

/* Announces the connection `entry` of `pkt`, pinned to `dip`. */
static __always_inline void sync_announce(const struct packet *pkt, const struct weir_dip *dip,
					  const struct weir_conn *entry)
{
	struct weir_sync_event *ev;

	if (!cfg_conn_sync)
		return;
	ev = bpf_ringbuf_reserve(&sync_events, sizeof(*ev), 0);
	if (!ev) {
		sync_stat(WEIR_SYNC_STAT_LOST);
		return;
	}
	__builtin_memcpy(&ev->key, &pkt->key, sizeof(ev->key));
	__builtin_memcpy(ev->dip_addr, dip->addr, sizeof(ev->dip_addr));
	ev->dip_port = dip->port;
	ev->close_flags = entry->close_flags;
	ev->pad = 0;
	ev->dip_id = entry->dip_id;
	ev->installed_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(ev, 0);
	sync_stat(WEIR_SYNC_STAT_ANNOUNCED);
}

#endif /* WEIR_LIB_SYNC_H */
