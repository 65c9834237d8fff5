/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * weir_decap.h - what the backends' decapsulation program (weir_decap)
 * shares with Rust (crate weir-abi): its counters and the key of the
 * addresses it decapsulates for.
 */
#ifndef WEIR_DECAP_H
#define WEIR_DECAP_H

#include <linux/types.h>

/* An address of this host that encapsulated packets are sent to (map
 * `decap_addrs`); an IPv4 address sits in word 0, words 1..3 zero. */
struct weir_decap_addr {
	__be32 addr[4];
	__u8 family; /* WEIR_AF_INET or WEIR_AF_INET6 */
	__u8 pad[3];
};
_Static_assert(sizeof(struct weir_decap_addr) == 20, "weir_decap_addr size");

/* Per-CPU counters of weir_decap (map `decap_stats`). Every frame ends in
 * exactly one. */
enum weir_decap_stat {
	WEIR_DECAP_STAT_DECAPSULATED = 0, /* outer header stripped, inner passed to the kernel */
	WEIR_DECAP_STAT_NOT_ENCAP,        /* not IPIP, IPv6-in-IP or GUE: passed untouched */
	WEIR_DECAP_STAT_NOT_OURS,         /* encapsulated, to an address not in decap_addrs:
					   * passed untouched */
	WEIR_DECAP_STAT_MALFORMED,        /* encapsulated but truncated, inconsistent lengths,
					   * fragmented, or an inner header that does not match:
					   * dropped */
	WEIR_DECAP_STAT_MAX,
};

#endif /* WEIR_DECAP_H */
