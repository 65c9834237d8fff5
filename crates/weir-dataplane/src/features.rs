//! What a load of `weir_lb` carries (bpf/lib/features.h): the forwarding
//! modes beyond dsr, QUIC routing and passive telemetry. Each is a bit of the
//! load-time constant `cfg_features`; the verifier removes the code of every
//! feature that is off, so a configuration pays only for what it uses.

use std::fmt;

/// A set of `weir_lb` features (weir.h WEIR_FEAT_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Features(u32);

/// Every feature by bit and name, in the order they are printed.
const NAMES: [(u32, &str); 5] = [
    (weir_abi::WEIR_FEAT_NAT, "nat"),
    (weir_abi::WEIR_FEAT_IPIP, "ipip"),
    (weir_abi::WEIR_FEAT_GUE, "gue"),
    (weir_abi::WEIR_FEAT_QUIC, "quic"),
    (weir_abi::WEIR_FEAT_TELEMETRY, "telemetry"),
];

impl Features {
    /// dsr alone: what every program carries.
    pub const DSR_ONLY: Features = Features(0);
    pub const NAT: Features = Features(weir_abi::WEIR_FEAT_NAT);
    pub const IPIP: Features = Features(weir_abi::WEIR_FEAT_IPIP);
    pub const GUE: Features = Features(weir_abi::WEIR_FEAT_GUE);
    pub const QUIC: Features = Features(weir_abi::WEIR_FEAT_QUIC);
    pub const TELEMETRY: Features = Features(weir_abi::WEIR_FEAT_TELEMETRY);
    /// Everything: the program as compiled.
    pub const ALL: Features = Features(weir_abi::WEIR_FEAT_ALL);

    /// The value of `cfg_features`.
    pub fn raw(self) -> u32 {
        self.0
    }

    /// Whether every feature of `other` is in this set.
    pub fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn union(self, other: Features) -> Features {
        Features(self.0 | other.0)
    }

    /// The features of `self` that `carried` lacks.
    pub fn missing_from(self, carried: Features) -> Features {
        Features(self.0 & !carried.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl Default for Features {
    /// The whole program: a loader that names no features gets all of them.
    fn default() -> Self {
        Features::ALL
    }
}

impl fmt::Display for Features {
    /// The features by name, with dsr first (always carried): "dsr, nat, quic".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dsr")?;
        for (bit, name) in NAMES {
            if self.0 & bit != 0 {
                write!(f, ", {name}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_names_its_features_and_what_another_lacks() {
        let running = Features::NAT;
        let wanted = Features::NAT.union(Features::QUIC);
        assert_eq!(wanted.to_string(), "dsr, nat, quic");
        assert_eq!(Features::DSR_ONLY.to_string(), "dsr");
        assert_eq!(
            Features::ALL.to_string(),
            "dsr, nat, ipip, gue, quic, telemetry"
        );
        assert!(!running.contains(wanted));
        assert_eq!(wanted.missing_from(running), Features::QUIC);
        assert!(wanted.missing_from(wanted).is_empty());
        assert!(Features::ALL.contains(wanted));
        assert_eq!(Features::default(), Features::ALL);
    }
}
