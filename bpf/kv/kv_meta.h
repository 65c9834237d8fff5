/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * kv_meta.h - memcached's meta commands (mg ms md ma me) in the switch: what
 * their flags ask for, and the reply line of an mg that the cache answers.
 *
 * A meta request is routed by its key like a classic one. `b` (base64 key)
 * is not decoded here: such requests go to the kernel. An mg is answered
 * from the cache only when every flag can be answered from what an entry
 * holds - v (value), f (client flags), s (size), c (cas, when known), k (the
 * key), O (opaque, echoed) and q (changes nothing on a hit) - each at most
 * once. Every other flag (t, h, l, T, N, R, E, ...) depends on or changes
 * state only the server holds, so that mg goes to the server. memcached
 * echoes the returned flags in the order the request gives them; so does
 * kv_meta_render.
 */
#ifndef WEIR_KV_META_H
#define WEIR_KV_META_H

#include <linux/types.h>
#include "kv_maps.h"
#include "memcached.h"
#include "kv_cache.h"

/* What the flags of a meta request ask for. */
#define KV_META_BASE64 1    /* b: the key is base64 */
#define KV_META_CHANGES 2   /* T or N: an mg that changes the item */
#define KV_META_SERVABLE 4  /* every flag can be answered from the cache */

#define KV_META_OPAQUE_MAX 32

#define KV_META_VALUE 8      /* v: an mg asks for the value */

/* What the bpf_loop steps below get: the scratch, which holds their state. */
struct kv_meta_ctx {
	struct kv_scratch *s;
};

/* One flag token (token i + 2). A bpf_loop step: verified once, however
 * many flags a request has. */
static long kv_meta_flag_step(__u64 i, void *arg)
{
	struct kv_scratch *s = ((struct kv_meta_ctx *)arg)->s;
	__u32 t = i + 2, start, len, bit = 0;
	__u8 c;

	if (!s || t >= s->ntok)
		return 1;
	if (t < s->meta_first)
		return 0;
	start = s->tok_start[t & KV_TOK_MASK];
	len = s->tok_len[t & KV_TOK_MASK];
	c = s->buf[start & KV_SCAN_MASK];
	if (c == 'b')
		s->meta_f |= KV_META_BASE64;
	if (c == 'T' || c == 'N')
		s->meta_f |= KV_META_CHANGES;
	if (c == 'v' && len == 1)
		s->meta_f |= KV_META_VALUE;
	switch (c) {
	case 'v': bit = 1; break;
	case 'q': bit = 2; break;
	case 'f': bit = 4; break;
	case 's': bit = 8; break;
	case 'c': bit = 16; break;
	case 'k': bit = 32; break;
	case 'O': bit = 64; break;
	default: break;
	}
	if (!bit || (s->meta_seen & bit) ||
	    (c == 'O' ? (len < 2 || len > KV_META_OPAQUE_MAX + 1) : len != 1))
		s->meta_f &= ~KV_META_SERVABLE;
	s->meta_seen |= bit;
	return 0;
}

/* Reads the flag tokens from token `first` on (2 for mg md ma me, 3 for ms,
 * whose token 2 is the data length). */
static __always_inline int kv_meta_flags(struct kv_scratch *s, __u32 first)
{
	struct kv_meta_ctx m = { .s = s };
	__u32 ntok = s->ntok;

	s->meta_first = first;
	s->meta_seen = 0;
	s->meta_f = KV_META_SERVABLE;
	if (ntok > first)
		bpf_loop(ntok - 2, kv_meta_flag_step, &m, 0);
	return s->meta_f;
}

/* Every index into s->meta is masked, and the mask kept from the compiler
 * (barrier_var), which would drop it where it knows the bound, in a form the
 * verifier does not follow. */
static __always_inline __u32 kv_meta_put(struct kv_scratch *s, __u32 off, __u8 c)
{
	__u32 i = off;

	barrier_var(i);
	s->meta[i & KV_META_HDR_MASK] = c;
	return off + 1;
}

/* Appends `v` in decimal: counts the digits, then writes them from the
 * last one back. */
static __always_inline __u32 kv_meta_dec(struct kv_scratch *s, __u32 off, __u64 v)
{
	__u64 x = v;
	__u32 n = 1;

	for (int i = 0; i < 19; i++) {
		x /= 10;
		if (!x)
			break;
		n++;
	}
	for (int i = 0; i < 20; i++) {
		if ((__u32)i >= n)
			break;
		kv_meta_put(s, off + n - 1 - i, '0' + v % 10);
		v /= 10;
	}
	return off + n;
}

/* Appends " <flag><v>", a returned flag with a number. */
static __always_inline __u32 kv_meta_number(struct kv_scratch *s, __u32 off, __u8 flag, __u64 v)
{
	off = kv_meta_put(s, off, ' ');
	off = kv_meta_put(s, off, flag);
	return kv_meta_dec(s, off, v);
}

/* Step 0 of an mg hit's reply line: "VA <size>" or "HD"; step i > 0: what
 * flag token i + 1 returns. */
static long kv_meta_step(__u64 i, void *arg)
{
	struct kv_scratch *s = ((struct kv_meta_ctx *)arg)->s;
	__u32 t = i + 1, start, len, off, klen;
	__u8 c;

	if (!s)
		return 1;
	if (i == 0) {
		if (s->meta_value) {
			off = kv_meta_put(s, 0, 'V');
			off = kv_meta_put(s, off, 'A');
			off = kv_meta_put(s, off, ' ');
			off = kv_meta_dec(s, off, s->meta_vlen);
		} else {
			off = kv_meta_put(s, 0, 'H');
			off = kv_meta_put(s, off, 'D');
		}
		s->meta_len = off;
		return 0;
	}
	if (t >= s->ntok)
		return 1;
	start = s->tok_start[t & KV_TOK_MASK];
	len = s->tok_len[t & KV_TOK_MASK];
	c = s->buf[start & KV_SCAN_MASK];
	off = s->meta_len;
	switch (c) {
	case 'v':
	case 'q':
		return 0;
	case 'f':
		off = kv_meta_number(s, off, 'f', s->meta_flags);
		break;
	case 's':
		off = kv_meta_number(s, off, 's', s->meta_vlen);
		break;
	case 'c':
		if (!s->meta_has_cas) {
			s->meta_err = 1;
			return 1;
		}
		off = kv_meta_number(s, off, 'c', s->meta_cas);
		break;
	case 'k':
		off = kv_meta_put(s, off, ' ');
		off = kv_meta_put(s, off, 'k');
		klen = s->key.len;
		for (__u32 j = 0; j < WEIR_KV_MAX_KEY; j++) {
			if (j >= klen)
				break;
			kv_meta_put(s, off + j, s->key.data[j]);
		}
		off += klen;
		break;
	case 'O':
		off = kv_meta_put(s, off, ' ');
		for (__u32 j = 0; j < KV_META_OPAQUE_MAX + 1; j++) {
			if (j >= len)
				break;
			kv_meta_put(s, off + j, s->buf[(start + j) & KV_SCAN_MASK]);
		}
		off += len;
		break;
	default:
		s->meta_err = 1;
		return 1;
	}
	/* Each flag comes once (kv_meta_flags), so the line stays far below
	 * the buffer; this only keeps a broken invariant from wrapping. */
	if (off > KV_META_HDR_MAX - 2) {
		s->meta_err = 1;
		return 1;
	}
	s->meta_len = off;
	return 0;
}

/* The reply line's one's-complement sum, byte by byte (it starts the body,
 * at an even offset). */
static long kv_meta_sum_step(__u64 i, void *arg)
{
	struct kv_scratch *s = ((struct kv_meta_ctx *)arg)->s;
	__u8 b;

	if (!s)
		return 1;
	b = s->meta[i & KV_META_HDR_MASK];
	s->meta_sum += (i & 1) ? b : (__u32)b << 8;
	return 0;
}

/*
 * Renders the reply line of an mg hit into s->meta ("VA <len> <flags>\r\n"
 * with v, "HD <flags>\r\n" without) with its sum. `v` says whether the
 * request asks for the value. Returns 0, or -1 if the entry cannot answer
 * (c without a known cas). Every loop is a bpf_loop step, so the lengths
 * reach the rest of the program as one unknown, not one state each.
 */
static __always_inline int kv_meta_render(struct kv_scratch *s, const struct kv_hit *hit,
					  __u32 has_cas, __u32 v)
{
	struct kv_meta_ctx m = { .s = s };
	__u32 off, ntok = s->ntok;

	s->meta_cas = hit->cas;
	s->meta_flags = hit->flags;
	s->meta_vlen = hit->value_len;
	s->meta_has_cas = has_cas;
	s->meta_err = 0;
	s->meta_value = v;
	s->meta_len = 0;
	s->meta_sum = 0;
	if (ntok < 2)
		return -1;
	bpf_loop(ntok - 1, kv_meta_step, &m, 0);
	if (s->meta_err)
		return -1;
	off = s->meta_len;
	if (off == 0 || off > KV_META_HDR_MAX - 2)
		return -1;
	off = kv_meta_put(s, off, '\r');
	off = kv_meta_put(s, off, '\n');
	s->meta_len = off;
	bpf_loop(off, kv_meta_sum_step, &m, 0);
	return 0;
}

#endif /* WEIR_KV_META_H */
