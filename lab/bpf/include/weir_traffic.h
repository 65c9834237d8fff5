/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * weir_traffic.h - what the labs' packet generator (lab/bpf/weir_gen.bpf.c) and
 * packet sink (lab/bpf/weir_sink.bpf.c) share with Rust. Rust reads these types
 * from the programs' skeletons (weir-traffic gen.rs and sink.rs), so they
 * are defined here only. Every struct has explicit padding and a size
 * assertion.
 */
#ifndef WEIR_TRAFFIC_H
#define WEIR_TRAFFIC_H

#include <linux/types.h>

/* The longest header template weir_gen restores per packet: Ethernet,
 * IPv6 and TCP. */
#define WEIR_GEN_HEADERS_MAX (14 + 40 + 20)

/* How weir_gen picks the flow of each packet (cfg_dist). */
enum weir_gen_dist {
	WEIR_GEN_ROUND_ROBIN = 0, /* packet c carries flow c mod cfg_flows */
	WEIR_GEN_UNIFORM = 1,     /* a uniformly random flow per packet */
	WEIR_GEN_ZIPF = 2,        /* a flow drawn through the alias table gen_alias */
	WEIR_GEN_FRESH = 3,       /* packet c carries flow c: a new source per packet */
};

/* The per-CPU packet counter of weir_gen. The thread that generates on a
 * CPU starts it at its own offset and strides by the number of threads, so
 * threads together number their packets 0, 1, 2, ... without sharing. */
struct weir_gen_state {
	__u64 next;
	__u64 stride;
};
_Static_assert(sizeof(struct weir_gen_state) == 16, "weir_gen_state size");

/* One column of a Walker/Vose alias table (Zipf flows): draw a column k
 * uniformly, keep k if a uniform 32-bit number is below `keep`, else take
 * `alias`. */
struct weir_gen_alias {
	__u32 keep;
	__u32 alias;
};
_Static_assert(sizeof(struct weir_gen_alias) == 8, "weir_gen_alias size");

/* weir_sink's per-CPU counters. Every frame is either counted (packets,
 * bytes) or passed to the kernel uncounted (passed). */
struct weir_sink_stats {
	__u64 packets;    /* TCP/UDP frames that matched the filter */
	__u64 bytes;      /* their frame bytes (Ethernet header on, no FCS) */
	__u64 syns;       /* of them, TCP with SYN set and ACK clear */
	__u64 passed;     /* frames that did not match, left to the kernel */
	__u64 flows_new;  /* first packets of a flow (with flow tracking) */
	__u64 flows_full; /* packets of flows the full flow table could not take */
};
_Static_assert(sizeof(struct weir_sink_stats) == 48, "weir_sink_stats size");

#endif /* WEIR_TRAFFIC_H */
