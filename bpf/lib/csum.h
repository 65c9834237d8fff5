/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * csum.h - incremental Internet checksum updates (RFC 1624:
 * HC' = ~(~HC + ~m + m')). Values are taken as they sit in memory; the
 * one's-complement sum does not care about byte order as long as the
 * checksum and the data are read the same way.
 */
#ifndef WEIR_CSUM_H
#define WEIR_CSUM_H

#include <linux/types.h>

static __always_inline __u16 csum_fold32(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* Replace the 16-bit word `from` by `to` under checksum *sum. */
static __always_inline void csum_replace2(__u16 *sum, __u16 from, __u16 to)
{
	__u32 acc = (__u16)~*sum;

	acc += (__u16)~from;
	acc += to;
	*sum = ~csum_fold32(acc);
}

/* Replace the 32-bit word `from` by `to` under checksum *sum. */
static __always_inline void csum_replace4(__u16 *sum, __u32 from, __u32 to)
{
	__u32 acc = (__u16)~*sum;

	acc += (__u16)~(from & 0xffff);
	acc += (__u16)~(from >> 16);
	acc += to & 0xffff;
	acc += to >> 16;
	*sum = ~csum_fold32(acc);
}

#endif /* WEIR_CSUM_H */
