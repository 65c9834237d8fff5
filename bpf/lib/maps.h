/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * maps.h - every map of the load balancer. Sizes here are defaults; the
 * loader sets the real ones from the configuration before load. Maps whose
 * state must outlive the daemon are pinned by name under /sys/fs/bpf/weir.
 */
#ifndef WEIR_MAPS_H
#define WEIR_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "weir.h"
#include "weir_quic.h"

#define WEIR_DEFAULT_CONNS (1 << 20)
#define WEIR_DEFAULT_CONNS_V6 (1 << 17)
#define WEIR_DEFAULT_HALF_OPEN (1 << 18)
#define WEIR_DEFAULT_VIPS 256
#define WEIR_DEFAULT_DIPS 4096

/* 5-tuple of a client's packets -> the DIP its connection is pinned to.
 * Only confirmed connections live here (TCP: the client's first packet after
 * its SYN), so a flood of SYNs cannot push them out. In the hybrid tier this
 * is the fast table: bounded (fast_table_size), written only by the software
 * tier, and an insert into a full table evicts the least recently used.
 * IPv4 connections live in `conns4` under the compact key, IPv6 ones in
 * `conns`; conntrack.h's conn_* helpers pick the table. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, WEIR_DEFAULT_CONNS);
	__type(key, struct weir_flow_key4);
	__type(value, struct weir_conn);
} conns4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, WEIR_DEFAULT_CONNS_V6);
	__type(key, struct weir_flow_key);
	__type(value, struct weir_conn);
} conns SEC(".maps");

/* 5-tuple of a DIP's replies (nat mode) -> the VIP to rewrite them back to;
 * split by family as `conns4`/`conns` (conntrack.h's rev_* helpers). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, WEIR_DEFAULT_CONNS);
	__type(key, struct weir_flow_key4);
	__type(value, struct weir_rev_nat);
} rev_nat4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, WEIR_DEFAULT_CONNS_V6);
	__type(key, struct weir_flow_key);
	__type(value, struct weir_rev_nat);
} rev_nat SEC(".maps");

/* Connections that have not completed their handshake (a SYN, or a first
 * non-SYN packet with no entry), bounded apart from `conns`: the client's
 * next packet promotes the entry to `conns`. A nat entry carries its
 * reverse entry for the SYN-ACK. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, WEIR_DEFAULT_HALF_OPEN);
	__type(key, struct weir_flow_key);
	__type(value, struct weir_half_open);
} half_open SEC(".maps");

/* Endpoints of nat DIPs -> the nat VIPs they serve: a reply from one finds
 * its half-open connection through them, and with no connection at all it
 * is dropped. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WEIR_DEFAULT_DIPS);
	__type(key, struct weir_endpoint);
	__type(value, struct weir_nat_endpoint);
} nat_endpoints SEC(".maps");

/* (address, port, protocol) -> VIP id and forwarding mode. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WEIR_DEFAULT_VIPS);
	__type(key, struct weir_vip_key);
	__type(value, struct weir_vip);
} vips SEC(".maps");

/* DIP slots; connections refer to a slot by index and generation. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_DIPS);
	__type(key, __u32);
	__type(value, struct weir_dip);
} dips SEC(".maps");

/* VIP id -> active table version; slot = version % WEIR_TABLE_SLOTS. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_VIPS);
	__type(key, __u32);
	__type(value, __u32);
} table_version SEC(".maps");

/* AWFD stage 1, indexed by vip_id * WEIR_TABLE_SLOTS + slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_VIPS * WEIR_TABLE_SLOTS);
	__type(key, __u32);
	__type(value, struct weir_class_ranges);
} class_ranges SEC(".maps");

/* AWFD stage 2: the members of each priority class, by (vip, slot, range)
 * (weir.h): an array, so a dispatch reads its row without hashing a key. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_VIPS * WEIR_TABLE_SLOTS * WEIR_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct weir_class_members);
} class_members SEC(".maps");

/* The software tier's AF_XDP sockets, at (xsk_slot * WEIR_MAX_QUEUES + RX
 * queue) * workers + worker (weir.h); sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, WEIR_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/* Interfaces weir is attached to: redirect targets. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

/* ifindex -> that interface's MAC (source MAC of what leaves by it) and
 * its slot in `xsks`. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct weir_iface);
} ifaces SEC(".maps");

/* Outcome and event counters, enum weir_stat, then the combined ones of
 * enum weir_stat_path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_STAT_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Traffic per VIP id. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_VIPS);
	__type(key, __u32);
	__type(value, struct weir_traffic);
} vip_traffic SEC(".maps");

/* Traffic per DIP slot. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_DIPS);
	__type(key, __u32);
	__type(value, struct weir_traffic);
} dip_traffic SEC(".maps");

/* Passive telemetry per DIP slot (telemetry.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_DIPS);
	__type(key, __u32);
	__type(value, struct weir_dip_telemetry);
} dip_telemetry SEC(".maps");

/* The VIPs of `vips` by slot (vip_match.h): what a packet looks up first.
 * Pinned, so that a program taking over shares it with the one it
 * replaces; user space resynchronises it with `vips` at every apply. */
#define WEIR_DEFAULT_VIP_SLOTS (WEIR_DEFAULT_VIPS * WEIR_VIP_SLOTS_PER_VIP)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_VIP_SLOTS);
	__type(key, __u32);
	__type(value, struct weir_vip_slot);
} vip_slots SEC(".maps");

/* QUIC VIPs (quic.h): (VIP, server ID) -> the DIP slot that owns it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WEIR_DEFAULT_DIPS);
	__type(key, struct weir_quic_sid_key);
	__type(value, struct weir_quic_route);
} quic_server_ids SEC(".maps");

/* QUIC VIPs: DIP slot -> the server ID it owns (weir_quic_sid_owner). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_DIPS);
	__type(key, __u32);
	__type(value, struct weir_quic_sid_owner);
} quic_sid_owners SEC(".maps");

/* QUIC routing counters per VIP id and per DIP slot. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_VIPS);
	__type(key, __u32);
	__type(value, struct weir_quic_counters);
} vip_quic SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_DEFAULT_DIPS);
	__type(key, __u32);
	__type(value, struct weir_quic_counters);
} dip_quic SEC(".maps");

#endif /* WEIR_MAPS_H */
