//! Load telemetry per DIP, from one of two sources (`[controller] telemetry`):
//! - [`agent`]: poll each DIP's `weir agent` over HTTP;
//! - [`passive`]: read what the data plane measured itself (nat VIPs).
//!
//! Both produce [`Sample`]s: a mean processing time (when requests finished
//! in the sampled span) and a request rate.

pub mod agent;
pub mod passive;

/// One poll of one DIP.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Mean processing time in seconds; `None` when no request finished
    /// during the span (an idle DIP: the previous estimate stands).
    pub processing_time_s: Option<f64>,
    /// Requests per second.
    pub rate_per_s: f64,
}
