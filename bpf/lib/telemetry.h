/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * telemetry.h - passive load telemetry of nat DIPs (Spotlight IV-E1): the
 * data plane sees both a request and its reply, so it measures each DIP's
 * request-to-first-reply delay itself, with no agent on the DIP.
 *
 * Forward path: a client payload on a connection with no request
 * outstanding stamps the connection entry (weir_conn.req_us) and counts a
 * request. Reverse path: the DIP's first reply payload finds the forward
 * entry (client -> VIP; the reverse entry holds the VIP), adds the delay to
 * the DIP's per-CPU sums and clears the stamp. Pipelined requests are timed
 * from the first one. Races between CPUs on one connection at worst lose or
 * double one sample; no atomics on the hot path.
 */
#ifndef WEIR_TELEMETRY_H
#define WEIR_TELEMETRY_H

#include "conntrack.h"

/* Delays above this (in us) are not samples but idle gaps or a lost reply. */
#define WEIR_TELEMETRY_MAX_US (60U * 1000 * 1000)

static __always_inline __u32 telemetry_now_us(void)
{
	__u32 us = (__u32)(bpf_ktime_get_ns() / 1000);

	return us ? us : 1;
}

/* A client packet of an established connection to a nat DIP. Not
 * inlined, nor is telemetry_reply(): a program that carries telemetry
 * (features.h) switches it on and off at run time, and only with it on do
 * they run. */
static __noinline void telemetry_request(struct weir_conn *conn, const struct packet *pkt,
					      __u32 dip_id)
{
	struct weir_dip_telemetry *t;

	if (!pkt->payload_len || conn->req_us)
		return;
	conn->req_us = telemetry_now_us();
	t = bpf_map_lookup_elem(&dip_telemetry, &dip_id);
	if (t)
		t->requests += 1;
}

/* A DIP's reply (reverse NAT) towards the client of VIP `vip`:`vport`. */
static __noinline void telemetry_reply(const struct packet *pkt, const struct weir_rev_nat *rev)
{
	struct weir_flow_key fkey = {};
	struct weir_dip_telemetry *t;
	struct weir_conn *conn;
	__u32 start, delay_us, dip_id;

	if (!pkt->payload_len)
		return;
	forward_key_of_reply(pkt, rev, &fkey);
	conn = conn_lookup(&fkey);
	if (!conn)
		return;
	start = conn->req_us;
	if (!start)
		return;
	conn->req_us = 0;
	delay_us = telemetry_now_us() - start;
	if (delay_us > WEIR_TELEMETRY_MAX_US)
		return;
	dip_id = conn->dip_id;
	t = bpf_map_lookup_elem(&dip_telemetry, &dip_id);
	if (!t)
		return;
	t->samples += 1;
	t->sum_ns += (__u64)delay_us * 1000;
}

#endif /* WEIR_TELEMETRY_H */
