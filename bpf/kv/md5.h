/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * md5.h - twemproxy's `md5` key hash for XDP: RFC 1321 MD5 over the key
 * bytes, then the first four digest bytes read little-endian (nutcracker's
 * hash_md5), which is MD5's state word A after the last block.
 * weir_kv::route::hash::md5_u32 is the Rust twin.
 *
 * Keys are 1..250 bytes, so the padded message (key, 0x80, zeros, 64-bit
 * bit length) is at most 5 64-byte blocks. It is built, as 32-bit words,
 * in a per-CPU map (kv_md5_msg, 320 bytes; the program's whole stack is
 * 512) without a data-dependent branch, so the verifier walks each block
 * once. A block's 64 steps are unrolled: constant message indexes, constant
 * shifts. The loop over blocks is bounded (not unrolled), and the function
 * is global: verified once whatever the number of call sites (and, since
 * Linux 6.8, not at all in a pool that never calls it).
 */
#ifndef WEIR_MD5_H
#define WEIR_MD5_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "weir_kv.h"

/* Blocks of the longest padded key: (250 + 1 + 8 + 63) / 64. */
#define KV_MD5_MAX_BLOCKS 5
#define KV_MD5_BUF (KV_MD5_MAX_BLOCKS * 64)

/* The padded message, per CPU, as 32-bit words so that every copy and read
 * is a word access. */
struct kv_md5_msg {
	__u32 w[KV_MD5_BUF / 4];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kv_md5_msg);
} kv_md5_msg SEC(".maps");

static __always_inline __u32 kv_md5_rotl(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

#define KV_MD5_F(x, y, z) (((x) & (y)) | (~(x) & (z)))
#define KV_MD5_G(x, y, z) (((x) & (z)) | ((y) & ~(z)))
#define KV_MD5_H(x, y, z) ((x) ^ (y) ^ (z))
#define KV_MD5_I(x, y, z) ((y) ^ ((x) | ~(z)))

/* One step: a = b + ((a + fn(b, c, d) + m + k) <<< s). */
#define KV_MD5_STEP(fn, a, b, c, d, m, k, s)                       \
	do {                                                       \
		(a) += fn((b), (c), (d)) + (m) + (__u32)(k);       \
		(a) = kv_md5_rotl((a), (s)) + (b);                 \
	} while (0)

/* Message word `x` as MD5 reads it: little-endian. */
static __always_inline __u32 kv_md5_le32(__u32 x)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return x;
#else
	return __builtin_bswap32(x);
#endif
}

/*
 * nutcracker's hash_md5 of k->data[0..k->len): 0 for a NULL key or a length
 * outside 1..WEIR_KV_MAX_KEY (never routed). The key must be zero-padded
 * past its length, as kv_key_load leaves it (it is the cache map's key too).
 * Global: verified once.
 */
__noinline __u32 kv_md5(const struct weir_kv_key *k)
{
	__u32 a0 = 0x67452301, b0 = 0xefcdab89, c0 = 0x98badcfe, d0 = 0x10325476;
	__u32 zero = 0, len, nblocks, lenw;
	const __u32 *kw;
	struct kv_md5_msg *msg;

	if (!k)
		return 0;
	len = k->len;
	if (len == 0 || len > WEIR_KV_MAX_KEY)
		return 0;
	msg = bpf_map_lookup_elem(&kv_md5_msg, &zero);
	if (!msg)
		return 0;
	/* key, 0x80, zeros, then the bit length in the last 8 bytes; the key
	 * bytes start at offset 4 of struct weir_kv_key, so they are words too */
	kw = (const __u32 *)k->data;
#pragma unroll
	for (int i = 0; i < WEIR_KV_KEY_BUF / 4; i++)
		msg->w[i] = kw[i];
#pragma unroll
	for (int i = WEIR_KV_KEY_BUF / 4; i < KV_MD5_BUF / 4; i++)
		msg->w[i] = 0;
	((__u8 *)msg->w)[len & 0xff] = 0x80;
	nblocks = (len + 8) / 64 + 1;
	lenw = nblocks * 16 - 2;
	/* clang knows lenw <= 78 and would drop the check the verifier needs */
	asm volatile("" : "+r"(lenw));
	if (lenw > KV_MD5_BUF / 4 - 2)
		return 0;
	/* A key is at most 250 bytes: the high word of the bit length is 0. */
	msg->w[lenw] = kv_md5_le32(len * 8);

	for (__u32 blk = 0; blk < KV_MD5_MAX_BLOCKS; blk++) {
		__u32 a = a0, b = b0, c = c0, d = d0, off = blk * 16;
		const __u32 *p;

		if (blk >= nblocks || off > KV_MD5_BUF / 4 - 16)
			break;
		p = &msg->w[off];
		/* message word i of this block */
#define KV_MD5_M(i) kv_md5_le32(p[i])

		KV_MD5_STEP(KV_MD5_F, a, b, c, d, KV_MD5_M(0), 0xd76aa478, 7);
		KV_MD5_STEP(KV_MD5_F, d, a, b, c, KV_MD5_M(1), 0xe8c7b756, 12);
		KV_MD5_STEP(KV_MD5_F, c, d, a, b, KV_MD5_M(2), 0x242070db, 17);
		KV_MD5_STEP(KV_MD5_F, b, c, d, a, KV_MD5_M(3), 0xc1bdceee, 22);
		KV_MD5_STEP(KV_MD5_F, a, b, c, d, KV_MD5_M(4), 0xf57c0faf, 7);
		KV_MD5_STEP(KV_MD5_F, d, a, b, c, KV_MD5_M(5), 0x4787c62a, 12);
		KV_MD5_STEP(KV_MD5_F, c, d, a, b, KV_MD5_M(6), 0xa8304613, 17);
		KV_MD5_STEP(KV_MD5_F, b, c, d, a, KV_MD5_M(7), 0xfd469501, 22);
		KV_MD5_STEP(KV_MD5_F, a, b, c, d, KV_MD5_M(8), 0x698098d8, 7);
		KV_MD5_STEP(KV_MD5_F, d, a, b, c, KV_MD5_M(9), 0x8b44f7af, 12);
		KV_MD5_STEP(KV_MD5_F, c, d, a, b, KV_MD5_M(10), 0xffff5bb1, 17);
		KV_MD5_STEP(KV_MD5_F, b, c, d, a, KV_MD5_M(11), 0x895cd7be, 22);
		KV_MD5_STEP(KV_MD5_F, a, b, c, d, KV_MD5_M(12), 0x6b901122, 7);
		KV_MD5_STEP(KV_MD5_F, d, a, b, c, KV_MD5_M(13), 0xfd987193, 12);
		KV_MD5_STEP(KV_MD5_F, c, d, a, b, KV_MD5_M(14), 0xa679438e, 17);
		KV_MD5_STEP(KV_MD5_F, b, c, d, a, KV_MD5_M(15), 0x49b40821, 22);

		KV_MD5_STEP(KV_MD5_G, a, b, c, d, KV_MD5_M(1), 0xf61e2562, 5);
		KV_MD5_STEP(KV_MD5_G, d, a, b, c, KV_MD5_M(6), 0xc040b340, 9);
		KV_MD5_STEP(KV_MD5_G, c, d, a, b, KV_MD5_M(11), 0x265e5a51, 14);
		KV_MD5_STEP(KV_MD5_G, b, c, d, a, KV_MD5_M(0), 0xe9b6c7aa, 20);
		KV_MD5_STEP(KV_MD5_G, a, b, c, d, KV_MD5_M(5), 0xd62f105d, 5);
		KV_MD5_STEP(KV_MD5_G, d, a, b, c, KV_MD5_M(10), 0x02441453, 9);
		KV_MD5_STEP(KV_MD5_G, c, d, a, b, KV_MD5_M(15), 0xd8a1e681, 14);
		KV_MD5_STEP(KV_MD5_G, b, c, d, a, KV_MD5_M(4), 0xe7d3fbc8, 20);
		KV_MD5_STEP(KV_MD5_G, a, b, c, d, KV_MD5_M(9), 0x21e1cde6, 5);
		KV_MD5_STEP(KV_MD5_G, d, a, b, c, KV_MD5_M(14), 0xc33707d6, 9);
		KV_MD5_STEP(KV_MD5_G, c, d, a, b, KV_MD5_M(3), 0xf4d50d87, 14);
		KV_MD5_STEP(KV_MD5_G, b, c, d, a, KV_MD5_M(8), 0x455a14ed, 20);
		KV_MD5_STEP(KV_MD5_G, a, b, c, d, KV_MD5_M(13), 0xa9e3e905, 5);
		KV_MD5_STEP(KV_MD5_G, d, a, b, c, KV_MD5_M(2), 0xfcefa3f8, 9);
		KV_MD5_STEP(KV_MD5_G, c, d, a, b, KV_MD5_M(7), 0x676f02d9, 14);
		KV_MD5_STEP(KV_MD5_G, b, c, d, a, KV_MD5_M(12), 0x8d2a4c8a, 20);

		KV_MD5_STEP(KV_MD5_H, a, b, c, d, KV_MD5_M(5), 0xfffa3942, 4);
		KV_MD5_STEP(KV_MD5_H, d, a, b, c, KV_MD5_M(8), 0x8771f681, 11);
		KV_MD5_STEP(KV_MD5_H, c, d, a, b, KV_MD5_M(11), 0x6d9d6122, 16);
		KV_MD5_STEP(KV_MD5_H, b, c, d, a, KV_MD5_M(14), 0xfde5380c, 23);
		KV_MD5_STEP(KV_MD5_H, a, b, c, d, KV_MD5_M(1), 0xa4beea44, 4);
		KV_MD5_STEP(KV_MD5_H, d, a, b, c, KV_MD5_M(4), 0x4bdecfa9, 11);
		KV_MD5_STEP(KV_MD5_H, c, d, a, b, KV_MD5_M(7), 0xf6bb4b60, 16);
		KV_MD5_STEP(KV_MD5_H, b, c, d, a, KV_MD5_M(10), 0xbebfbc70, 23);
		KV_MD5_STEP(KV_MD5_H, a, b, c, d, KV_MD5_M(13), 0x289b7ec6, 4);
		KV_MD5_STEP(KV_MD5_H, d, a, b, c, KV_MD5_M(0), 0xeaa127fa, 11);
		KV_MD5_STEP(KV_MD5_H, c, d, a, b, KV_MD5_M(3), 0xd4ef3085, 16);
		KV_MD5_STEP(KV_MD5_H, b, c, d, a, KV_MD5_M(6), 0x04881d05, 23);
		KV_MD5_STEP(KV_MD5_H, a, b, c, d, KV_MD5_M(9), 0xd9d4d039, 4);
		KV_MD5_STEP(KV_MD5_H, d, a, b, c, KV_MD5_M(12), 0xe6db99e5, 11);
		KV_MD5_STEP(KV_MD5_H, c, d, a, b, KV_MD5_M(15), 0x1fa27cf8, 16);
		KV_MD5_STEP(KV_MD5_H, b, c, d, a, KV_MD5_M(2), 0xc4ac5665, 23);

		KV_MD5_STEP(KV_MD5_I, a, b, c, d, KV_MD5_M(0), 0xf4292244, 6);
		KV_MD5_STEP(KV_MD5_I, d, a, b, c, KV_MD5_M(7), 0x432aff97, 10);
		KV_MD5_STEP(KV_MD5_I, c, d, a, b, KV_MD5_M(14), 0xab9423a7, 15);
		KV_MD5_STEP(KV_MD5_I, b, c, d, a, KV_MD5_M(5), 0xfc93a039, 21);
		KV_MD5_STEP(KV_MD5_I, a, b, c, d, KV_MD5_M(12), 0x655b59c3, 6);
		KV_MD5_STEP(KV_MD5_I, d, a, b, c, KV_MD5_M(3), 0x8f0ccc92, 10);
		KV_MD5_STEP(KV_MD5_I, c, d, a, b, KV_MD5_M(10), 0xffeff47d, 15);
		KV_MD5_STEP(KV_MD5_I, b, c, d, a, KV_MD5_M(1), 0x85845dd1, 21);
		KV_MD5_STEP(KV_MD5_I, a, b, c, d, KV_MD5_M(8), 0x6fa87e4f, 6);
		KV_MD5_STEP(KV_MD5_I, d, a, b, c, KV_MD5_M(15), 0xfe2ce6e0, 10);
		KV_MD5_STEP(KV_MD5_I, c, d, a, b, KV_MD5_M(6), 0xa3014314, 15);
		KV_MD5_STEP(KV_MD5_I, b, c, d, a, KV_MD5_M(13), 0x4e0811a1, 21);
		KV_MD5_STEP(KV_MD5_I, a, b, c, d, KV_MD5_M(4), 0xf7537e82, 6);
		KV_MD5_STEP(KV_MD5_I, d, a, b, c, KV_MD5_M(11), 0xbd3af235, 10);
		KV_MD5_STEP(KV_MD5_I, c, d, a, b, KV_MD5_M(2), 0x2ad7d2bb, 15);
		KV_MD5_STEP(KV_MD5_I, b, c, d, a, KV_MD5_M(9), 0xeb86d391, 21);

#undef KV_MD5_M
		a0 += a;
		b0 += b;
		c0 += c;
		d0 += d;
	}
	/* hash_md5: digest bytes 0..3 little-endian = state word A. */
	return a0;
}

#endif /* WEIR_MD5_H */
