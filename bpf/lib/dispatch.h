/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * dispatch.h - AWFD in-band dispatch of a new flow (Spotlight, IV-A):
 * stage 1 picks a priority class through cumulative ranges over the flow
 * hash, stage 2 picks a member of the class by an independent hash. The
 * same function is weir_core::dispatch::awfd::AwfdTable::select in Rust.
 */
#ifndef WEIR_DISPATCH_H
#define WEIR_DISPATCH_H

#include "maps.h"
#include "hash.h"

/* Returns 0 and sets *dip_id and *version, or -1 if the VIP has no DIP. */
static __always_inline int awfd_select(__u32 vip_id, __u32 hash, __u32 *dip_id, __u32 *version)
{
	struct weir_class_members *members;
	struct weir_class_ranges *ranges;
	__u32 *ver, slot, idx, scaled, range = 0;

	ver = bpf_map_lookup_elem(&table_version, &vip_id);
	if (!ver)
		return -1;
	*version = *ver;
	slot = *ver % WEIR_TABLE_SLOTS;
	idx = vip_id * WEIR_TABLE_SLOTS + slot;
	ranges = bpf_map_lookup_elem(&class_ranges, &idx);
	if (!ranges || ranges->nr == 0 || ranges->total == 0)
		return -1;

	scaled = ((__u64)hash * ranges->total) >> 32;
	for (__u32 i = 0; i < WEIR_MAX_CLASSES; i++) {
		range = i;
		if (i + 1 >= ranges->nr || scaled < ranges->bound[i])
			break;
	}

	idx = idx * WEIR_MAX_CLASSES + range;
	members = bpf_map_lookup_elem(&class_members, &idx);
	if (!members || members->nr == 0 || members->nr > WEIR_MAX_CLASS_MEMBERS)
		return -1;
	idx = weir_rehash(hash) % members->nr;
	/* The compiler knows idx < nr <= 256 and would drop the mask that the
	 * verifier needs to bound the array index. */
	barrier_var(idx);
	*dip_id = members->dip_id[idx & (WEIR_MAX_CLASS_MEMBERS - 1)];
	return 0;
}

#endif /* WEIR_DISPATCH_H */
