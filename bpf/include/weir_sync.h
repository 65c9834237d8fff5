/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * weir_sync.h - connection sync's event, shared by weir_lb (lib/sync.h) and
 * Rust (weir-abi). When a node installs an established connection it tells
 * its user space through a ring buffer, which tells the cluster's other
 * nodes (crates/weir-cluster/src/sync).
 */
#ifndef WEIR_SYNC_H
#define WEIR_SYNC_H

#include <linux/types.h>
#include "weir.h"

/* A connection weir_lb just installed in `conns`: its key, and its DIP by
 * identity (slots are per node). */
struct weir_sync_event {
	struct weir_flow_key key;
	__be32 dip_addr[4];
	__be16 dip_port;      /* weir_dip.port: NAT port, 0 = the VIP's */
	__u8 close_flags;     /* weir_conn.close_flags */
	__u8 pad;
	__u32 dip_id;         /* this node's slot (observability) */
	__u64 installed_ns;   /* bpf_ktime_get_ns() when it was installed */
};
_Static_assert(sizeof(struct weir_sync_event) == 72, "weir_sync_event size");

/* Per-CPU counters of the announcing side (map sync_stats). */
enum weir_sync_stat {
	WEIR_SYNC_STAT_ANNOUNCED = 0, /* events put in the ring */
	WEIR_SYNC_STAT_LOST,          /* the ring was full: not announced */
	WEIR_SYNC_STAT_MAX,
};

#endif /* WEIR_SYNC_H */
