//! Passive telemetry (Spotlight IV-E1): the data plane times each nat
//! request from the client's first payload to the DIP's first reply payload
//! (`bpf/lib/telemetry.h`) and keeps per-DIP sums; the controller turns the
//! growth of those sums over one interval into a [`Sample`].

use std::collections::HashMap;
use std::time::Instant;

use weir_dataplane::maps::{DipTelemetry, Maps};

use super::Sample;

/// The sample between two readings `dt_s` seconds apart.
pub fn sample_between(prev: DipTelemetry, cur: DipTelemetry, dt_s: f64) -> Sample {
    let n = cur.samples.saturating_sub(prev.samples);
    let sum = cur.sum_ns.saturating_sub(prev.sum_ns);
    let requests = cur.requests.saturating_sub(prev.requests);
    Sample {
        processing_time_s: (n > 0 && sum > 0).then(|| sum as f64 / n as f64 / 1e9),
        rate_per_s: if dt_s > 0.0 {
            requests as f64 / dt_s
        } else {
            0.0
        },
    }
}

/// Remembers the last reading of every DIP slot.
#[derive(Debug, Default)]
pub struct PassiveReader {
    last: HashMap<u32, (Instant, DipTelemetry)>,
}

impl PassiveReader {
    /// The sample of `slot` since the previous call; `None` on the first
    /// call for a slot (no span yet) or when the map cannot be read.
    pub fn sample(&mut self, maps: &Maps, slot: u32, now: Instant) -> Option<Sample> {
        let cur = maps.dip_telemetry(slot).ok()?;
        let prev = self.last.insert(slot, (now, cur))?;
        Some(sample_between(
            prev.1,
            cur,
            now.duration_since(prev.0).as_secs_f64(),
        ))
    }

    /// Forgets slots no longer in use.
    pub fn retain(&mut self, slots: &[u32]) {
        self.last.retain(|s, _| slots.contains(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_become_mean_delay_and_rate() {
        let a = DipTelemetry {
            requests: 10,
            samples: 9,
            sum_ns: 9_000_000,
        };
        let b = DipTelemetry {
            requests: 30,
            samples: 29,
            sum_ns: 49_000_000,
        };
        let s = sample_between(a, b, 0.5);
        assert_eq!(s.processing_time_s, Some(0.002));
        assert_eq!(s.rate_per_s, 40.0);
        let idle = sample_between(b, b, 0.1);
        assert_eq!((idle.processing_time_s, idle.rate_per_s), (None, 0.0));
        // Counters that went back (a reloaded program) give no negative numbers.
        let back = sample_between(b, a, 0.1);
        assert_eq!((back.processing_time_s, back.rate_per_s), (None, 0.0));
    }
}
