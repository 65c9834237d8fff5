/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * software.h - handing a packet to the software tier: the AF_XDP socket of
 * the worker it goes to, on the queue it arrived on.
 *
 * The kernel delivers only to a socket bound to the very interface and queue
 * a packet came in on, so every worker has a socket on every queue (they
 * share the queue's UMEM), and `xsks` has a block of WEIR_MAX_QUEUES *
 * workers entries per interface (its weir_iface.xsk_slot). What the kernel
 * drops after the verdict (a full RX ring) the socket's own statistics count.
 *
 * Which worker (cfg_dist_mode, the twin of weir_software_engine::distribution::Steering):
 * the flow hash's bucket (its low bits) has a home worker, bucket % workers.
 * - flow: the home worker.
 * - spray (seed 001): every packet in scope (TCP, or all with cfg_spray_all)
 *   is numbered, and goes to worker seq % workers.
 * - adaptive (seed 003): the home worker, unless the control thread spread
 *   the bucket over a worker set (`dist_sets`); then numbered, to
 *   ids[seq % len]. In-scope packets are counted per bucket (`dist_packets`):
 *   the offered load the decision reads.
 * With several workers every packet carries struct weir_xsk_meta in front of
 * it: its number in the ingress order of its (interface, queue), or the mark
 * that it has none. The number comes from a plain counter per queue: native
 * XDP on one RX queue runs in that queue's NAPI context, which one CPU at a
 * time polls, so its packets are seen one after the other, and a number not
 * used can be given back. (Generic XDP runs wherever the stack receives a
 * packet, several CPUs at once for one queue: there ingress order is not
 * defined, and weir refuses to reorder.)
 */
#ifndef WEIR_SOFTWARE_H
#define WEIR_SOFTWARE_H

#include "hash.h"
#include "maps.h"
#include "parse.h"
#include "stats.h"

/* Load-time: WEIR_TIER_* (weir.h). */
const volatile __u32 cfg_tier = WEIR_TIER_XDP;
/* Load-time: the workers and how packets are distributed to them. */
const volatile __u32 cfg_workers = 1;        /* 1..=WEIR_MAX_QUEUES */
const volatile __u32 cfg_dist_mode = WEIR_DIST_FLOW;
const volatile __u32 cfg_dist_buckets = 4096; /* a power of two, >= workers */
const volatile __u32 cfg_spray_all = 0;      /* 1: non-TCP packets spread too */

/* The next sequence number of each (interface slot, RX queue). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* sized by the loader */
	__type(key, __u32);
	__type(value, __u32);
} xsk_seq SEC(".maps");

/* Adaptive: each bucket's workers, written by the control thread. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* sized by the loader */
	__type(key, __u32);
	__type(value, struct weir_worker_set);
} dist_sets SEC(".maps");

/* Adaptive: in-scope packets per bucket, per CPU, read by the control thread. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1); /* sized by the loader */
	__type(key, __u32);
	__type(value, __u64);
} dist_packets SEC(".maps");

/* Where a packet goes: its worker and whether it is numbered. */
struct route {
	__u32 home; /* the worker of its bucket */
	__u32 worker;
	__u32 numbered;
	__u32 seq;
};

/* Takes the queue's next number. Returns the counter, to give the number
 * back through if the packet goes nowhere (NULL: no counter, no number). */
static __always_inline __u32 *take_number(__u32 queue_key, struct route *r)
{
	__u32 *next = bpf_map_lookup_elem(&xsk_seq, &queue_key);

	if (!next)
		return NULL;
	r->numbered = 1;
	r->seq = (*next)++;
	return next;
}

/* The worker of a packet (cfg_dist_mode), numbering it if it is spread. */
static __always_inline __u32 *choose(const struct packet *pkt, __u32 seed, __u32 queue_key,
				     struct route *r)
{
	__u32 hash = weir_flow_hash(&pkt->key, seed);
	__u32 bucket = hash & (cfg_dist_buckets - 1);
	struct weir_worker_set *set;
	__u32 *give_back;
	__u64 *count;

	r->home = bucket % cfg_workers;
	r->worker = r->home;
	if (cfg_dist_mode == WEIR_DIST_FLOW || (!cfg_spray_all && pkt->key.proto != IPPROTO_TCP))
		return NULL;
	if (cfg_dist_mode == WEIR_DIST_SPRAY) {
		give_back = take_number(queue_key, r);
		if (r->numbered)
			r->worker = r->seq % cfg_workers;
		return give_back;
	}
	count = bpf_map_lookup_elem(&dist_packets, &bucket);
	if (count)
		*count += 1;
	set = bpf_map_lookup_elem(&dist_sets, &bucket);
	if (!set || set->len < 2 || set->len > WEIR_MAX_SPREAD)
		return NULL;
	give_back = take_number(queue_key, r);
	if (r->numbered) {
		__u32 i = r->seq % set->len;

		if (i < WEIR_MAX_SPREAD)
			r->worker = set->ids[i];
	}
	return give_back;
}

/* Puts the route in front of the packet. Fails only if the driver has no
 * room for metadata; the packet then goes unnumbered to its home worker. */
static __always_inline int write_meta(struct xdp_md *ctx, const struct route *r)
{
	struct weir_xsk_meta *meta;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*meta)))
		return -1;
	meta = (void *)(long)ctx->data_meta;
	if ((void *)(meta + 1) > (void *)(long)ctx->data) {
		bpf_xdp_adjust_meta(ctx, sizeof(*meta));
		return -1;
	}
	meta->seq = r->seq;
	meta->mark = r->numbered ? WEIR_XSK_META_NUMBERED : WEIR_XSK_META_UNNUMBERED;
	return 0;
}

static __always_inline int to_software(struct xdp_md *ctx, const struct packet *pkt, __u32 seed)
{
	__u32 ifindex = ctx->ingress_ifindex, queue = ctx->rx_queue_index, key;
	struct weir_iface *iface = bpf_map_lookup_elem(&ifaces, &ifindex);
	struct route r = {};
	__u32 *give_back = NULL;

	if (!iface || queue >= WEIR_MAX_QUEUES)
		goto no_worker;
	key = iface->xsk_slot * WEIR_MAX_QUEUES + queue;
	if (cfg_workers > 1) {
		give_back = choose(pkt, seed, key, &r);
		if (write_meta(ctx, &r)) {
			/* No number travels: the packet goes home unnumbered. */
			if (give_back)
				*give_back -= 1;
			give_back = NULL;
			r.worker = r.home;
		}
		key = key * cfg_workers + r.worker;
	}
	if (bpf_redirect_map(&xsks, key, XDP_DROP) == XDP_REDIRECT) {
		stat_inc(WEIR_STAT_TO_SOFTWARE);
		return XDP_REDIRECT;
	}
	/* Nobody will see this number: give it back, so the reorder stage
	 * never waits for it. */
	if (give_back)
		*give_back -= 1;
no_worker:
	stat_inc(WEIR_STAT_DROP_NO_WORKER);
	return XDP_DROP;
}

#endif /* WEIR_SOFTWARE_H */
