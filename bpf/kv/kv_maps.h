/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * kv_maps.h - every map of the memcached switch (weir_kv), its load-time
 * knobs and its per-CPU counters. Sizes here are defaults; the loader
 * (crates/weir-dataplane/src/kv.rs) sets the real ones before load.
 */
#ifndef WEIR_KV_MAPS_H
#define WEIR_KV_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "weir.h"
#include "weir_kv.h"

#define KV_DEFAULT_SERVERS 256
#define KV_DEFAULT_POINTS 65536 /* per slot: twemproxy uses 160 per server */
#define KV_DEFAULT_CACHE 4096
#define KV_DEFAULT_BUCKETS 65536
#define KV_DEFAULT_REQUESTS 65536

/* Load-time knobs (.rodata), set by the loader. */
const volatile __be16 cfg_kv_port = 0;       /* VIP port, network order */
const volatile __u32 cfg_kv_vip_family = 0;  /* 0: any destination address */
const volatile __be32 cfg_kv_vip[4] = {};    /* VIP address when family != 0 */
const volatile __u32 cfg_kv_hash = WEIR_KV_HASH_FNV1A_64;
const volatile __u32 cfg_kv_dist = WEIR_KV_DIST_KETAMA;
const volatile __u32 cfg_kv_fwd = WEIR_KV_FWD_L2;
const volatile __u32 cfg_kv_points_cap = KV_DEFAULT_POINTS;   /* per slot */
const volatile __u32 cfg_kv_buckets_mask = KV_DEFAULT_BUCKETS - 1;
const volatile __u32 cfg_kv_cache = 1;        /* answer hits from kv_cache */
const volatile __u32 cfg_kv_sample_every = 0; /* 0: off; N: one key in N (random) */

/* Server index -> address, MAC, liveness. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KV_DEFAULT_SERVERS);
	__type(key, __u32);
	__type(value, struct weir_kv_server);
} kv_servers SEC(".maps");

/* [0]: active table version; slot = version % WEIR_KV_TABLE_SLOTS. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} kv_version SEC(".maps");

/* Slot -> number of continuum points and modula entries. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_KV_TABLE_SLOTS);
	__type(key, __u32);
	__type(value, struct weir_kv_table);
} kv_tables SEC(".maps");

/* Ketama continuum, sorted, at slot * cfg_kv_points_cap. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_KV_TABLE_SLOTS * KV_DEFAULT_POINTS);
	__type(key, __u32);
	__type(value, struct weir_kv_point);
} kv_continuum SEC(".maps");

/* Modula table (server index per weight unit), at slot * cfg_kv_points_cap. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_KV_TABLE_SLOTS * KV_DEFAULT_POINTS);
	__type(key, __u32);
	__type(value, __u32);
} kv_modula SEC(".maps");

/* Hot keys and their pre-rendered replies (written by user space only). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KV_DEFAULT_CACHE);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* RCU-freed: a reader never sees a reused entry */
	__type(key, struct weir_kv_key);
	__type(value, struct weir_kv_entry);
} kv_cache SEC(".maps");

/* Invalidation counters by key bucket; see struct weir_kv_entry. Mmapped by
 * user space, which bumps them with atomic adds too (kv::Cache::invalidate). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KV_DEFAULT_BUCKETS);
	__type(key, __u32);
	__type(value, struct weir_kv_bucket);
} kv_inval SEC(".maps");

/* [0]: flush generation, bumped by flush_all (mmapped by user space too). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} kv_gen SEC(".maps");

/* (client, port, request id) of a multi-datagram request -> its server. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KV_DEFAULT_REQUESTS);
	__type(key, struct weir_kv_req_key);
	__type(value, struct weir_kv_req);
} kv_requests SEC(".maps");

/* Sampled keys for the hot-key detector in user space. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} kv_samples SEC(".maps");

/* Outcome and event counters (enum weir_kv_stat). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_KV_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} kv_stats SEC(".maps");

/* Requests and bytes forwarded per server. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KV_DEFAULT_SERVERS);
	__type(key, __u32);
	__type(value, struct weir_kv_server_stats);
} kv_server_stats SEC(".maps");

/* Interfaces servers sit behind when it is not the ingress one (ifindex -> ifindex). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} kv_tx_ports SEC(".maps");

static __always_inline void kv_stat(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&kv_stats, &idx);

	if (v)
		*v += 1;
}

static __always_inline void kv_stat_add(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&kv_stats, &idx);

	if (v)
		*v += n;
}

#endif /* WEIR_KV_MAPS_H */
