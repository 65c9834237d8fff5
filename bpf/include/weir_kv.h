/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * weir_kv.h - the structs and constants shared by the memcached switch
 * (bpf/kv/weir_kv.bpf.c) and Rust (weir-abi, through bindgen). Like weir.h, it
 * is the only definition: every struct has explicit padding and a size
 * assertion.
 *
 * Addresses are four big-endian 32-bit words; an IPv4 address sits in word 0.
 */
#ifndef WEIR_KV_H
#define WEIR_KV_H

#include <linux/types.h>

/* memcached limits: keys are at most 250 bytes (memcached's KEY_MAX_LENGTH). */
#define WEIR_KV_MAX_KEY 250
/* Key buffers are padded to this size (the cache map's key). */
#define WEIR_KV_KEY_BUF 252
/* Largest value the in-switch cache holds (the reply must fit one datagram). */
#define WEIR_KV_MAX_VALUE 1024
/* "VALUE <key> <flags> <bytes>": 6 + 250 + 1 + 10 + 1 + 4, rounded up. */
#define WEIR_KV_LINE_MAX 280
/* " <cas unique>": a space and up to 20 digits, rounded up. */
#define WEIR_KV_CAS_TEXT 24
/* The value followed by "\r\nEND\r\n". */
#define WEIR_KV_DATA_MAX (WEIR_KV_MAX_VALUE + 8)
/* memcached's UDP frame header: request id, sequence, total, reserved. */
#define WEIR_KV_FRAME_HDR 8
/* Bytes of a request (after the frame header) that the parser looks at: the
 * first line of an ASCII request, or a binary header plus extras and key. */
#define WEIR_KV_SCAN_MAX 1024
/* At most this many tokens on an ASCII line (command + keys + arguments). */
#define WEIR_KV_MAX_TOKENS 32
/* Bound of the continuum binary search: supports up to 2^WEIR_KV_SEARCH_STEPS points. */
#define WEIR_KV_SEARCH_STEPS 24

/* Hash functions (twemproxy's names); what the switch itself computes. */
#define WEIR_KV_HASH_FNV1A_64 0 /* twemproxy's fnv1a_64: 32-bit state, see memcached.h */
#define WEIR_KV_HASH_MD5 1      /* twemproxy's md5 (first digest word), see md5.h */
#define WEIR_KV_HASH_OTHER 2    /* any other twemproxy hash: requests go to the kernel */

/* Distributions. */
#define WEIR_KV_DIST_KETAMA 0
#define WEIR_KV_DIST_MODULA 1

/* How a request is forwarded to its server. */
#define WEIR_KV_FWD_L2 0 /* rewrite MACs only: the servers own the VIP */
#define WEIR_KV_FWD_L3 1 /* also rewrite dst address and port; the source stays the client */

/* A server slot is in use. */
#define WEIR_KV_SERVER_LIVE (1U << 0)

/* Two continuum / modula tables: user space fills the inactive one and then
 * flips `kv_version` (one 32-bit store), so a reader sees one or the other. */
#define WEIR_KV_TABLE_SLOTS 2

/* One memcached server (map `kv_servers`, indexed by server index, the
 * index twemproxy's continuum names). */
struct weir_kv_server {
	__be32 addr[4];
	__be16 port;    /* network order; used in WEIR_KV_FWD_L3 mode */
	__u8 family;    /* WEIR_AF_INET / WEIR_AF_INET6 */
	__u8 flags;     /* WEIR_KV_SERVER_* */
	__u8 mac[6];    /* next-hop MAC of the server */
	__u8 pad[2];
	__u32 ifindex;  /* 0 or the ingress interface: XDP_TX; else redirect via kv_tx_ports */
};
_Static_assert(sizeof(struct weir_kv_server) == 32, "weir_kv_server size");

/* One point of the ketama continuum, sorted by `point` (twemproxy's
 * struct continuum {index, value}). */
struct weir_kv_point {
	__u32 point;
	__u32 server;
};
_Static_assert(sizeof(struct weir_kv_point) == 8, "weir_kv_point size");

/* Per-slot table header (map `kv_tables`, index = slot). */
struct weir_kv_table {
	__u32 npoints; /* ketama: points in kv_continuum[slot * cap ...] */
	__u32 nmodula; /* modula: entries in kv_modula[slot * cap ...] */
};
_Static_assert(sizeof(struct weir_kv_table) == 8, "weir_kv_table size");

/* A key as the cache map's key: length plus zero-padded bytes. */
struct weir_kv_key {
	__u32 len;
	__u8 data[WEIR_KV_KEY_BUF];
};
_Static_assert(sizeof(struct weir_kv_key) == 256, "weir_kv_key size");

/*
 * A cached value (map `kv_cache`, keyed by struct weir_kv_key). User space
 * pre-renders the reply text; XDP copies it, so XDP never formats numbers.
 *
 * The entry is valid only while `seq` equals the invalidation counter of the
 * key's bucket and `gen` equals the flush generation: user space reads both
 * before it fetches the value (a ticket), and every write the switch sees
 * bumps them, so an entry fetched before a write can never be served after it.
 */
struct weir_kv_entry {
	__u64 seq;        /* kv_inval[bucket].seq when the ticket was taken */
	__u64 gen;        /* kv_gen[0] when the ticket was taken */
	__u64 expires_ns; /* bpf_ktime_get_ns() deadline; 0 = no deadline */
	__u64 cas;        /* cas unique (binary replies, gets); valid if has_cas */
	__u32 flags;      /* client flags */
	__u32 value_len;
	__u16 line_len;   /* bytes of `line` */
	__u16 cas_len;    /* bytes of `cas_text` */
	__u8 has_cas;
	__u8 pad[3];
	/* Partial checksums (16-bit one's-complement sums, not folded to
	 * complement) of the reply bodies as they start at an even offset: */
	__u32 sum_get;    /* line + "\r\n" + data (ASCII get) */
	__u32 sum_gets;   /* line + cas_text + "\r\n" + data (ASCII gets) */
	__u32 sum_value;  /* the value alone */
	__u32 sum_key;    /* the key alone */
	__u8 line[WEIR_KV_LINE_MAX];    /* "VALUE <key> <flags> <bytes>" */
	__u8 cas_text[WEIR_KV_CAS_TEXT]; /* " <cas>" */
	__u8 data[WEIR_KV_DATA_MAX];    /* value + "\r\nEND\r\n" */
};
_Static_assert(sizeof(struct weir_kv_entry) ==
		       64 + WEIR_KV_LINE_MAX + WEIR_KV_CAS_TEXT + WEIR_KV_DATA_MAX,
	       "weir_kv_entry size");

/* Invalidation bucket (map `kv_inval`, index = key hash & (buckets - 1)). */
struct weir_kv_bucket {
	__u64 seq;           /* bumped by every write to a key of this bucket */
	__u64 last_write_ns; /* bpf_ktime_get_ns() of the last such write */
};
_Static_assert(sizeof(struct weir_kv_bucket) == 16, "weir_kv_bucket size");

/* A multi-datagram request in flight (map `kv_requests`, LRU). */
struct weir_kv_req_key {
	__be32 client[4];
	__be16 port;
	__u16 req_id;  /* as on the wire */
	__u8 family;
	__u8 pad[3];
};
_Static_assert(sizeof(struct weir_kv_req_key) == 24, "weir_kv_req_key size");

struct weir_kv_req {
	__u32 server;
	__u16 total;
	__u16 pad;
};
_Static_assert(sizeof(struct weir_kv_req) == 8, "weir_kv_req size");

/* A sampled key (ring buffer `kv_samples`), for hot-key detection. */
#define WEIR_KV_SAMPLE_HIT (1U << 0) /* the switch answered it from the cache */
struct weir_kv_sample {
	__u32 server;   /* server index the key maps to */
	__u16 key_len;
	__u16 flags;    /* WEIR_KV_SAMPLE_* */
	__u8 key[WEIR_KV_KEY_BUF];
};
_Static_assert(sizeof(struct weir_kv_sample) == 260, "weir_kv_sample size");

/* Per-server per-CPU counters (map `kv_server_stats`). */
struct weir_kv_server_stats {
	__u64 requests;
	__u64 bytes;
};
_Static_assert(sizeof(struct weir_kv_server_stats) == 16, "weir_kv_server_stats size");

/*
 * Per-CPU counters (map `kv_stats`). Every packet ends in exactly one
 * outcome (WEIR_KV_STAT_RX = sum of outcomes); events may overlap.
 */
enum weir_kv_stat {
	WEIR_KV_STAT_RX = 0,
	/* outcomes */
	WEIR_KV_STAT_PASS_NOT_KV,        /* not UDP to the memcached VIP port */
	WEIR_KV_STAT_PASS_MALFORMED,     /* bad Ethernet/IP/UDP */
	WEIR_KV_STAT_PASS_BAD_FRAME,     /* frame header missing, total 0, seq >= total */
	WEIR_KV_STAT_PASS_TRUNCATED,     /* request ends before its line/header/key does */
	WEIR_KV_STAT_PASS_BAD_KEY,       /* empty key or longer than 250 bytes */
	WEIR_KV_STAT_PASS_UNKNOWN_CMD,   /* a command the switch does not route */
	WEIR_KV_STAT_PASS_MULTI_CMD,     /* bytes after the first request */
	WEIR_KV_STAT_PASS_MULTI_SERVER,  /* multi-key get over more than one server */
	WEIR_KV_STAT_PASS_TOO_LONG,      /* line longer than the scan window or too many keys */
	WEIR_KV_STAT_PASS_ORPHAN,        /* continuation datagram of an untracked request */
	WEIR_KV_STAT_PASS_FLUSH,         /* flush_all: cache cleared, then to the kernel */
	WEIR_KV_STAT_PASS_NO_SERVER,     /* no table, or the server slot is not live */
	WEIR_KV_STAT_PASS_HASH,          /* pool hash not computed in XDP (crc32, hash_tag, ...) */
	WEIR_KV_STAT_PASS_META_BASE64,   /* meta command with a base64 key (b flag) */
	WEIR_KV_STAT_TX,                 /* forwarded by XDP_TX */
	WEIR_KV_STAT_REDIRECT,           /* forwarded by XDP_REDIRECT */
	WEIR_KV_STAT_DROP_REDIRECT,      /* redirect target not in kv_tx_ports */
	WEIR_KV_STAT_CACHE_TX,           /* answered from the cache (XDP_TX) */
	WEIR_KV_STAT_DROP_INTERNAL,      /* a helper failed after the reply was begun */
	/* events */
	WEIR_KV_STAT_GET,                /* get/gets/binary get requests routed */
	WEIR_KV_STAT_GET_KEYS,           /* keys in them */
	WEIR_KV_STAT_WRITE,              /* mutating requests routed */
	WEIR_KV_STAT_INVALIDATE,         /* buckets bumped */
	WEIR_KV_STAT_INVALIDATE_HIT,     /* ... that removed a cached entry */
	WEIR_KV_STAT_FLUSH,              /* flush generations bumped */
	WEIR_KV_STAT_CACHE_MISS,         /* single-key get not in the cache */
	WEIR_KV_STAT_CACHE_STALE,        /* entry found but invalid or expired */
	WEIR_KV_STAT_CACHE_BYPASS,       /* entry found but not usable (gets without cas, ...) */
	WEIR_KV_STAT_REQ_TRACKED,        /* multi-datagram request recorded */
	WEIR_KV_STAT_REQ_CONT,           /* continuation datagram forwarded */
	WEIR_KV_STAT_SAMPLE,             /* key sampled into kv_samples */
	WEIR_KV_STAT_SAMPLE_LOST,        /* ring buffer full */
	WEIR_KV_STAT_L3_REWRITE,         /* destination rewritten to the server */
	WEIR_KV_STAT_META,               /* meta requests (mg ms md ma me) routed */
	WEIR_KV_STAT_META_CACHE_TX,      /* ... of them mg answered from the cache */
	WEIR_KV_STAT_MAX,
};

#endif /* WEIR_KV_H */
