//! The software load balancer's configuration: weir_lb's load-time knobs
//! (actions for traffic it does not balance, the non-SYN miss policy, the
//! hash seed, timeouts) and the sizes of its tables.

use std::fmt;

use super::conntrack::{ticks, Timeouts, MAX_TIMEOUT};
use super::lru::MAX_CAPACITY;

/// What happens to traffic weir does not balance (`WEIR_ACT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pass,
    Drop,
}

/// What a TCP packet that misses every table and is not a SYN does
/// (`WEIR_NONSYN_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonSynMiss {
    /// Dispatch it like a new flow (a table lost across a restart, a flow
    /// moved here by ECMP).
    Dispatch,
    Drop,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Established connections (TCP after the handshake, UDP flows).
    pub conn_capacity: usize,
    /// TCP connections whose handshake is not done yet.
    pub half_open_capacity: usize,
    /// VIP ids are below this.
    pub max_vips: u32,
    /// DIP slots are below this.
    pub max_dips: u32,
    pub timeouts: Timeouts,
    /// Not IP, or IP to no VIP and no reply of a known connection.
    pub not_vip: Action,
    pub icmp: Action,
    pub fragments: Action,
    pub malformed: Action,
    pub nonsyn_miss: NonSynMiss,
    /// The flow-hash seed: the XDP program's `cfg_hash_seed`, or the two
    /// tiers pick different DIPs.
    pub hash_seed: u32,
    /// Table events ([`super::Event`]) queued for the caller at most; 0
    /// turns them off (the software tier alone needs none).
    pub event_capacity: usize,
}

impl Default for Config {
    /// weir_lb's defaults (`LoadOptions::default()`).
    fn default() -> Config {
        Config {
            conn_capacity: 1 << 20,
            half_open_capacity: 1 << 18,
            max_vips: 256,
            max_dips: 4096,
            timeouts: Timeouts::default(),
            not_vip: Action::Pass,
            icmp: Action::Pass,
            fragments: Action::Pass,
            malformed: Action::Drop,
            nonsyn_miss: NonSynMiss::Dispatch,
            hash_seed: weir_core::flow_hash::DEFAULT_SEED,
            event_capacity: 4096,
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The named size must be at least 1.
    Zero(&'static str),
    /// The named size is larger than a table can be.
    TooLarge {
        field: &'static str,
        value: u64,
        max: u64,
    },
    /// The named timeout (in ticks) is longer than the tick clock can tell.
    Timeout { field: &'static str, ticks: u32 },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Zero(field) => write!(f, "slb {field} must be at least 1"),
            ConfigError::TooLarge { field, value, max } => {
                write!(f, "slb {field} is {value}, at most {max}")
            }
            ConfigError::Timeout { field, ticks } => write!(
                f,
                "slb timeouts.{field} is {ticks} ticks, longer than {} days ({} ticks): use a shorter timeout",
                MAX_TIMEOUT.as_secs() / 86_400,
                super::conntrack::ticks(MAX_TIMEOUT)
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Refuses sizes and timeouts that cannot work, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let sizes = [
            (
                "conn_capacity",
                self.conn_capacity as u64,
                MAX_CAPACITY as u64,
            ),
            (
                "half_open_capacity",
                self.half_open_capacity as u64,
                MAX_CAPACITY as u64,
            ),
            ("max_vips", u64::from(self.max_vips), u64::from(u32::MAX)),
            ("max_dips", u64::from(self.max_dips), u64::from(u32::MAX)),
        ];
        for (field, value, max) in sizes {
            if value == 0 {
                return Err(ConfigError::Zero(field));
            }
            if value > max {
                return Err(ConfigError::TooLarge { field, value, max });
            }
        }
        let limit = ticks(MAX_TIMEOUT);
        for (field, t) in self.timeouts.fields() {
            if t > limit {
                return Err(ConfigError::Timeout { field, ticks: t });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_weir_lb_s_and_valid() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.hash_seed, 0x7765_6972);
        assert_eq!((c.malformed, c.not_vip), (Action::Drop, Action::Pass));
    }

    #[test]
    fn bad_sizes_and_timeouts_name_the_field() {
        let c = Config {
            half_open_capacity: 0,
            ..Config::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::Zero("half_open_capacity")));
        assert_eq!(
            ConfigError::Zero("max_dips").to_string(),
            "slb max_dips must be at least 1"
        );
        let mut c = Config::default();
        c.timeouts.udp = u32::MAX;
        let e = c.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "slb timeouts.udp is {} ticks, longer than 7 days ({} ticks): use a shorter timeout",
                u32::MAX,
                ticks(MAX_TIMEOUT)
            )
        );
        if usize::BITS > 32 {
            let c = Config {
                conn_capacity: usize::MAX,
                ..Config::default()
            };
            assert!(matches!(
                c.validate(),
                Err(ConfigError::TooLarge {
                    field: "conn_capacity",
                    ..
                })
            ));
        }
    }
}
