/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * vip_match.h - is a packet's destination a VIP? Every packet asks, so the
 * common answer comes from one array slot and a 20-byte compare instead of
 * a hash-map lookup (jhash, bucket walk, memcmp) in `vips`.
 *
 * The key hashes to a slot of `vip_slots`; user space keeps every key of
 * `vips` either in its slot (USED) or its slot marked MORE (weir.h), and
 * only then does the packet fall back to `vips`. weir-core
 * (crates/weir-core/src/vip_slot.rs) computes the same slot.
 */
#ifndef WEIR_VIP_MATCH_H
#define WEIR_VIP_MATCH_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "weir.h"
#include "lib/maps.h"

/* 32 - log2(slots in `vip_slots`, a power of two of at least 4): set by
 * the loader. The default fits WEIR_DEFAULT_VIP_SLOTS. */
const volatile __u32 cfg_vip_slot_shift = 22;

/* Multiplicative (Fibonacci) hash of the key's five 32-bit words, read as
 * little-endian words: its top bits, the best mixed, are the slot. */
static __always_inline __u32 weir_vip_slot_of(const struct weir_vip_key *key, __u32 shift)
{
	const __u32 *w = (const __u32 *)key;
	__u32 h = 0;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*key) / 4); i++)
		h = (h + w[i]) * WEIR_VIP_SLOT_MULT;
	return h >> shift;
}

static __always_inline int vip_key_equal(const struct weir_vip_key *a,
					 const struct weir_vip_key *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) |
		(x[4] ^ y[4])) == 0;
}

/* The VIP `key` names, or NULL. */
static __always_inline struct weir_vip *vip_match(const struct weir_vip_key *key)
{
	__u32 idx = weir_vip_slot_of(key, cfg_vip_slot_shift);
	struct weir_vip_slot *slot = bpf_map_lookup_elem(&vip_slots, &idx);

	if (!slot)
		return NULL;
	if ((slot->flags & WEIR_VIP_SLOT_USED) && vip_key_equal(&slot->key, key))
		return &slot->vip;
	if (slot->flags & WEIR_VIP_SLOT_MORE)
		return bpf_map_lookup_elem(&vips, key);
	return NULL;
}

#endif /* WEIR_VIP_MATCH_H */
