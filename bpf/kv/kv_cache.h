/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * kv_cache.h - the in-switch cache of the memcached switch: invalidation
 * (per-bucket counters and a flush generation), the validity check of an
 * entry, key sampling for the hot-key detector, and the memcached UDP reply
 * built in place of the request (XDP_TX).
 *
 * Checksums: the reply body is pre-rendered by user space together with its
 * one's-complement sum (big-endian 16-bit words, unfolded), so XDP adds the
 * pseudo-header, the UDP header, the frame header and, for binary replies,
 * the 28 bytes it writes itself. A part that starts at an odd offset adds
 * its sum byte-swapped (RFC 1071, byte-order independence).
 */
#ifndef WEIR_KV_CACHE_H
#define WEIR_KV_CACHE_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include "kv_maps.h"
#include "memcached.h"
#include "lib/parse.h"

/* What kind of reply a cache hit needs. */
enum kv_reply_kind {
	KV_REPLY_GET = 0,  /* ASCII get */
	KV_REPLY_GETS,     /* ASCII gets (needs the cas) */
	KV_REPLY_BIN,      /* binary GET/GETQ */
	KV_REPLY_BINK,     /* binary GETK/GETKQ (echoes the key) */
	KV_REPLY_META,     /* mg: the line in kv_scratch.meta, then the value if asked */
};

/* Bumps the invalidation counter of the key's bucket and drops the entry.
 * `bucket_hash` is kv_fnv1a_64 of the key (user space uses the same). */
static __always_inline void kv_invalidate(struct kv_scratch *s, __u32 bucket_hash)
{
	__u32 idx = bucket_hash & cfg_kv_buckets_mask;
	struct weir_kv_bucket *b = bpf_map_lookup_elem(&kv_inval, &idx);

	if (b) {
		__sync_fetch_and_add(&b->seq, 1);
		b->last_write_ns = bpf_ktime_get_ns();
	}
	kv_stat(WEIR_KV_STAT_INVALIDATE);
	if (bpf_map_delete_elem(&kv_cache, &s->key) == 0)
		kv_stat(WEIR_KV_STAT_INVALIDATE_HIT);
}

/* flush_all: every entry of an older generation is dead. */
static __always_inline void kv_flush(void)
{
	__u32 zero = 0;
	__u64 *gen = bpf_map_lookup_elem(&kv_gen, &zero);

	if (gen)
		__sync_fetch_and_add(gen, 1);
	kv_stat(WEIR_KV_STAT_FLUSH);
}

/* Offers the current key to the hot-key detector (one in cfg_kv_sample_every). */
static __always_inline void kv_sample(struct kv_scratch *s, __u32 server, __u16 flags)
{
	struct weir_kv_sample *smp;
	__u32 every = cfg_kv_sample_every;

	if (every == 0)
		return;
	if (every > 1 && bpf_get_prandom_u32() % every != 0)
		return;
	smp = bpf_ringbuf_reserve(&kv_samples, sizeof(*smp), 0);
	if (!smp) {
		kv_stat(WEIR_KV_STAT_SAMPLE_LOST);
		return;
	}
	smp->server = server;
	smp->key_len = s->key.len;
	smp->flags = flags;
	__builtin_memcpy(smp->key, s->key.data, sizeof(smp->key));
	bpf_ringbuf_submit(smp, 0);
	kv_stat(WEIR_KV_STAT_SAMPLE);
}

static __always_inline __u32 kv_sum32(__u32 w)
{
	w = bpf_ntohl(w);
	return (w >> 16) + (w & 0xffff);
}

static __always_inline __u16 kv_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* A copy of what the reply needs from an entry, taken once. */
struct kv_hit {
	__u64 cas;
	__u32 flags;
	__u32 value_len;
	__u32 line_len;
	__u32 cas_len;
	__u32 sum_body;  /* ASCII: the whole body; binary: the value */
	__u32 sum_key;
};

/*
 * Looks the current key up. Returns 1 and fills *hit if the entry is valid
 * for `kind`; 0 otherwise (counted).
 */
static __always_inline int kv_cache_lookup(struct kv_scratch *s, __u32 bucket_hash, int kind,
					   struct kv_hit *hit, struct weir_kv_entry **entry)
{
	struct weir_kv_entry *e;
	struct weir_kv_bucket *b;
	__u32 zero = 0, idx = bucket_hash & cfg_kv_buckets_mask;
	__u64 *gen;

	e = bpf_map_lookup_elem(&kv_cache, &s->key);
	if (!e) {
		kv_stat(WEIR_KV_STAT_CACHE_MISS);
		return 0;
	}
	gen = bpf_map_lookup_elem(&kv_gen, &zero);
	b = bpf_map_lookup_elem(&kv_inval, &idx);
	if (!gen || !b || e->gen != *gen || e->seq != b->seq ||
	    (e->expires_ns && bpf_ktime_get_ns() >= e->expires_ns)) {
		kv_stat(WEIR_KV_STAT_CACHE_STALE);
		return 0;
	}
	hit->cas = e->cas;
	hit->flags = e->flags;
	hit->value_len = e->value_len;
	hit->line_len = e->line_len;
	hit->cas_len = e->cas_len;
	hit->sum_key = e->sum_key;
	if (kind == KV_REPLY_GET)
		hit->sum_body = e->sum_get;
	else if (kind == KV_REPLY_GETS)
		hit->sum_body = e->sum_gets;
	else
		hit->sum_body = e->sum_value;
	/* mg needs the cas only for its c flag (kv_meta_render checks it). */
	if (hit->value_len > WEIR_KV_MAX_VALUE || hit->line_len == 0 ||
	    hit->line_len > WEIR_KV_LINE_MAX || hit->cas_len > WEIR_KV_CAS_TEXT ||
	    (kind != KV_REPLY_GET && kind != KV_REPLY_META && !e->has_cas) ||
	    (kind == KV_REPLY_GETS && hit->cas_len == 0)) {
		kv_stat(WEIR_KV_STAT_CACHE_BYPASS);
		return 0;
	}
	*entry = e;
	return 1;
}

/*
 * Turns the request into the reply: swap addresses and ports, frame header
 * (same request id, seq 0, total 1), body from the entry, checksums.
 * `op` and `opaque` (network order) are the binary request's.
 * Returns XDP_TX, or -1 before touching the packet if it cannot.
 */
/* Headers of a request as far as the memcached body: Ethernet, IPv4 (20) or
 * IPv6 (40), UDP, frame header. */
#define KV_HDRS_V4 (ETH_HLEN + 20 + 8 + WEIR_KV_FRAME_HDR)
#define KV_HDRS_V6 (ETH_HLEN + 40 + 8 + WEIR_KV_FRAME_HDR)
/* Largest growth at the head (XDP guarantees 256 bytes of headroom). */
#define KV_HEAD_GROW_MAX 192

/* After bpf_xdp_adjust_head(-delta): moves the `hdrs` header bytes from
 * data + delta to data, in ascending order (the destination is below the
 * source, so no byte is overwritten before it is read). 0, or -1 if the
 * frame is not as expected. */
static __always_inline int kv_move_headers(struct xdp_md *ctx, int delta, __u32 hdrs)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *dst = data, *src;

	if (delta <= 0 || delta > KV_HEAD_GROW_MAX || (hdrs != KV_HDRS_V4 && hdrs != KV_HDRS_V6))
		return -1;
	src = (__u8 *)data + delta;
	if ((void *)(dst + KV_HDRS_V4) > data_end || (void *)(src + KV_HDRS_V4) > data_end)
		return -1;
#pragma unroll
	for (int i = 0; i < KV_HDRS_V4; i++)
		dst[i] = src[i];
	if (hdrs == KV_HDRS_V6) {
		if ((void *)(dst + KV_HDRS_V6) > data_end ||
		    (void *)(src + KV_HDRS_V6) > data_end)
			return -1;
#pragma unroll
		for (int i = KV_HDRS_V4; i < KV_HDRS_V6; i++)
			dst[i] = src[i];
	}
	return 0;
}

static __always_inline int kv_reply(struct xdp_md *ctx, const struct packet *pkt,
				    struct kv_scratch *s, const struct weir_kv_entry *e,
				    const struct kv_hit *hit, int kind, __u8 op, __u32 opaque)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3 = ETH_HLEN, l4, body, body_len, udp_len, key_len = s->key.len;
	__u32 ip_hlen = pkt->key.family == WEIR_AF_INET ? 20 : 40;
	__u8 bin[MC_BIN_HDR + 4] = {};
	__u8 crlf[2] = {'\r', '\n'};
	__u64 sum = 0;
	__u16 req_id, csum;
	struct ethhdr *eth;
	struct udphdr *uh;
	__u8 *frame;
	int delta;

	if (pkt->l4_off != l3 + ip_hlen)
		return -1; /* IPv4 options or IPv6 extension headers: let the server answer */
	l4 = l3 + ip_hlen;
	body = l4 + sizeof(struct udphdr) + WEIR_KV_FRAME_HDR;
	if (key_len == 0 || key_len > WEIR_KV_MAX_KEY)
		return -1;

	switch (kind) {
	case KV_REPLY_GET:
		body_len = hit->line_len + 2 + hit->value_len + 7;
		break;
	case KV_REPLY_GETS:
		body_len = hit->line_len + hit->cas_len + 2 + hit->value_len + 7;
		break;
	case KV_REPLY_BIN:
		body_len = MC_BIN_HDR + 4 + hit->value_len;
		break;
	case KV_REPLY_META:
		body_len = s->meta_len + (s->meta_value ? hit->value_len + 2 : 0);
		break;
	default:
		body_len = MC_BIN_HDR + 4 + key_len + hit->value_len;
		break;
	}
	udp_len = sizeof(struct udphdr) + WEIR_KV_FRAME_HDR + body_len;
	delta = (int)(body + body_len) - (int)(data_end - data);
	if (bpf_xdp_adjust_tail(ctx, delta)) {
		/* No tailroom: veth and generic XDP copy small frames into small
		 * buffers. Grow at the head instead and move the headers there;
		 * the body is written afresh below. */
		if (delta <= 0 || delta > KV_HEAD_GROW_MAX || bpf_xdp_adjust_head(ctx, -delta))
			return -1;
		if (kv_move_headers(ctx, delta, body) < 0)
			return XDP_DROP;
	}

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP; /* cannot happen: the headers were there before */
	{
		__u8 tmp[ETH_ALEN];

		__builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
		__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
		__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
	}

	if (pkt->key.family == WEIR_AF_INET) {
		struct iphdr *iph = data + ETH_HLEN;
		__u32 a;
		__u64 isum = 0;

		if ((void *)(iph + 1) > data_end)
			return XDP_DROP;
		a = iph->saddr;
		iph->saddr = iph->daddr;
		iph->daddr = a;
		iph->tot_len = bpf_htons(20 + udp_len);
		iph->ttl = 64;
		iph->check = 0;
#pragma unroll
		for (int i = 0; i < 5; i++)
			isum += kv_sum32(((__u32 *)iph)[i]);
		iph->check = bpf_htons(~kv_fold(isum));
		sum += kv_sum32(iph->saddr) + kv_sum32(iph->daddr);
		uh = (void *)(iph + 1);
	} else {
		struct ipv6hdr *ip6h = data + ETH_HLEN;
		__u32 a[4];

		if ((void *)(ip6h + 1) > data_end)
			return XDP_DROP;
		__builtin_memcpy(a, &ip6h->saddr, 16);
		__builtin_memcpy(&ip6h->saddr, &ip6h->daddr, 16);
		__builtin_memcpy(&ip6h->daddr, a, 16);
		ip6h->payload_len = bpf_htons(udp_len);
		ip6h->hop_limit = 64;
#pragma unroll
		for (int i = 0; i < 4; i++)
			sum += kv_sum32(a[i]) + kv_sum32(ip6h->saddr.in6_u.u6_addr32[i]);
		uh = (void *)(ip6h + 1);
	}
	frame = (__u8 *)(uh + 1);
	if ((void *)(frame + WEIR_KV_FRAME_HDR) > data_end)
		return XDP_DROP;
	{
		__be16 p = uh->source;

		uh->source = uh->dest;
		uh->dest = p;
	}
	uh->len = bpf_htons(udp_len);
	uh->check = 0;
	req_id = ((__u16)frame[0] << 8) | frame[1];
	frame[2] = 0;
	frame[3] = 0; /* seq 0 */
	frame[4] = 0;
	frame[5] = 1; /* total 1 */
	frame[6] = 0;
	frame[7] = 0;
	/* pseudo-header + UDP header + frame header */
	sum += IPPROTO_UDP + udp_len;
	sum += bpf_ntohs(uh->source) + bpf_ntohs(uh->dest) + udp_len;
	sum += req_id + 1;

	if (kind == KV_REPLY_GET || kind == KV_REPLY_GETS) {
		__u32 off = body;
		__u64 n = hit->line_len;

		barrier_var(n);
		if (n == 0 || n > WEIR_KV_LINE_MAX)
			return XDP_DROP;
		if (bpf_xdp_store_bytes(ctx, off, (void *)e->line, n))
			return XDP_DROP;
		off += n;
		if (kind == KV_REPLY_GETS) {
			n = hit->cas_len;
			barrier_var(n);
			if (n == 0 || n > WEIR_KV_CAS_TEXT)
				return XDP_DROP;
			if (bpf_xdp_store_bytes(ctx, off, (void *)e->cas_text, n))
				return XDP_DROP;
			off += n;
		}
		if (bpf_xdp_store_bytes(ctx, off, crlf, 2))
			return XDP_DROP;
		off += 2;
		n = hit->value_len + 7;
		barrier_var(n);
		if (n > WEIR_KV_DATA_MAX)
			return XDP_DROP;
		if (bpf_xdp_store_bytes(ctx, off, (void *)e->data, n))
			return XDP_DROP;
		sum += hit->sum_body;
	} else if (kind == KV_REPLY_META) {
		__u64 n = s->meta_len, odd = n & 1;

		barrier_var(n);
		if (n == 0 || n > KV_META_HDR_MAX)
			return XDP_DROP;
		if (bpf_xdp_store_bytes(ctx, body, s->meta, n))
			return XDP_DROP;
		sum += s->meta_sum;
		if (s->meta_value) {
			__u32 off = body + n;
			__u16 v = kv_fold(hit->sum_body);

			/* the value and its "\r\n" (the entry's data holds both) */
			n = hit->value_len + 2;
			barrier_var(n);
			if (n > WEIR_KV_DATA_MAX)
				return XDP_DROP;
			if (bpf_xdp_store_bytes(ctx, off, (void *)e->data, n))
				return XDP_DROP;
			sum += odd ? (__u16)((v << 8) | (v >> 8)) : v;
			sum += ((odd + hit->value_len) & 1) ? 0x0a0d : 0x0d0a;
		}
	} else {
		__u64 klen = kind == KV_REPLY_BINK ? key_len : 0;
		__u32 total_body = 4 + klen + hit->value_len;
		__u32 off = body + MC_BIN_HDR + 4;
		__u64 cas = hit->cas;

		bin[0] = MC_BIN_RES_MAGIC;
		bin[1] = op;
		bin[2] = klen >> 8;
		bin[3] = klen & 0xff;
		bin[4] = 4; /* extras: flags */
		bin[8] = total_body >> 24;
		bin[9] = total_body >> 16;
		bin[10] = total_body >> 8;
		bin[11] = total_body;
		__builtin_memcpy(&bin[12], &opaque, 4);
#pragma unroll
		for (int i = 0; i < 8; i++)
			bin[16 + i] = cas >> (56 - 8 * i);
		bin[24] = hit->flags >> 24;
		bin[25] = hit->flags >> 16;
		bin[26] = hit->flags >> 8;
		bin[27] = hit->flags;
#pragma unroll
		for (int i = 0; i < (MC_BIN_HDR + 4) / 2; i++)
			sum += ((__u32)bin[2 * i] << 8) | bin[2 * i + 1];
		if (bpf_xdp_store_bytes(ctx, body, bin, sizeof(bin)))
			return XDP_DROP;
		if (klen) {
			barrier_var(klen);
			if (klen > WEIR_KV_MAX_KEY)
				return XDP_DROP;
			if (bpf_xdp_store_bytes(ctx, off, s->key.data, klen))
				return XDP_DROP;
			off += klen;
			sum += hit->sum_key;
		}
		if (hit->value_len) {
			__u64 n = hit->value_len;
			__u16 v = kv_fold(hit->sum_body);

			barrier_var(n);
			if (n > WEIR_KV_MAX_VALUE)
				return XDP_DROP;
			if (bpf_xdp_store_bytes(ctx, off, (void *)e->data, n))
				return XDP_DROP;
			/* the value starts at an odd offset when the key length is odd */
			sum += (klen & 1) ? (__u16)((v << 8) | (v >> 8)) : v;
		}
	}

	csum = ~kv_fold(sum);
	if (csum == 0)
		csum = 0xffff;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	uh = data + l4;
	if ((void *)(uh + 1) > data_end)
		return XDP_DROP;
	uh->check = bpf_htons(csum);
	kv_stat(WEIR_KV_STAT_CACHE_TX);
	return XDP_TX;
}

#endif /* WEIR_KV_CACHE_H */
