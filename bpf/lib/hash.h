/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * hash.h - the flow hash. weir-core (crates/weir-core/src/flow_hash.rs)
 * implements the same function; the shared test vectors in
 * tests/vectors/ prove both pick the same DIP for the same flow.
 *
 * Murmur3-32 over the ten 32-bit words of struct weir_flow_key, read as
 * little-endian words, with a load-time seed. weir_rehash() derives the
 * independent stage-2 hash from the flow hash.
 */
#ifndef WEIR_HASH_H
#define WEIR_HASH_H

#include <linux/types.h>
#include "weir.h"

static __always_inline __u32 rotl32(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 fmix32(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/* One Murmur3-32 block: word k mixed into the running hash h. */
static __always_inline __u32 murmur3_block(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = rotl32(k, 15);
	k *= 0x1b873593;
	h ^= k;
	h = rotl32(h, 13);
	return h * 5 + 0xe6546b64;
}

static __always_inline __u32 weir_flow_hash(const struct weir_flow_key *key, __u32 seed)
{
	const __u32 *w = (const __u32 *)key;
	__u32 h = seed;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*key) / 4); i++)
		h = murmur3_block(h, w[i]);
	h ^= sizeof(*key);
	return fmix32(h);
}

static __always_inline __u32 weir_rehash(__u32 h)
{
	return fmix32(h ^ 0x9e3779b9);
}

#endif /* WEIR_HASH_H */
