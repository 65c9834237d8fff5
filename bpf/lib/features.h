/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * features.h - what this load of weir_lb carries. The loader sets
 * cfg_features from the configuration it serves (the modes of its VIPs,
 * QUIC, passive telemetry); every use of a feature is behind feature_on(),
 * a load-time constant, so the verifier removes what the configuration
 * does not use. The control plane loads a program that carries more, into
 * the same maps, before it writes a VIP that needs it: a packet never meets
 * a program without its VIP's feature.
 */
#ifndef WEIR_FEATURES_H
#define WEIR_FEATURES_H

#include "weir.h"

/* The object's own value carries everything: a loader that does not set it
 * gets the whole program. */
const volatile __u32 cfg_features = WEIR_FEAT_ALL;

static __always_inline int feature_on(__u32 feature)
{
	return (cfg_features & feature) != 0;
}

/* Whether a VIP of `mode` is nat in this program. */
static __always_inline int nat_mode(__u8 mode)
{
	return feature_on(WEIR_FEAT_NAT) && mode == WEIR_MODE_NAT;
}

#endif /* WEIR_FEATURES_H */
