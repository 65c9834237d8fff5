// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * weir_kv - the memcached switch (XDP), after MemSwitch (seed 004).
 *
 * UDP datagrams to the memcached VIP port are parsed (frame header, ASCII
 * get/gets/storage/delete/incr/decr/touch/flush_all, the meta commands
 * mg/ms/md/ma/me, binary GET and every binary write) and forwarded to the server that twemproxy's hashing names
 * for the key, keeping the client's source address so the server answers
 * the client directly. Single-key GETs (and mg whose flags the cache can
 * answer) of hot keys are answered from kv_cache with XDP_TX. Every write the switch sees invalidates the key
 * before it is forwarded; flush_all clears the whole cache. Anything the
 * switch cannot route goes to the kernel (the user-space path), counted.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "weir.h"
#include "weir_kv.h"
#include "lib/parse.h"
#include "lib/csum.h"
#include "lib/nat.h"
#include "kv_maps.h"
#include "memcached.h"
#include "md5.h"
#include "kv_cache.h"
#include "kv_meta.h"

static __always_inline int kv_pass(__u32 stat)
{
	kv_stat(stat);
	return XDP_PASS;
}

/* Sends the request to server `idx`: L2 (and L3 if configured) rewrite. */
static __always_inline int kv_forward(struct xdp_md *ctx, struct packet *pkt, __u32 idx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct weir_kv_server_stats *st;
	struct weir_kv_server *srv;
	struct weir_kv_server sv;
	struct ethhdr *eth;

	srv = bpf_map_lookup_elem(&kv_servers, &idx);
	if (!srv || !(srv->flags & WEIR_KV_SERVER_LIVE))
		return kv_pass(WEIR_KV_STAT_PASS_NO_SERVER);
	sv = *srv;
	if (cfg_kv_fwd == WEIR_KV_FWD_L3) {
		if (sv.family != pkt->key.family)
			return kv_pass(WEIR_KV_STAT_PASS_NO_SERVER);
		if (rewrite_endpoint(data, data_end, pkt, 1, sv.addr, sv.port) < 0)
			return kv_pass(WEIR_KV_STAT_PASS_MALFORMED);
		kv_stat(WEIR_KV_STAT_L3_REWRITE);
	}
	st = bpf_map_lookup_elem(&kv_server_stats, &idx);
	if (st) {
		st->requests += 1;
		st->bytes += data_end - data;
	}
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return kv_pass(WEIR_KV_STAT_PASS_MALFORMED);
	/* The frame was addressed to us: its destination is our source now. */
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, sv.mac, ETH_ALEN);
	if (sv.ifindex == 0 || sv.ifindex == ctx->ingress_ifindex) {
		kv_stat(WEIR_KV_STAT_TX);
		return XDP_TX;
	}
	if (bpf_redirect_map(&kv_tx_ports, sv.ifindex, XDP_DROP) == XDP_REDIRECT) {
		kv_stat(WEIR_KV_STAT_REDIRECT);
		return XDP_REDIRECT;
	}
	kv_stat(WEIR_KV_STAT_DROP_REDIRECT);
	return XDP_DROP;
}

/*
 * The pool's hash of the key in s->key, into *hash: `fnv` (kv_fnv1a_64 of
 * it, already computed for the cache bucket) or kv_md5. Returns -2 for a
 * hash XDP does not compute. cfg_kv_hash is a load-time constant, so the
 * verifier drops the branches a pool does not use.
 */
static __always_inline int kv_route_hash(struct kv_scratch *s, __u32 fnv, __u32 *hash)
{
	if (cfg_kv_hash == WEIR_KV_HASH_FNV1A_64) {
		*hash = fnv;
		return 0;
	}
	if (cfg_kv_hash == WEIR_KV_HASH_MD5) {
		*hash = kv_md5(&s->key);
		return 0;
	}
	return -2;
}

/* Routes the key in s->key (fnv = kv_fnv1a_64 of it). */
static __always_inline int kv_route(struct kv_scratch *s, __u32 fnv, __u32 *server)
{
	__u32 hash = 0;

	if (kv_route_hash(s, fnv, &hash) < 0)
		return -2;
	return kv_pick(hash, server);
}

static __always_inline int kv_route_verdict(struct xdp_md *ctx, struct packet *pkt, int rc,
					    __u32 server, const struct weir_kv_req_key *rk,
					    __u16 total)
{
	if (rc == -2)
		return kv_pass(WEIR_KV_STAT_PASS_HASH);
	if (rc < 0)
		return kv_pass(WEIR_KV_STAT_PASS_NO_SERVER);
	if (total > 1) {
		struct weir_kv_req r = { .server = server, .total = total };

		bpf_map_update_elem(&kv_requests, rk, &r, BPF_ANY);
		kv_stat(WEIR_KV_STAT_REQ_TRACKED);
	}
	return kv_forward(ctx, pkt, server);
}

/* A single-key read: cache first, then route. An mg (kind KV_REPLY_META)
 * that changes nothing is answered from the cache only when it can answer
 * every flag (KV_META_SERVABLE in `meta`) and the reply line renders; its
 * other flags are KV_META_VALUE. */
static __always_inline int kv_single_get(struct xdp_md *ctx, struct packet *pkt,
					 struct kv_scratch *s, int kind, __u8 op, __u32 opaque,
					 int meta)
{
	struct weir_kv_entry *e = NULL;
	struct kv_hit hit = {};
	__u32 hash = kv_fnv1a_64(&s->key), server = 0;
	int is_meta = kind == KV_REPLY_META;
	int rc;

	kv_stat(WEIR_KV_STAT_GET);
	kv_stat(WEIR_KV_STAT_GET_KEYS);
	if (cfg_kv_cache && (!is_meta || (meta & KV_META_SERVABLE)) &&
	    kv_cache_lookup(s, hash, kind, &hit, &e) && e) {
		kv_sample(s, 0xffffffff, WEIR_KV_SAMPLE_HIT);
		if (!is_meta ||
		    kv_meta_render(s, &hit, e->has_cas, !!(meta & KV_META_VALUE)) == 0) {
			rc = kv_reply(ctx, pkt, s, e, &hit, kind, op, opaque);
			if (rc == XDP_TX) {
				if (is_meta)
					kv_stat(WEIR_KV_STAT_META_CACHE_TX);
				return XDP_TX;
			}
			if (rc >= 0) {
				kv_stat(WEIR_KV_STAT_DROP_INTERNAL);
				return XDP_DROP;
			}
		}
		kv_stat(WEIR_KV_STAT_CACHE_BYPASS);
	}
	rc = kv_route(s, hash, &server);
	kv_sample(s, rc == 0 ? server : 0xffffffff, 0);
	return kv_route_verdict(ctx, pkt, rc, server, NULL, 1);
}

/* A write: invalidate, then route (and track a multi-datagram request). */
static __always_inline int kv_write(struct xdp_md *ctx, struct packet *pkt, struct kv_scratch *s,
				    const struct weir_kv_req_key *rk, __u16 total)
{
	__u32 hash = kv_fnv1a_64(&s->key), server = 0;
	int rc;

	kv_stat(WEIR_KV_STAT_WRITE);
	kv_invalidate(s, hash);
	rc = kv_route(s, hash, &server);
	return kv_route_verdict(ctx, pkt, rc, server, rk, total);
}

static __always_inline int kv_binary(struct xdp_md *ctx, struct packet *pkt, struct kv_scratch *s,
				     __u32 body_off, __u32 body_len, __u32 scan,
				     const struct weir_kv_req_key *rk, __u16 total)
{
	__u32 keylen, extlen, bodylen, opaque;
	__u8 op;
	int cmd;

	if (scan < MC_BIN_HDR)
		return kv_pass(WEIR_KV_STAT_PASS_TRUNCATED);
	op = s->buf[1];
	keylen = ((__u32)s->buf[2] << 8) | s->buf[3];
	extlen = s->buf[4];
	bodylen = ((__u32)s->buf[8] << 24) | ((__u32)s->buf[9] << 16) | ((__u32)s->buf[10] << 8) |
		  s->buf[11];
	__builtin_memcpy(&opaque, &s->buf[12], 4);
	cmd = kv_bin_cmd(op);
	if (cmd == KV_CMD_UNKNOWN)
		return kv_pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD);
	if (bodylen > 0xffff || extlen + keylen > bodylen)
		return kv_pass(WEIR_KV_STAT_PASS_TRUNCATED);
	if (total == 1 && body_len < MC_BIN_HDR + bodylen)
		return kv_pass(WEIR_KV_STAT_PASS_TRUNCATED);
	if (total == 1 && body_len > MC_BIN_HDR + bodylen)
		return kv_pass(WEIR_KV_STAT_PASS_MULTI_CMD);
	if (cmd == KV_CMD_FLUSH) {
		kv_flush();
		return kv_pass(WEIR_KV_STAT_PASS_FLUSH);
	}
	if (keylen == 0 || keylen > WEIR_KV_MAX_KEY)
		return kv_pass(WEIR_KV_STAT_PASS_BAD_KEY);
	if (MC_BIN_HDR + extlen + keylen > body_len)
		return kv_pass(WEIR_KV_STAT_PASS_TRUNCATED);
	if (kv_key_load(ctx, s, body_off + MC_BIN_HDR + extlen, keylen) < 0)
		return kv_pass(WEIR_KV_STAT_PASS_TRUNCATED);
	if (cmd == KV_CMD_BIN_GET) {
		if (total != 1)
			return kv_pass(WEIR_KV_STAT_PASS_MULTI_CMD);
		return kv_single_get(ctx, pkt, s, (op == 0x0c || op == 0x0d) ? KV_REPLY_BINK :
						KV_REPLY_BIN, op, opaque, 0);
	}
	return kv_write(ctx, pkt, s, rk, total);
}

/* get/gets with several keys: all of them must live on one server. */
static __always_inline int kv_multi_get(struct xdp_md *ctx, struct packet *pkt,
					struct kv_scratch *s, __u32 body_off)
{
	__u32 first = 0, server = 0, ntok = s->ntok;
	int rc = 0;

	if (cfg_kv_hash != WEIR_KV_HASH_FNV1A_64 && cfg_kv_hash != WEIR_KV_HASH_MD5)
		return kv_pass(WEIR_KV_STAT_PASS_HASH);
	for (__u32 t = 1; t < WEIR_KV_MAX_TOKENS; t++) {
		__u32 hash, srv = 0;

		if (t >= ntok)
			break;
		if (kv_key_load(ctx, s, body_off + s->tok_start[t & KV_TOK_MASK],
				s->tok_len[t & KV_TOK_MASK]) < 0)
			return kv_pass(WEIR_KV_STAT_PASS_BAD_KEY);
		hash = cfg_kv_hash == WEIR_KV_HASH_MD5 ? kv_md5(&s->key) : kv_fnv1a_64(&s->key);
		if (kv_pick(hash, &srv) < 0)
			return kv_pass(WEIR_KV_STAT_PASS_NO_SERVER);
		kv_sample(s, srv, 0);
		if (t == 1)
			first = srv;
		else if (srv != first)
			return kv_pass(WEIR_KV_STAT_PASS_MULTI_SERVER);
	}
	server = first;
	kv_stat(WEIR_KV_STAT_GET);
	kv_stat_add(WEIR_KV_STAT_GET_KEYS, ntok - 1);
	return kv_route_verdict(ctx, pkt, rc, server, NULL, 1);
}

/*
 * A meta request: base64 keys go to the kernel; ms, md, ma and an mg with T
 * or N invalidate the key before it is forwarded, as classic writes do; me
 * and other mg are reads.
 */
static __always_inline int kv_meta(struct xdp_md *ctx, struct packet *pkt, struct kv_scratch *s,
				   __u32 body_off, int cmd, const struct weir_kv_req_key *rk,
				   __u16 total)
{
	int f = kv_meta_flags(s, cmd == KV_CMD_META_SET ? 3 : 2);
	__u32 hash, server = 0;
	int rc;

	if (f & KV_META_BASE64)
		return kv_pass(WEIR_KV_STAT_PASS_META_BASE64);
	if (kv_key_load(ctx, s, body_off + s->tok_start[1], s->tok_len[1]) < 0)
		return kv_pass(WEIR_KV_STAT_PASS_BAD_KEY);
	kv_stat(WEIR_KV_STAT_META);
	if (cmd == KV_CMD_META_GET && !(f & KV_META_CHANGES))
		return kv_single_get(ctx, pkt, s, KV_REPLY_META, 0, 0, f);
	if (cmd == KV_CMD_META_READ) {
		hash = kv_fnv1a_64(&s->key);
		rc = kv_route(s, hash, &server);
		return kv_route_verdict(ctx, pkt, rc, server, NULL, 1);
	}
	return kv_write(ctx, pkt, s, rk, total);
}

static __always_inline int kv_ascii(struct xdp_md *ctx, struct packet *pkt, struct kv_scratch *s,
				    __u32 body_off, __u32 body_len, __u32 scan,
				    const struct weir_kv_req_key *rk, __u16 total)
{
	__u32 line_end, ntok;
	long bytes;
	int cmd;

	kv_tokenize(s, scan);
	if (s->overflow)
		return kv_pass(WEIR_KV_STAT_PASS_TOO_LONG);
	line_end = s->line_end;
	ntok = s->ntok;
	if (line_end == 0)
		return kv_pass(body_len > WEIR_KV_SCAN_MAX ? WEIR_KV_STAT_PASS_TOO_LONG :
							    WEIR_KV_STAT_PASS_TRUNCATED);
	cmd = kv_ascii_cmd(s);
	switch (cmd) {
	case KV_CMD_FLUSH:
		kv_flush();
		return kv_pass(WEIR_KV_STAT_PASS_FLUSH);
	case KV_CMD_GET:
	case KV_CMD_GETS:
		if (ntok < 2)
			return kv_pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD);
		if (total != 1 || line_end != body_len)
			return kv_pass(WEIR_KV_STAT_PASS_MULTI_CMD);
		if (ntok > 2)
			return kv_multi_get(ctx, pkt, s, body_off);
		if (kv_key_load(ctx, s, body_off + s->tok_start[1], s->tok_len[1]) < 0)
			return kv_pass(WEIR_KV_STAT_PASS_BAD_KEY);
		return kv_single_get(ctx, pkt, s,
				     cmd == KV_CMD_GET ? KV_REPLY_GET : KV_REPLY_GETS, 0, 0, 0);
	case KV_CMD_STORE:
	case KV_CMD_CAS:
		/* <cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply] */
		if (ntok < (cmd == KV_CMD_CAS ? 6U : 5U) || ntok > (cmd == KV_CMD_CAS ? 7U : 6U))
			return kv_pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD);
		bytes = kv_token_u32(s, 4);
		if (bytes < 0)
			return kv_pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD);
		if (total == 1 && body_len < line_end + bytes + 2)
			return kv_pass(WEIR_KV_STAT_PASS_TRUNCATED);
		if (total == 1 && body_len > line_end + bytes + 2)
			return kv_pass(WEIR_KV_STAT_PASS_MULTI_CMD);
		break;
	case KV_CMD_WRITE:
		/* delete <key> [noreply] | incr/decr <key> <n> [noreply] | touch <key> <exp> [noreply] */
		if (ntok < 2 || ntok > 4)
			return kv_pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD);
		if (total != 1 || line_end != body_len)
			return kv_pass(WEIR_KV_STAT_PASS_MULTI_CMD);
		break;
	case KV_CMD_META_GET:
	case KV_CMD_META_WRITE:
	case KV_CMD_META_READ:
		if (ntok < 2)
			return kv_pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD);
		if (total != 1 || line_end != body_len)
			return kv_pass(WEIR_KV_STAT_PASS_MULTI_CMD);
		return kv_meta(ctx, pkt, s, body_off, cmd, rk, total);
	case KV_CMD_META_SET:
		/* ms <key> <datalen> <flags>* */
		if (ntok < 3)
			return kv_pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD);
		bytes = kv_token_u32(s, 2);
		if (bytes < 0)
			return kv_pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD);
		if (total == 1 && body_len < line_end + bytes + 2)
			return kv_pass(WEIR_KV_STAT_PASS_TRUNCATED);
		if (total == 1 && body_len > line_end + bytes + 2)
			return kv_pass(WEIR_KV_STAT_PASS_MULTI_CMD);
		return kv_meta(ctx, pkt, s, body_off, cmd, rk, total);
	default:
		return kv_pass(WEIR_KV_STAT_PASS_UNKNOWN_CMD);
	}
	if (kv_key_load(ctx, s, body_off + s->tok_start[1], s->tok_len[1]) < 0)
		return kv_pass(WEIR_KV_STAT_PASS_BAD_KEY);
	return kv_write(ctx, pkt, s, rk, total);
}

static __always_inline int kv_request(struct xdp_md *ctx, struct packet *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct udphdr *uh = data + (pkt->l4_off & PKT_OFF_MASK);
	struct weir_kv_req_key rk = {};
	__u32 udp_len, body_off, body_len, scan, zero = 0;
	__u16 seq, total;
	struct kv_scratch *s;
	__u8 *frame;

	if ((void *)(uh + 1) > data_end)
		return kv_pass(WEIR_KV_STAT_PASS_MALFORMED);
	udp_len = bpf_ntohs(uh->len);
	frame = (__u8 *)(uh + 1);
	if (udp_len < sizeof(*uh) + WEIR_KV_FRAME_HDR ||
	    (void *)(frame + WEIR_KV_FRAME_HDR) > data_end)
		return kv_pass(WEIR_KV_STAT_PASS_BAD_FRAME);
	seq = ((__u16)frame[2] << 8) | frame[3];
	total = ((__u16)frame[4] << 8) | frame[5];
	if (total == 0 || seq >= total)
		return kv_pass(WEIR_KV_STAT_PASS_BAD_FRAME);

	__builtin_memcpy(rk.client, pkt->key.src, sizeof(rk.client));
	rk.port = pkt->key.sport;
	__builtin_memcpy(&rk.req_id, frame, 2);
	rk.family = pkt->key.family;
	if (seq > 0) {
		struct weir_kv_req *r = bpf_map_lookup_elem(&kv_requests, &rk);

		if (!r || r->total != total)
			return kv_pass(WEIR_KV_STAT_PASS_ORPHAN);
		kv_stat(WEIR_KV_STAT_REQ_CONT);
		return kv_forward(ctx, pkt, r->server);
	}

	body_off = (pkt->l4_off & PKT_OFF_MASK) + sizeof(*uh) + WEIR_KV_FRAME_HDR;
	body_len = udp_len - sizeof(*uh) - WEIR_KV_FRAME_HDR;
	if (body_len == 0)
		return kv_pass(WEIR_KV_STAT_PASS_TRUNCATED);
	scan = body_len < WEIR_KV_SCAN_MAX ? body_len : WEIR_KV_SCAN_MAX;
	s = bpf_map_lookup_elem(&kv_scratch, &zero);
	if (!s)
		return kv_pass(WEIR_KV_STAT_PASS_MALFORMED);
	if (bpf_xdp_load_bytes(ctx, body_off, s->buf, scan) < 0)
		return kv_pass(WEIR_KV_STAT_PASS_TRUNCATED);
	if (s->buf[0] == MC_BIN_REQ_MAGIC)
		return kv_binary(ctx, pkt, s, body_off, body_len, scan, &rk, total);
	return kv_ascii(ctx, pkt, s, body_off, body_len, scan, &rk, total);
}

SEC("xdp")
int weir_kv(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct packet pkt = {};
	int rc;

	kv_stat(WEIR_KV_STAT_RX);
	rc = parse_packet(data, data_end, &pkt);
	if (rc == PARSE_MALFORMED)
		return kv_pass(WEIR_KV_STAT_PASS_MALFORMED);
	if (rc != PARSE_OK || pkt.key.proto != IPPROTO_UDP || pkt.key.dport != cfg_kv_port)
		return kv_pass(WEIR_KV_STAT_PASS_NOT_KV);
	if (cfg_kv_vip_family) {
		if (pkt.key.family != cfg_kv_vip_family || pkt.key.dst[0] != cfg_kv_vip[0] ||
		    pkt.key.dst[1] != cfg_kv_vip[1] || pkt.key.dst[2] != cfg_kv_vip[2] ||
		    pkt.key.dst[3] != cfg_kv_vip[3])
			return kv_pass(WEIR_KV_STAT_PASS_NOT_KV);
	}
	return kv_request(ctx, &pkt);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
