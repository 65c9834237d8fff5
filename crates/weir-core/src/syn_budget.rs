//! The budget of SYNs per receiving CPU that XDP admits to the software
//! tier (admission.h), as plain values: the configuration checks it, the
//! loader writes it.

/// The budget of SYNs XDP hands to the software tier's workers, per CPU
/// that receives them (admission.h): established packets share the
/// workers' receive rings with SYNs, and a flood beyond this is dropped in
/// XDP (`drop_syn_budget`) before it can crowd them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynBudget {
    /// SYNs admitted per second on each CPU; 0 admits every SYN.
    pub rate: u32,
    /// SYNs that may pass at once after a quiet spell (the bucket's depth).
    pub burst: u32,
}

impl Default for SynBudget {
    /// 10,000 SYNs a second per CPU, a tenth of a second's worth at once:
    /// under what one worker handshakes while a flood's XDP work takes CPU
    /// from it on a 2-core machine (`weir-lab synflood`: at 20,000 its ring
    /// still overflowed at full flood speed), so the ring keeps room for
    /// the established connections.
    fn default() -> Self {
        SynBudget {
            rate: 10_000,
            burst: 1_000,
        }
    }
}

impl SynBudget {
    /// The highest rate: one SYN a nanosecond would leave no interval.
    pub const MAX_RATE: u32 = 100_000_000;

    /// Checks the bounds; the message names the key at fault.
    pub fn validate(&self) -> Result<(), String> {
        if self.rate > Self::MAX_RATE {
            return Err(format!(
                "syn_rate = {} is beyond {} SYNs a second; give a lower rate, or 0 to admit \
                 every SYN",
                self.rate,
                Self::MAX_RATE
            ));
        }
        if self.burst == 0 {
            return Err("syn_burst = 0 would admit no SYN at all; give at least 1".into());
        }
        if self.rate > 0 && u64::from(self.burst) > u64::from(self.rate) * 10 {
            return Err(format!(
                "syn_burst = {} is more than 10 s of syn_rate = {}: a burst that long fills \
                 the workers' rings as a flood does; give at most {}",
                self.burst,
                self.rate,
                u64::from(self.rate) * 10
            ));
        }
        Ok(())
    }

    /// (nanoseconds per admitted SYN, how far the bucket may run ahead), as
    /// admission.h takes them; (0, 0) without a budget.
    pub fn gcra(&self) -> (u64, u64) {
        if self.rate == 0 {
            return (0, 0);
        }
        let interval = (1_000_000_000 / u64::from(self.rate)).max(1);
        (interval, interval * u64::from(self.burst.max(1) - 1))
    }
}
