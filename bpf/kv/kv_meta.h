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

struct kv_meta_flags_ctx {
	const struct kv_scratch *s;
	__u32 first;
	__u32 seen;
	int f;
};

/* One flag token (token i + 2). A bpf_loop step: verified once, however
 * many flags a request has. */
static long kv_meta_flag_step(__u64 i, void *arg)
{
	struct kv_meta_flags_ctx *m = arg;
	const struct kv_scratch *s = m->s;
	__u32 t = i + 2, start, len, bit = 0;
	__u8 c;

	if (!s || t >= s->ntok)
		return 1;
	if (t < m->first)
		return 0;
	start = s->tok_start[t & KV_TOK_MASK];
	len = s->tok_len[t & KV_TOK_MASK];
	c = s->buf[start & KV_SCAN_MASK];
	if (c == 'b')
		m->f |= KV_META_BASE64;
	if (c == 'T' || c == 'N')
		m->f |= KV_META_CHANGES;
	if (c == 'v' && len == 1)
		m->f |= KV_META_VALUE;
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
	if (!bit || (m->seen & bit) ||
	    (c == 'O' ? (len < 2 || len > KV_META_OPAQUE_MAX + 1) : len != 1))
		m->f &= ~KV_META_SERVABLE;
	m->seen |= bit;
	return 0;
}

/* Reads the flag tokens from token `first` on (2 for mg md ma me, 3 for ms,
 * whose token 2 is the data length). */
static __always_inline int kv_meta_flags(const struct kv_scratch *s, __u32 first)
{
	struct kv_meta_flags_ctx m = { .s = s, .first = first, .f = KV_META_SERVABLE };
	__u32 ntok = s->ntok;

	if (ntok > first)
		bpf_loop(ntok - 2, kv_meta_flag_step, &m, 0);
	return m.f;
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

/* Appends `v` in decimal. */
static __always_inline __u32 kv_meta_dec(struct kv_scratch *s, __u32 off, __u64 v)
{
	__u8 tmp[32];
	__u32 n = 0;

	for (int i = 0; i < 20; i++) {
		tmp[i] = '0' + v % 10;
		v /= 10;
		n = i + 1;
		if (!v)
			break;
	}
	for (int i = 0; i < 20; i++) {
		if ((__u32)i >= n)
			break;
		kv_meta_put(s, off + i, tmp[(n - 1 - i) & 31]);
	}
	return off + n;
}

struct kv_meta_ctx {
	struct kv_scratch *s;
	__u64 cas;
	__u32 flags;
	__u32 value_len;
	__u32 has_cas;
	__u32 err;
};

/* One flag token (token i + 2) of an mg hit: appends what it returns. */
static long kv_meta_step(__u64 i, void *arg)
{
	struct kv_meta_ctx *m = arg;
	struct kv_scratch *s = m->s;
	__u32 t = i + 2, start, len, off, klen;
	__u8 c;

	if (!s)
		return 1;
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
		off = kv_meta_put(s, off, ' ');
		off = kv_meta_put(s, off, 'f');
		off = kv_meta_dec(s, off, m->flags);
		break;
	case 's':
		off = kv_meta_put(s, off, ' ');
		off = kv_meta_put(s, off, 's');
		off = kv_meta_dec(s, off, m->value_len);
		break;
	case 'c':
		if (!m->has_cas) {
			m->err = 1;
			return 1;
		}
		off = kv_meta_put(s, off, ' ');
		off = kv_meta_put(s, off, 'c');
		off = kv_meta_dec(s, off, m->cas);
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
		m->err = 1;
		return 1;
	}
	/* Each flag comes once (kv_meta_flags), so the line stays far below
	 * the buffer; this only keeps a broken invariant from wrapping. */
	if (off > KV_META_HDR_MAX - 2) {
		m->err = 1;
		return 1;
	}
	s->meta_len = off;
	return 0;
}

struct kv_meta_sum_ctx {
	struct kv_scratch *s;
	__u64 sum;
};

/* The reply line's one's-complement sum, byte by byte (it starts the body,
 * at an even offset). */
static long kv_meta_sum_step(__u64 i, void *arg)
{
	struct kv_meta_sum_ctx *c = arg;
	__u8 b;

	if (!c->s)
		return 1;
	b = c->s->meta[i & KV_META_HDR_MASK];
	c->sum += (i & 1) ? b : (__u32)b << 8;
	return 0;
}

/*
 * Renders the reply line of an mg hit into s->meta ("VA <len> <flags>\r\n"
 * with v, "HD <flags>\r\n" without) with its sum. `v` says whether the
 * request asks for the value. Returns 0, or -1 if the entry cannot answer
 * (c without a known cas).
 */
static __always_inline int kv_meta_render(struct kv_scratch *s, const struct kv_hit *hit,
					  __u32 has_cas, __u32 v)
{
	struct kv_meta_ctx m = {
		.s = s,
		.cas = hit->cas,
		.flags = hit->flags,
		.value_len = hit->value_len,
		.has_cas = has_cas,
	};
	struct kv_meta_sum_ctx sum = { .s = s };
	__u32 off = 0, ntok = s->ntok;

	if (v) {
		off = kv_meta_put(s, off, 'V');
		off = kv_meta_put(s, off, 'A');
		off = kv_meta_put(s, off, ' ');
		off = kv_meta_dec(s, off, hit->value_len);
	} else {
		off = kv_meta_put(s, off, 'H');
		off = kv_meta_put(s, off, 'D');
	}
	s->meta_len = off;
	s->meta_value = v;
	if (ntok > 2)
		bpf_loop(ntok - 2, kv_meta_step, &m, 0);
	if (m.err)
		return -1;
	off = s->meta_len;
	if (off > KV_META_HDR_MAX - 2)
		return -1;
	off = kv_meta_put(s, off, '\r');
	off = kv_meta_put(s, off, '\n');
	s->meta_len = off;
	bpf_loop(off, kv_meta_sum_step, &sum, 0);
	s->meta_sum = sum.sum;
	return 0;
}

#endif /* WEIR_KV_META_H */
