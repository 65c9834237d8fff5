//! What kinds of packet weir's XDP program saw in an HTTP trial, from its
//! data-plane counters: the SYNs it dispatched, the ACKs that promoted a
//! connection, the hits and the reverse NATs. Per connection, it is what
//! `weir-lab bench xdp --lifecycle --forward` prices with each kind's cost.

use serde::{Deserialize, Serialize};
use weir_abi::*;

/// Packets of each kind (totals over a trial, or per connection).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PacketMix {
    /// Runs of weir's XDP programs (every packet they saw).
    pub xdp_runs: f64,
    /// SYNs dispatched into the half-open table.
    pub syns: f64,
    /// SYNs that found their half-open entry (retransmitted).
    pub syn_retransmits: f64,
    /// Half-open entries promoted to the connection table (the client's ACK).
    pub promotions: f64,
    /// Client packets that hit their connection (data, ACKs, FIN, RST).
    pub hits: f64,
    /// DIP replies rewritten back to the VIP (nat).
    pub reverse_nats: f64,
    /// Connections that saw their first FIN or RST.
    pub closing: f64,
}

impl PacketMix {
    /// The counters' growth from `before` to `after` (weir's `stats`, folded
    /// per CPU) over `xdp_runs` runs.
    pub fn between(before: &[u64], after: &[u64], xdp_runs: u64) -> PacketMix {
        let d = |stat: u32| after[stat as usize].saturating_sub(before[stat as usize]) as f64;
        PacketMix {
            xdp_runs: xdp_runs as f64,
            syns: d(WEIR_STAT_HALF_OPEN_NEW),
            syn_retransmits: d(WEIR_STAT_SYN_RETRANSMIT),
            promotions: d(WEIR_STAT_CONN_NEW),
            hits: d(WEIR_STAT_CONN_HIT),
            reverse_nats: d(WEIR_STAT_REV_NAT),
            closing: d(WEIR_STAT_CONN_CLOSING),
        }
    }

    /// Every figure divided by `n` (per connection).
    pub fn per(&self, n: f64) -> PacketMix {
        let n = n.max(1e-9);
        PacketMix {
            xdp_runs: self.xdp_runs / n,
            syns: self.syns / n,
            syn_retransmits: self.syn_retransmits / n,
            promotions: self.promotions / n,
            hits: self.hits / n,
            reverse_nats: self.reverse_nats / n,
            closing: self.closing / n,
        }
    }

    /// The field-wise median of `mixes`; None when there are none.
    pub fn median(mixes: &[PacketMix]) -> Option<PacketMix> {
        if mixes.is_empty() {
            return None;
        }
        let m = |get: fn(&PacketMix) -> f64| {
            let v: Vec<f64> = mixes.iter().map(get).collect();
            super::report::median(&v)
        };
        Some(PacketMix {
            xdp_runs: m(|x| x.xdp_runs),
            syns: m(|x| x.syns),
            syn_retransmits: m(|x| x.syn_retransmits),
            promotions: m(|x| x.promotions),
            hits: m(|x| x.hits),
            reverse_nats: m(|x| x.reverse_nats),
            closing: m(|x| x.closing),
        })
    }

    /// XDP runs the counters above do not account for (ARP, packets passed
    /// to the kernel, drops).
    pub fn unclassified(&self) -> f64 {
        (self.xdp_runs
            - self.syns
            - self.syn_retransmits
            - self.promotions
            - self.hits
            - self.reverse_nats)
            .max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_the_counters_growth_per_connection() {
        let mut before = vec![0u64; WEIR_STAT_MAX as usize];
        before[WEIR_STAT_CONN_HIT as usize] = 100;
        let mut after = before.clone();
        after[WEIR_STAT_HALF_OPEN_NEW as usize] = 10;
        after[WEIR_STAT_CONN_NEW as usize] = 10;
        after[WEIR_STAT_CONN_HIT as usize] = 140;
        after[WEIR_STAT_REV_NAT as usize] = 30;
        let mix = PacketMix::between(&before, &after, 95).per(10.0);
        assert_eq!(mix.syns, 1.0);
        assert_eq!(mix.promotions, 1.0);
        assert_eq!(mix.hits, 4.0);
        assert_eq!(mix.reverse_nats, 3.0);
        assert_eq!(mix.unclassified(), 0.5);
        let other = PacketMix { hits: 6.0, ..mix };
        let third = PacketMix { hits: 9.0, ..mix };
        assert_eq!(PacketMix::median(&[mix, other, third]).unwrap().hits, 6.0);
        assert_eq!(PacketMix::median(&[]), None);
    }
}
