/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * memcached.h - the memcached request parser and twemproxy's key-to-server
 * mapping for XDP.
 *
 * A request (after the 8-byte UDP frame header) is copied into a per-CPU
 * scratch buffer and parsed there: the first line of an ASCII request is cut
 * into tokens, a binary request's 24-byte header is read at fixed offsets.
 * Keys are copied into a zero-padded struct weir_kv_key, which is also the
 * cache map's key. Loops are bounded; values that leave a loop go through
 * the scratch map so the verifier does not track one state per iteration.
 *
 * Key -> server is twemproxy's: hash_fnv1a_64 (see kv_fnv1a_64) or hash_md5
 * (kv_md5 in md5.h), and the ketama continuum (binary search over sorted
 * points, as ketama_dispatch) or modula (hash % entries, as modula_dispatch).
 * weir_kv::route is the Rust twin.
 */
#ifndef WEIR_MEMCACHED_H
#define WEIR_MEMCACHED_H

#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include "kv_maps.h"

#define KV_SCAN_MASK (WEIR_KV_SCAN_MAX - 1)
#define KV_TOK_MASK (WEIR_KV_MAX_TOKENS - 1)

/* Binary protocol. */
#define MC_BIN_REQ_MAGIC 0x80
#define MC_BIN_RES_MAGIC 0x81
#define MC_BIN_HDR 24

/* What a request is, for routing. */
enum kv_cmd {
	KV_CMD_UNKNOWN = 0,
	KV_CMD_GET,      /* ASCII get */
	KV_CMD_GETS,     /* ASCII gets */
	KV_CMD_STORE,    /* ASCII set/add/replace/append/prepend (data block follows) */
	KV_CMD_CAS,      /* ASCII cas (data block follows) */
	KV_CMD_WRITE,    /* ASCII delete/incr/decr/touch (no data block) */
	KV_CMD_FLUSH,    /* flush_all, ASCII or binary */
	KV_CMD_BIN_GET,  /* binary GET/GETQ/GETK/GETKQ */
	KV_CMD_BIN_WRITE, /* any binary command that changes a key */
	KV_CMD_META_GET,  /* mg <key> <flags>* */
	KV_CMD_META_SET,  /* ms <key> <datalen> <flags>* (data block follows) */
	KV_CMD_META_WRITE, /* md/ma <key> <flags>* */
	KV_CMD_META_READ, /* me <key> (debug: reads only) */
};

/* Longest header line of an mg reply the switch renders ("VA <len> f.. s..
 * c.. k<key> O<opaque>\r\n" is at most 345 bytes). */
#define KV_META_HDR_MAX 512
#define KV_META_HDR_MASK (KV_META_HDR_MAX - 1)

/* Per-CPU parser state; never shared with user space. */
struct kv_scratch {
	struct weir_kv_key key;        /* the current key, zero-padded */
	__u8 buf[WEIR_KV_SCAN_MAX];    /* the start of the request */
	__u16 tok_start[WEIR_KV_MAX_TOKENS];
	__u16 tok_len[WEIR_KV_MAX_TOKENS];
	__u32 ntok;
	__u32 line_end;  /* bytes up to and including '\n'; 0 = no line end seen */
	__u32 overflow;  /* more tokens than WEIR_KV_MAX_TOKENS */
	__u32 pad;
	/* An mg cache hit: the rendered reply line, its length, whether the
	 * value follows it (v flag), and its checksum (kv_meta.h). */
	__u8 meta[KV_META_HDR_MAX];
	__u32 meta_len;
	__u32 meta_value;
	__u64 meta_sum;
	/* The state of the bpf_loop steps of kv_meta.h, kept here rather than
	 * on the stack (the program's stack is nearly full). */
	__u64 meta_cas;
	__u32 meta_flags;
	__u32 meta_vlen;
	__u32 meta_has_cas;
	__u32 meta_err;
	__u32 meta_first;
	__u32 meta_seen;
	__u32 meta_f;
	__u32 meta_pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kv_scratch);
} kv_scratch SEC(".maps");

/*
 * twemproxy's hash_fnv1a_64: FNV-1a with the 64-bit offset basis and prime
 * truncated to 32 bits, over `(uint32_t)key[i]` where key is `char *` -
 * signed on x86, so bytes >= 0x80 are sign-extended before the xor.
 */
#define KV_FNV64_INIT_32 0x84222325U /* (uint32_t)0xcbf29ce484222325 */
#define KV_FNV64_PRIME_32 0x000001b3U /* (uint32_t)0x100000001b3 */

/* Global (verified once, not per call site). */
__noinline __u32 kv_fnv1a_64(const struct weir_kv_key *k)
{
	__u32 h = KV_FNV64_INIT_32;
	__u32 len;

	if (!k)
		return 0;
	len = k->len;

	for (__u32 i = 0; i < WEIR_KV_MAX_KEY; i++) {
		if (i >= len)
			break;
		h ^= (__u32)(__s32)(__s8)k->data[i];
		h *= KV_FNV64_PRIME_32;
	}
	return h;
}

/* Copies `len` key bytes at packet offset `off` into s->key (zero-padded).
 * Returns 0, or -1 if the length is not a valid key length. */
static __always_inline int kv_key_load(struct xdp_md *ctx, struct kv_scratch *s, __u32 off,
				       __u32 len)
{
	__builtin_memset(&s->key, 0, sizeof(s->key));
	if (len == 0 || len > WEIR_KV_MAX_KEY)
		return -1;
	s->key.len = len;
	if (bpf_xdp_load_bytes(ctx, off, s->key.data, len) < 0)
		return -1;
	return 0;
}

/* Server index for a key hash, or -1 (no table). Global: verified once. */
__noinline int kv_pick(__u32 hash, __u32 *server)
{
	struct weir_kv_table *t;
	__u32 zero = 0, *ver, slot, base, cap = cfg_kv_points_cap;

	if (!server)
		return -1;

	ver = bpf_map_lookup_elem(&kv_version, &zero);
	if (!ver)
		return -1;
	slot = *ver % WEIR_KV_TABLE_SLOTS;
	t = bpf_map_lookup_elem(&kv_tables, &slot);
	if (!t)
		return -1;
	base = slot * cap;

	if (cfg_kv_dist == WEIR_KV_DIST_MODULA) {
		__u32 n = t->nmodula, idx, *srv;

		if (n == 0 || n > cap)
			return -1;
		idx = base + hash % n;
		srv = bpf_map_lookup_elem(&kv_modula, &idx);
		if (!srv)
			return -1;
		*server = *srv;
		return 0;
	}

	/* ketama_dispatch: the first point >= hash, wrapping to the first. */
	__u32 n = t->npoints, left = 0, right, idx;
	struct weir_kv_point *p;

	if (n == 0 || n > cap)
		return -1;
	right = n;
	for (int i = 0; i < WEIR_KV_SEARCH_STEPS + 1; i++) {
		__u32 mid;

		if (left >= right)
			break;
		mid = left + (right - left) / 2;
		idx = base + mid;
		p = bpf_map_lookup_elem(&kv_continuum, &idx);
		if (!p)
			return -1;
		if (p->point < hash)
			left = mid + 1;
		else
			right = mid;
	}
	if (left < right)
		return -1; /* more points than the search bound: refuse, never guess */
	if (right >= n)
		right = 0;
	idx = base + right;
	p = bpf_map_lookup_elem(&kv_continuum, &idx);
	if (!p)
		return -1;
	*server = p->server;
	return 0;
}

/*
 * Cuts the first line of s->buf[0..len) into tokens separated by spaces.
 * Sets s->ntok, s->tok_*, s->line_end (0 if no '\n' within the window) and
 * s->overflow. One bpf_loop step per byte: the step is verified once.
 */
struct kv_tok_ctx {
	struct kv_scratch *s;
	__u32 in_tok;
};

static long kv_tok_step(__u64 i, void *arg)
{
	struct kv_tok_ctx *t = arg;
	struct kv_scratch *s = t->s;
	__u32 ntok;
	__u8 c;

	if (!s)
		return 1;
	c = s->buf[i & KV_SCAN_MASK];
	ntok = s->ntok;
	if (c == ' ' || c == '\r' || c == '\n') {
		if (t->in_tok) {
			s->tok_len[ntok & KV_TOK_MASK] = i - s->tok_start[ntok & KV_TOK_MASK];
			s->ntok = ntok + 1;
			t->in_tok = 0;
		}
		if (c == '\n') {
			s->line_end = i + 1;
			return 1;
		}
		return 0;
	}
	if (!t->in_tok) {
		if (ntok >= WEIR_KV_MAX_TOKENS) {
			s->overflow = 1;
			return 1;
		}
		s->tok_start[ntok & KV_TOK_MASK] = i;
		t->in_tok = 1;
	}
	return 0;
}

static __always_inline void kv_tokenize(struct kv_scratch *s, __u32 len)
{
	struct kv_tok_ctx t = { .s = s, .in_tok = 0 };

	s->ntok = 0;
	s->line_end = 0;
	s->overflow = 0;
	if (len > WEIR_KV_SCAN_MAX)
		len = WEIR_KV_SCAN_MAX;
	bpf_loop(len, kv_tok_step, &t, 0);
}

/* Compare token 0 (at offset 0) with a literal. */
static __always_inline int kv_word_is(const struct kv_scratch *s, __u32 len, const char *w,
				      __u32 wlen)
{
	if (len != wlen)
		return 0;
#pragma unroll
	for (int i = 0; i < 9; i++) {
		if ((__u32)i >= wlen)
			break;
		if (s->buf[i] != (__u8)w[i])
			return 0;
	}
	return 1;
}

#define KV_WORD(s, len, lit) kv_word_is(s, len, lit, sizeof(lit) - 1)

/* Classifies the ASCII command word (token 0, which must start the line). */
static __always_inline int kv_ascii_cmd(const struct kv_scratch *s)
{
	__u32 len;

	if (s->ntok == 0 || s->tok_start[0] != 0)
		return KV_CMD_UNKNOWN;
	len = s->tok_len[0];
	if (KV_WORD(s, len, "get"))
		return KV_CMD_GET;
	if (KV_WORD(s, len, "gets"))
		return KV_CMD_GETS;
	if (KV_WORD(s, len, "set") || KV_WORD(s, len, "add") || KV_WORD(s, len, "replace") ||
	    KV_WORD(s, len, "append") || KV_WORD(s, len, "prepend"))
		return KV_CMD_STORE;
	if (KV_WORD(s, len, "cas"))
		return KV_CMD_CAS;
	if (KV_WORD(s, len, "delete") || KV_WORD(s, len, "incr") || KV_WORD(s, len, "decr") ||
	    KV_WORD(s, len, "touch"))
		return KV_CMD_WRITE;
	if (KV_WORD(s, len, "flush_all"))
		return KV_CMD_FLUSH;
	if (KV_WORD(s, len, "mg"))
		return KV_CMD_META_GET;
	if (KV_WORD(s, len, "ms"))
		return KV_CMD_META_SET;
	if (KV_WORD(s, len, "md") || KV_WORD(s, len, "ma"))
		return KV_CMD_META_WRITE;
	if (KV_WORD(s, len, "me"))
		return KV_CMD_META_READ;
	return KV_CMD_UNKNOWN;
}

/* Parses token `t` as a decimal number of at most 9 digits; -1 if it is not one. */
static __always_inline long kv_token_u32(const struct kv_scratch *s, __u32 t)
{
	__u32 start = s->tok_start[t & KV_TOK_MASK], len = s->tok_len[t & KV_TOK_MASK];
	long v = 0;

	if (len == 0 || len > 9)
		return -1;
	for (int i = 0; i < 9; i++) {
		__u8 c;

		if ((__u32)i >= len)
			break;
		c = s->buf[(start + i) & KV_SCAN_MASK];
		if (c < '0' || c > '9')
			return -1;
		v = v * 10 + (c - '0');
	}
	return v;
}

/* Binary opcodes (protocol_binary.h). */
static __always_inline int kv_bin_cmd(__u8 op)
{
	switch (op) {
	case 0x00: /* GET */
	case 0x09: /* GETQ */
	case 0x0c: /* GETK */
	case 0x0d: /* GETKQ */
		return KV_CMD_BIN_GET;
	case 0x01: /* SET */
	case 0x02: /* ADD */
	case 0x03: /* REPLACE */
	case 0x04: /* DELETE */
	case 0x05: /* INCREMENT */
	case 0x06: /* DECREMENT */
	case 0x0e: /* APPEND */
	case 0x0f: /* PREPEND */
	case 0x11: /* SETQ */
	case 0x12: /* ADDQ */
	case 0x13: /* REPLACEQ */
	case 0x14: /* DELETEQ */
	case 0x15: /* INCREMENTQ */
	case 0x16: /* DECREMENTQ */
	case 0x19: /* APPENDQ */
	case 0x1a: /* PREPENDQ */
	case 0x1c: /* TOUCH */
	case 0x1d: /* GAT */
	case 0x1e: /* GATQ */
	case 0x23: /* GATK */
	case 0x24: /* GATKQ */
		return KV_CMD_BIN_WRITE;
	case 0x08: /* FLUSH */
	case 0x18: /* FLUSHQ */
		return KV_CMD_FLUSH;
	default:
		return KV_CMD_UNKNOWN;
	}
}

#endif /* WEIR_MEMCACHED_H */
