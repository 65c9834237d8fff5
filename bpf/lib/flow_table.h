/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * flow_table.h - the connection tables by address family. An IPv4 tuple is
 * kept under the 16-byte struct weir_flow_key4 in `conns4`/`rev_nat4`, an
 * IPv6 one under struct weir_flow_key in `conns`/`rev_nat` (maps.h): the
 * short key makes an IPv4 entry 104 bytes instead of 128. Callers hold the wire tuple (struct weir_flow_key); these
 * helpers pick the table by its family, so no call site branches on it.
 * The half-open tables keep one table for both families.
 */
#ifndef WEIR_FLOW_TABLE_H
#define WEIR_FLOW_TABLE_H

#include "maps.h"

/* The compact key of an IPv4 tuple (weir.h: word 0 holds the address). */
static __always_inline void flow_key4(const struct weir_flow_key *key, struct weir_flow_key4 *k4)
{
	k4->src = key->src[0];
	k4->dst = key->dst[0];
	k4->sport = key->sport;
	k4->dport = key->dport;
	k4->proto = key->proto;
}

/* Keeps a flow_*() helper's IPv4 map call apart from its IPv6 one. Clang
 * may otherwise merge the two into one call fed by both maps, and the
 * verifier turns a map call into a direct call (or, for a lookup, inlines
 * it) only where one map reaches it: a merged call costs every packet the
 * generic helper and its indirect call. An empty asm after one of the two
 * calls leaves the two call sequences different, which keeps them apart. */
#define flow_call_apart(result) asm volatile("" : "+r"(result))

static __always_inline void *flow_lookup(void *map6, void *map4, const struct weir_flow_key *key)
{
	struct weir_flow_key4 k4 = {};
	void *value;

	if (key->family != WEIR_AF_INET)
		return bpf_map_lookup_elem(map6, key);
	flow_key4(key, &k4);
	value = bpf_map_lookup_elem(map4, &k4);
	flow_call_apart(value);
	return value;
}

static __always_inline long flow_update(void *map6, void *map4, const struct weir_flow_key *key,
					const void *value)
{
	struct weir_flow_key4 k4 = {};
	long rc;

	if (key->family != WEIR_AF_INET)
		return bpf_map_update_elem(map6, key, value, BPF_ANY);
	flow_key4(key, &k4);
	rc = bpf_map_update_elem(map4, &k4, value, BPF_ANY);
	flow_call_apart(rc);
	return rc;
}

static __always_inline long flow_delete(void *map6, void *map4, const struct weir_flow_key *key)
{
	struct weir_flow_key4 k4 = {};
	long rc;

	if (key->family != WEIR_AF_INET)
		return bpf_map_delete_elem(map6, key);
	flow_key4(key, &k4);
	rc = bpf_map_delete_elem(map4, &k4);
	flow_call_apart(rc);
	return rc;
}

/* The established connection of a client tuple. */
static __always_inline struct weir_conn *conn_lookup(const struct weir_flow_key *key)
{
	return flow_lookup(&conns, &conns4, key);
}

static __always_inline long conn_update(const struct weir_flow_key *key,
					const struct weir_conn *conn)
{
	return flow_update(&conns, &conns4, key, conn);
}

static __always_inline long conn_delete(const struct weir_flow_key *key)
{
	return flow_delete(&conns, &conns4, key);
}

/* The reverse entry of a reply tuple (nat). */
static __always_inline struct weir_rev_nat *rev_lookup(const struct weir_flow_key *key)
{
	return flow_lookup(&rev_nat, &rev_nat4, key);
}

static __always_inline long rev_update(const struct weir_flow_key *key,
				       const struct weir_rev_nat *rev)
{
	return flow_update(&rev_nat, &rev_nat4, key, rev);
}

static __always_inline long rev_delete(const struct weir_flow_key *key)
{
	return flow_delete(&rev_nat, &rev_nat4, key);
}

#endif /* WEIR_FLOW_TABLE_H */
