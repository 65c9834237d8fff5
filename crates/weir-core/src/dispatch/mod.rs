//! Flow dispatchers: which DIP of a VIP a *new* connection goes to.
//!
//! Every dispatcher sees the same two calls. [`Dispatcher::update`] hands it
//! the available capacity A_i = C_i - R_i of each DIP of the VIP (index i is
//! the DIP's position in the pool; A_i may be negative for an overloaded DIP)
//! whenever the controller has polled; [`Dispatcher::pick`] chooses a DIP for
//! one new flow from its flow hash. Between two updates a dispatcher works on
//! the stale view it was given, exactly like the data plane between two
//! table versions. Time never enters: the caller decides when to update.
//!
//! | policy | module | choice for a new flow |
//! |---|---|---|
//! | ECMP | [`ecmp`] | uniform over the pool, load ignored |
//! | weighted | [`weighted`] | probability proportional to max(A_i, 0) |
//! | LCF | [`lcf`] | the DIP with the largest A_i at the last update |
//! | AWFD(m) | [`awfd`] | Spotlight III-B two-stage table, weights floor(m A_i / max A) |
//! | optimum | [`optimum`] | LCF on instantaneous state (the caller updates before every pick) |
//!
//! Consistent hashing for stateless fallback is in [`crate::maglev`].

pub mod awfd;
pub mod ecmp;
pub mod lcf;
pub mod optimum;
pub mod weighted;

use std::fmt;
use std::str::FromStr;

pub use self::awfd::AwfdDispatcher;
pub use self::ecmp::Ecmp;
pub use self::lcf::Lcf;
pub use self::optimum::Optimum;
pub use self::weighted::Weighted;

/// A flow dispatcher for one VIP's pool of DIPs.
pub trait Dispatcher: Send {
    /// Short human name, e.g. `awfd(m=4)`.
    fn name(&self) -> String;

    /// New polled state: the available capacity of every DIP in pool order.
    /// The slice length is the pool size from now on. Non-finite values are
    /// treated as "no spare capacity".
    fn update(&mut self, available: &[f64]);

    /// The pool index for a new flow with this flow hash, or `None` if the
    /// pool is empty.
    fn pick(&mut self, flow_hash: u32) -> Option<usize>;

    /// True if the dispatcher is meant to see the state as of every new flow
    /// (the heuristic optimum); a simulator then calls `update` right before
    /// each `pick` instead of once per polling interval.
    fn instantaneous(&self) -> bool {
        false
    }
}

/// Maps a 32-bit hash uniformly onto `0..n` (multiply-shift, no modulo bias
/// worth speaking of, and the same arithmetic as AWFD's stage 1).
#[inline]
pub fn hash_to_index(hash: u32, n: usize) -> usize {
    ((u64::from(hash) * n as u64) >> 32) as usize
}

/// A finite available capacity, or 0 for NaN and infinities.
#[inline]
pub(crate) fn finite_or_zero(a: f64) -> f64 {
    if a.is_finite() {
        a
    } else {
        0.0
    }
}

/// The AWFD quantization parameter m: a finite maximum weight, or infinity
/// (probability exactly proportional to available capacity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MaxWeight {
    Finite(u32),
    Infinite,
}

impl fmt::Display for MaxWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxWeight::Finite(m) => write!(f, "{m}"),
            MaxWeight::Infinite => write!(f, "inf"),
        }
    }
}

impl FromStr for MaxWeight {
    type Err = PolicyParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "inf" | "infinity" | "∞" => return Ok(MaxWeight::Infinite),
            _ => {}
        }
        if t.starts_with('-') {
            return Err(PolicyParseError(format!(
                "m must be a non-negative integer or `inf`, got `{t}` (m is the largest AWFD weight; negative weights mean nothing)"
            )));
        }
        t.parse::<u32>().map(MaxWeight::Finite).map_err(|_| {
            PolicyParseError(format!(
                "m must be a non-negative integer or `inf`, got `{t}`"
            ))
        })
    }
}

/// A dispatch policy by name; [`Policy::build`] makes its dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    Ecmp,
    Weighted,
    Lcf,
    Awfd(MaxWeight),
    Optimum,
}

impl Policy {
    /// A dispatcher for a pool of `n` DIPs. Before its first update every
    /// dispatcher treats all DIPs as equal.
    pub fn build(self, n: usize) -> Box<dyn Dispatcher> {
        match self {
            Policy::Ecmp => Box::new(Ecmp::new(n)),
            Policy::Weighted => Box::new(Weighted::new(n)),
            Policy::Lcf => Box::new(Lcf::new(n)),
            Policy::Awfd(MaxWeight::Infinite) => Box::new(Weighted::new(n)),
            Policy::Awfd(MaxWeight::Finite(m)) => Box::new(AwfdDispatcher::new(n, m)),
            Policy::Optimum => Box::new(Optimum::new(n)),
        }
    }

    /// True for policies whose choice does not depend on the update interval.
    pub fn interval_independent(self) -> bool {
        matches!(
            self,
            Policy::Ecmp | Policy::Optimum | Policy::Awfd(MaxWeight::Finite(0))
        )
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Ecmp => write!(f, "ecmp"),
            Policy::Weighted => write!(f, "weighted"),
            Policy::Lcf => write!(f, "lcf"),
            Policy::Awfd(m) => write!(f, "awfd:{m}"),
            Policy::Optimum => write!(f, "optimum"),
        }
    }
}

/// Why a policy name was not understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyParseError(pub String);

impl fmt::Display for PolicyParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PolicyParseError {}

impl FromStr for Policy {
    type Err = PolicyParseError;

    /// `ecmp`, `weighted`, `lcf`, `optimum`, `awfd` (m = 4), `awfd:M` or
    /// `awfd:inf`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let (name, arg) = match t.split_once([':', '=']) {
            Some((n, a)) => (n.trim(), Some(a)),
            None => (t.as_str(), None),
        };
        let no_arg = |p: Policy| match arg {
            None => Ok(p),
            Some(_) => Err(PolicyParseError(format!(
                "policy `{name}` takes no parameter, got `{s}`"
            ))),
        };
        match name {
            "ecmp" => no_arg(Policy::Ecmp),
            "weighted" | "wfd" => no_arg(Policy::Weighted),
            "lcf" => no_arg(Policy::Lcf),
            "optimum" | "heuristic" | "opt" => no_arg(Policy::Optimum),
            "awfd" => Ok(Policy::Awfd(match arg {
                None => MaxWeight::Finite(awfd::DEFAULT_M),
                Some(a) => a.parse()?,
            })),
            _ => Err(PolicyParseError(format!(
                "unknown policy `{s}`; expected one of ecmp, weighted, lcf, optimum, awfd, awfd:M, awfd:inf"
            ))),
        }
    }
}

macro_rules! serde_as_string {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_as_string!(Policy);
serde_as_string!(MaxWeight);

#[cfg(test)]
mod tests;
