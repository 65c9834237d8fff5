/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * weir.h - the one header shared by the BPF programs and Rust.
 *
 * Everything a map key, a map value or a table layout needs lives here and
 * nowhere else: Rust gets these types through bindgen (crate weir-abi), so a
 * struct is never copied by hand. Every struct has explicit padding and a
 * size assertion, because the kernel and Rust must agree byte for byte.
 *
 * Addresses are stored as four big-endian 32-bit words. An IPv4 address sits
 * in word 0 with words 1..3 zero; `family` says which one it is.
 */
#ifndef WEIR_H
#define WEIR_H

#include <linux/types.h>

/* Address families as stored in `family` fields (match AF_INET/AF_INET6). */
#define WEIR_AF_INET 2
#define WEIR_AF_INET6 10

/* Forwarding modes of a VIP. */
#define WEIR_MODE_NAT 0 /* rewrite dst addr+port, reverse-NAT the replies */
#define WEIR_MODE_DSR 1 /* rewrite L2 only; the DIP owns the VIP on lo */
#define WEIR_MODE_IPIP 2 /* encapsulate in IP (IPIP, IPv6-in-IPv6) to the DIP */
#define WEIR_MODE_GUE 3  /* encapsulate in IP + UDP (GUE variant 1) to the DIP */

/* What weir_lb carries (rodata cfg_features, lib/features.h): the loader
 * sets the features the configuration being served uses, and the verifier
 * removes the code of the others. dsr is always carried. */
#define WEIR_FEAT_NAT 0x1       /* nat VIPs: the rewrite, reverse entries, replies */
#define WEIR_FEAT_IPIP 0x2      /* ipip VIPs: IP-in-IP encapsulation */
#define WEIR_FEAT_GUE 0x4       /* gue VIPs: GUE encapsulation */
#define WEIR_FEAT_QUIC 0x8      /* QUIC VIPs: routing by connection ID */
#define WEIR_FEAT_TELEMETRY 0x10 /* passive telemetry of nat DIPs */
#define WEIR_FEAT_ALL 0x1f

/* GUE's UDP destination port unless configured (Katran's). */
#define WEIR_GUE_PORT 6080
/* The outer source of an encapsulated packet, unless configured, is derived
 * from the flow (RSS entropy at the DIP) in these prefixes: 172.16.0.0/16,
 * and fd77:6569:7200::/96 ("weir" in a unique local /48). */
#define WEIR_ENCAP_SRC_V4_PREFIX 0xac100000u
#define WEIR_ENCAP_SRC_V6_PREFIX0 0xfd776569u
#define WEIR_ENCAP_SRC_V6_PREFIX1 0x72000000u

/* Actions for traffic weir does not balance (rodata knobs). */
#define WEIR_ACT_PASS 0
#define WEIR_ACT_DROP 1

/* Data-plane tiers (rodata cfg_tier of weir_lb). */
#define WEIR_TIER_XDP 0      /* everything in XDP: dispatch, connection table, rewrite */
#define WEIR_TIER_SOFTWARE 1 /* XDP steers VIP traffic and nat replies to the workers */
#define WEIR_TIER_HYBRID 2   /* XDP forwards what its bounded fast table holds, the
			      * workers the rest (HNLB) */

/* The software tier's AF_XDP sockets sit in the XSKMAP `xsks` at
 * (xsk_slot * WEIR_MAX_QUEUES + RX queue) * workers + worker, xsk_slot being
 * the interface's (weir_iface): every worker has a socket on every queue.
 * A packet from a queue at or past this bound finds no worker. */
#define WEIR_MAX_QUEUES 256

/* How XDP picks a worker (rodata cfg_dist_mode; weir_software_engine::distribution). */
#define WEIR_DIST_FLOW 0     /* the home worker of the flow hash's bucket */
#define WEIR_DIST_SPRAY 1    /* round robin per packet, numbered for the reorder stage */
#define WEIR_DIST_ADAPTIVE 2 /* home, or the bucket's workers in `dist_sets`, numbered */
/* Workers one bucket is spread over at most (weir_software_engine MAX_SPREAD). */
#define WEIR_MAX_SPREAD 16

/* What XDP puts in front of a packet it hands to a worker, when there are
 * several (bpf_xdp_adjust_meta): the packet's number in the ingress order of
 * its (interface, queue), which the reorder stage restores before transmit. */
struct weir_xsk_meta {
	__u32 seq;
	__u32 mark; /* WEIR_XSK_META_NUMBERED: seq is the packet's; else no number */
};
_Static_assert(sizeof(struct weir_xsk_meta) == 8, "weir_xsk_meta size");
#define WEIR_XSK_META_NUMBERED 0x7165736eu   /* "nseq" */
#define WEIR_XSK_META_UNNUMBERED 0x7165735fu /* "_seq" */

/* A bucket's workers in adaptive mode (map `dist_sets`): a packet numbered
 * seq goes to ids[seq % len]; len 0 or 1 means the bucket's home worker. */
struct weir_worker_set {
	__u16 len;
	__u16 ids[WEIR_MAX_SPREAD];
};
_Static_assert(sizeof(struct weir_worker_set) == 34, "weir_worker_set size");

/* What a TCP packet that misses the connection table and is not a SYN does. */
#define WEIR_NONSYN_DISPATCH 0 /* dispatch like a new flow and install it */
#define WEIR_NONSYN_DROP 1

/*
 * AWFD table geometry. Stage 1 maps a flow to a priority class through
 * cumulative ranges, stage 2 picks a member of that class. Class 0 (no
 * available capacity) is never stored, so at most WEIR_MAX_CLASSES non-empty
 * classes, which bounds m (the maximum weight) to WEIR_MAX_CLASSES.
 */
#define WEIR_MAX_CLASSES 16
#define WEIR_MAX_CLASS_MEMBERS 256
/* Two table versions per VIP: the controller fills the inactive one, then
 * flips the VIP's version word, so a reader sees one table or the other. */
#define WEIR_TABLE_SLOTS 2

/* A DIP slot in the `dips` array is in use. */
#define WEIR_DIP_F_LIVE (1U << 0)

/* Connection table key: the 5-tuple as seen on the wire. For the reverse
 * (reply) table it is the tuple of the reply: DIP -> client. */
struct weir_flow_key {
	__be32 src[4];
	__be32 dst[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u8 pad[2];
};
_Static_assert(sizeof(struct weir_flow_key) == 40, "weir_flow_key size");

/* The same tuple of an IPv4 connection, as the IPv4 tables (`conns4`,
 * `rev_nat4`) key it: the family is the table's, the addresses one word
 * each. A 16-byte key keeps a table's elements at 104 bytes instead of
 * 128 and the key in the element's first cache line (README, "The
 * connection table", for what that does and does not buy). */
struct weir_flow_key4 {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct weir_flow_key4) == 16, "weir_flow_key4 size");

/* How a TCP connection is closing (weir_conn.close_flags). Closing
 * connections age out faster than established ones (conntrack.h). */
#define WEIR_CONN_F_FIN_CLIENT (1U << 0) /* the client sent a FIN */
#define WEIR_CONN_F_FIN_SERVER (1U << 1) /* the DIP sent a FIN (nat: replies pass weir) */
#define WEIR_CONN_F_RST (1U << 2)        /* either side sent a RST */

/* Entry ages are kept in ticks of 2^20 ns (about 1.05 ms) of the coarse
 * monotonic clock, truncated to 32 bits (wraps after about 52 days). */
#define WEIR_TICK_SHIFT 20

/* Connection table value: which DIP slot (and which incarnation of that
 * slot) a connection was dispatched to, and when it was last used. The
 * half-open table (connections that have not completed their handshake)
 * holds the same value. In the hybrid tier the software tier writes these
 * entries (the fast table) and XDP counts their packets in `hits`. */
struct weir_conn {
	__u32 dip_id;
	__u32 dip_gen;     /* must equal dips[dip_id].gen, else the DIP was removed */
	__u32 table_version; /* table version that dispatched it (observability) */
	__u32 req_us;      /* passive telemetry: start of the outstanding request, in
			    * microseconds of bpf_ktime_get_ns() truncated to 32 bits
			    * (never 0); 0 = no request outstanding */
	__u64 created_ns;  /* CLOCK_MONOTONIC ns at install (weir_lb's dispatch: the coarse clock) */
	__u32 atime;       /* last use, in WEIR_TICK_SHIFT ticks of the coarse clock;
			    * refreshed at most once per conntrack.h ATIME_REFRESH */
	__u8 close_flags;  /* WEIR_CONN_F_* */
	__u8 quic_handshake[3]; /* QUIC VIP: the handshake that opened the entry, the
				 * low 24 bits of the hash of the DCID its client's
				 * Initial chose, little-endian (lib/quic.h); 0: none */
	__u64 hits;        /* hybrid: client packets XDP forwarded by this entry (the
			    * offload policy's measure); not atomic: RSS keeps a
			    * connection on one CPU, a lost count costs accuracy only */
};
_Static_assert(sizeof(struct weir_conn) == 40, "weir_conn size");

/* Idle timeouts by connection state, in ticks (rodata of weir_lb; the
 * loader converts the configured seconds). */
struct weir_conn_timeouts {
	__u32 tcp_half_open;  /* SYN seen, handshake not complete */
	__u32 tcp_established;
	__u32 tcp_closing;    /* a FIN seen in one direction */
	__u32 tcp_closed;     /* FINs both ways, or a RST: the grace period */
	__u32 udp;
};
_Static_assert(sizeof(struct weir_conn_timeouts) == 20, "weir_conn_timeouts size");

/* A nat DIP endpoint (address, port, protocol): replies from it that have
 * no reverse entry are dropped, never sent out with the DIP's address. */
struct weir_endpoint {
	__be32 addr[4];
	__be16 port;
	__u8 proto;
	__u8 family;
};
_Static_assert(sizeof(struct weir_endpoint) == 20, "weir_endpoint size");

/* How many nat VIPs one DIP endpoint may serve: a reply without a reverse
 * entry (the SYN-ACK of a half-open connection) is looked up under each. */
#define WEIR_ENDPOINT_VIPS 4

/* A VIP's address and port (the client's destination). */
struct weir_vip_addr {
	__be32 addr[4];
	__be16 port;
	__u8 pad[2];
};
_Static_assert(sizeof(struct weir_vip_addr) == 20, "weir_vip_addr size");

/* nat_endpoints value: the nat VIPs whose DIPs include the endpoint. */
struct weir_nat_endpoint {
	__u32 count;
	struct weir_vip_addr vips[WEIR_ENDPOINT_VIPS];
};
_Static_assert(sizeof(struct weir_nat_endpoint) == 84, "weir_nat_endpoint size");

/* Reverse NAT value: the VIP a reply's source must be rewritten back to,
 * and the L2 path the connection's first packet arrived by, which the reply
 * leaves by (symmetric return path, no route lookup per reply). */
struct weir_rev_nat {
	__be32 vip[4];
	__be16 vport;
	__u8 family;
	__u8 pad;
	__u32 vip_id;
	__u32 ifindex;     /* interface the client's packets arrive on */
	__u8 client_mac[6]; /* L2 source of the client's packets: the reply's destination */
	__u8 lb_mac[6];     /* L2 destination of the client's packets: the reply's source */
};
_Static_assert(sizeof(struct weir_rev_nat) == 40, "weir_rev_nat size");

/* Half-open table value: the connection, and in nat mode its reverse entry,
 * which the DIP's replies use until the handshake is done. Kept with the
 * connection, a nat SYN costs one table insert, not two: the replies find
 * it by their endpoint's VIPs (weir_nat_endpoint), not by a key of their
 * own. */
struct weir_half_open {
	struct weir_conn conn;
	struct weir_rev_nat rev;
};
_Static_assert(sizeof(struct weir_half_open) == 80, "weir_half_open size");

/* VIP table key. */
struct weir_vip_key {
	__be32 addr[4];
	__be16 port;
	__u8 proto;
	__u8 family;
};
_Static_assert(sizeof(struct weir_vip_key) == 20, "weir_vip_key size");

/* VIP table value. */
struct weir_vip {
	__u32 vip_id; /* index into tables, versions and per-VIP counters */
	__u8 mode;    /* WEIR_MODE_* */
	__u8 quic_sid_len;   /* QUIC VIP (UDP): server ID octets in its CIDs
			      * (weir_quic.h); 0: not QUIC */
	__u8 quic_config_id; /* QUIC VIP: the config rotation codepoint */
	__u8 pad;
};
_Static_assert(sizeof(struct weir_vip) == 8, "weir_vip size");

/* The VIP slot array `vip_slots` (vip_match.h): a VIP's key hashes to one
 * slot (weir_vip_slot_of), which holds it unless another VIP got there
 * first. Every key in `vips` is in its slot or its slot has MORE, so a
 * packet to a VIP matches without a hash-map lookup in the common case. */
#define WEIR_VIP_SLOT_USED 1 /* key and vip are a VIP of `vips` */
#define WEIR_VIP_SLOT_MORE 2 /* VIPs of this slot other than key live only in `vips` */
/* Slots per VIP of max_vips, before rounding up to a power of two. */
#define WEIR_VIP_SLOTS_PER_VIP 4
/* The slot hash's multiplier: a prime next to 2^32 / golden ratio. */
#define WEIR_VIP_SLOT_MULT 0x9e3779b1u

struct weir_vip_slot {
	struct weir_vip_key key;
	struct weir_vip vip;
	__u32 flags; /* WEIR_VIP_SLOT_* */
};
_Static_assert(sizeof(struct weir_vip_slot) == 32, "weir_vip_slot size");

/* Where a frame to a DIP leaves: the egress interface and both MACs, as the
 * control plane resolved them, so that forwarding needs no lookup. */
struct weir_next_hop {
	__u32 ifindex; /* 0: not resolved; forward.h falls back (FIB, configured MAC) */
	__u8 dmac[6];  /* the DIP's, or its gateway's, MAC */
	__u8 smac[6];  /* the egress interface's MAC */
};
_Static_assert(sizeof(struct weir_next_hop) == 16, "weir_next_hop size");

/* One DIP slot. `weight` and `vip_id` are informational for `weir status`;
 * the data plane reads the address, port, next hop, MAC and liveness. */
struct weir_dip {
	__be32 addr[4];
	__be16 port;   /* NAT destination port; 0 keeps the VIP's port */
	__u8 family;
	__u8 mac_set;  /* 1: `mac` is a configured next hop for this DIP */
	__u8 mac[6];
	__u8 pad[2];
	__u32 flags;   /* WEIR_DIP_F_* */
	__u32 gen;     /* bumped each time the slot is (re)assigned */
	__u32 vip_id;
	__u32 weight;
	struct weir_next_hop nh;
};
_Static_assert(sizeof(struct weir_dip) == 60, "weir_dip size");

/* Stage 1 of AWFD for one (VIP, slot): the flow hash, scaled to
 * [0, total) as (hash * total) >> 32, selects the first range i with
 * scaled < bound[i]; that range's class index picks the stage-2 row.
 * bound[] is cumulative sum of k * |B_k| over non-empty classes. */
struct weir_class_ranges {
	__u32 nr;    /* number of non-empty classes, 0 = no DIP available */
	__u32 total; /* bound[nr - 1]: sum of all weights */
	__u32 bound[WEIR_MAX_CLASSES];
	__u32 class_weight[WEIR_MAX_CLASSES]; /* k of each range (observability) */
};
_Static_assert(sizeof(struct weir_class_ranges) == 136, "weir_class_ranges size");

/* Stage 2 of AWFD for one (VIP, slot, range index): the members of one
 * priority class; a flow picks member[weir_rehash(hash) % nr]. The rows sit
 * in an array at (vip_id * WEIR_TABLE_SLOTS + slot) * WEIR_MAX_CLASSES +
 * range; a row past the slot's last range is empty (nr = 0) or stale, and
 * never read. */
struct weir_class_members {
	__u32 nr;
	__u32 dip_id[WEIR_MAX_CLASS_MEMBERS];
};
_Static_assert(sizeof(struct weir_class_members) == 4 + 4 * WEIR_MAX_CLASS_MEMBERS,
	       "weir_class_members size");

/* Per-CPU outcome counters. Every packet ends in exactly one of the
 * "outcome" counters; "event" counters count extra facts and may overlap.
 * WEIR_STAT_RX is the sum of the outcomes: user space adds it up, the data
 * plane does not count it. */
enum weir_stat {
	WEIR_STAT_RX = 0,
	/* outcomes */
	WEIR_STAT_PASS_NOT_IP,      /* ARP, LLDP, ... */
	WEIR_STAT_PASS_NOT_VIP,     /* IP but no VIP matches */
	WEIR_STAT_PASS_ICMP,
	WEIR_STAT_PASS_FRAGMENT,
	WEIR_STAT_PASS_NO_NEIGH,    /* rewritten, handed to the kernel to resolve the next hop */
	WEIR_STAT_DROP_NOT_VIP,     /* as configured */
	WEIR_STAT_DROP_ICMP,
	WEIR_STAT_DROP_FRAGMENT,
	WEIR_STAT_DROP_MALFORMED,   /* truncated, bad IHL, bad lengths */
	WEIR_STAT_PASS_MALFORMED,
	WEIR_STAT_DROP_NO_BACKEND,  /* VIP with no available DIP */
	WEIR_STAT_DROP_NONSYN_MISS, /* as configured */
	WEIR_STAT_DROP_NO_ROUTE,    /* fib lookup failed */
	WEIR_STAT_TX,               /* XDP_TX */
	WEIR_STAT_REDIRECT,         /* XDP_REDIRECT via devmap */
	WEIR_STAT_DROP_REDIRECT,    /* redirect target not in tx_ports */
	WEIR_STAT_DROP_REPLY_NO_STATE, /* a nat DIP's reply with no reverse entry */
	WEIR_STAT_TO_SOFTWARE,      /* XDP_REDIRECT to a software-tier worker's socket */
	WEIR_STAT_DROP_NO_WORKER,   /* for the software tier, but no socket on its queue */
	WEIR_STAT_DROP_TOO_BIG,     /* ipip/gue: the encapsulated packet exceeds encap_mtu,
				     * or the frame cannot grow */
	WEIR_STAT_DROP_SYN_BUDGET,  /* software, hybrid: a SYN beyond the workers' budget
				     * of new connections (admission.h) */
	WEIR_STAT_LAST_OUTCOME = WEIR_STAT_DROP_SYN_BUDGET, /* outcomes are contiguous */
	/* events */
	WEIR_STAT_CONN_HIT,
	WEIR_STAT_CONN_MISS,
	WEIR_STAT_CONN_NEW,         /* established entry installed (TCP: handshake done) */
	WEIR_STAT_CONN_INSTALL_FAIL,
	WEIR_STAT_CONN_STALE,       /* hit on a removed DIP: redispatched */
	WEIR_STAT_NONSYN_MISS,
	WEIR_STAT_REV_NAT,          /* reply rewritten back to the VIP */
	WEIR_STAT_MAC_FALLBACK,     /* configured DIP MAC used, fib had no neighbour */
	WEIR_STAT_HALF_OPEN_NEW,    /* SYN dispatched into the half-open table */
	WEIR_STAT_SYN_RETRANSMIT,   /* SYN that found its half-open entry: same DIP */
	WEIR_STAT_CONN_REUSED,      /* SYN on an established 5-tuple: dispatched anew */
	WEIR_STAT_CONN_EXPIRED,     /* entry found past its idle timeout: a miss */
	WEIR_STAT_CONN_CLOSING,     /* first FIN or RST of a connection */
	WEIR_STAT_MAX,
};

/* Combined counters: the common ends of a packet's path (a connection hit
 * or a reverse-NAT reply, sent by XDP_TX or redirect) are one per-CPU
 * update each, not one per fact. They follow the public counters in the
 * `stats` map; user space adds each to the event and the outcome it stands
 * for (weir_dataplane::maps::fold_stats). */
enum weir_stat_path {
	WEIR_STAT_HIT_TX = WEIR_STAT_MAX, /* conn_hit + tx */
	WEIR_STAT_HIT_REDIRECT,           /* conn_hit + redirect */
	WEIR_STAT_REV_TX,                 /* rev_nat + tx */
	WEIR_STAT_REV_REDIRECT,           /* rev_nat + redirect */
	WEIR_STAT_SLOTS,                  /* entries of the `stats` map */
};

/* An interface weir is attached to (map `ifaces`, keyed by ifindex). */
struct weir_iface {
	__u8 mac[6];
	__u8 pad[2];
	__u32 xsk_slot; /* its block of WEIR_MAX_QUEUES entries in `xsks` */
};
_Static_assert(sizeof(struct weir_iface) == 12, "weir_iface size");

/* Per-VIP and per-DIP per-CPU counters. */
struct weir_traffic {
	__u64 packets;
	__u64 bytes;
	__u64 new_conns;
};
_Static_assert(sizeof(struct weir_traffic) == 24, "weir_traffic size");

/* Passive telemetry of one DIP, per CPU (nat mode, while passive_telemetry_on):
 * a request starts when a client payload arrives on a connection with no
 * request outstanding; it completes when the DIP's first reply payload after
 * it passes the reverse path. The controller turns deltas of these into a
 * mean processing time (sum_ns / samples) and a request rate. */
struct weir_dip_telemetry {
	__u64 requests; /* requests started */
	__u64 samples;  /* requests completed by a reply */
	__u64 sum_ns;   /* sum of their request-to-first-reply delays */
};
_Static_assert(sizeof(struct weir_dip_telemetry) == 24, "weir_dip_telemetry size");

#endif /* WEIR_H */
