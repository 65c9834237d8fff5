//! What one AF_XDP socket is made of: UMEM geometry, ring sizes, the burst
//! size, the zero-copy policy, need_wakeup and busy polling. Checked before
//! anything is allocated, so a bad value is one clear error.

use crate::error::{Error, Result};

/// The smallest UMEM frame the kernel accepts (XDP_UMEM_MIN_CHUNK_SIZE).
pub const MIN_FRAME_SIZE: u32 = 2048;

/// How packets move between the driver and the UMEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Zero-copy where the driver has it, else copy mode (with a log line).
    Auto,
    /// Copy mode: the kernel copies each packet into and out of the UMEM.
    /// Works on every interface with an XDP program (veth included).
    Copy,
    /// Zero-copy or an error: the NIC DMAs straight into the UMEM.
    ZeroCopy,
}

/// Busy polling (SO_PREFER_BUSY_POLL): the worker drives the interface's
/// NAPI context from its own wakeup calls instead of waiting for softirqs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// SO_BUSY_POLL: how long one call may spin on the NAPI context (µs).
    pub usecs: u32,
    /// SO_BUSY_POLL_BUDGET: packets one busy poll may process.
    pub budget: u16,
}

impl Default for BusyPoll {
    fn default() -> Self {
        BusyPoll {
            usecs: 20,
            budget: 64,
        }
    }
}

/// One socket's settings. The defaults suit a forwarding worker on a
/// 1500-byte MTU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Bytes per UMEM frame: a power of two from 2048 to the page size.
    /// The kernel keeps 256 bytes of each for XDP headroom.
    pub frame_size: u32,
    /// Frames in the UMEM, per socket (a group of n sockets on one queue
    /// shares a UMEM of n times as many). Enough to fill the fill ring
    /// and keep a TX ring's worth in flight: twice `ring_size` by default.
    pub frame_count: u32,
    /// Entries in each of the fill, completion, RX and TX rings (power of 2).
    pub ring_size: u32,
    /// Most packets one [`poll_once`](crate::Socket::poll_once) takes off
    /// the RX ring: the maximum burst.
    pub batch_size: u32,
    pub mode: Mode,
    /// XDP_USE_NEED_WAKEUP: the kernel says when it needs a syscall to make
    /// progress, and the worker makes none otherwise.
    pub need_wakeup: bool,
    pub busy_poll: Option<BusyPoll>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            frame_size: 4096,
            frame_count: 4096,
            ring_size: 2048,
            batch_size: 64,
            mode: Mode::Auto,
            need_wakeup: true,
            busy_poll: None,
        }
    }
}

impl Config {
    /// Refuses what the kernel would refuse, naming the field.
    pub fn validate(&self) -> Result<()> {
        let page = weir_sys::page_size();
        if self.frame_count == 0 {
            return Err(Error::Config(
                "frame_count is 0: the UMEM needs frames to receive into (use at least \
                 ring_size, twice that to forward)"
                    .into(),
            ));
        }
        if !self.frame_size.is_power_of_two()
            || self.frame_size < MIN_FRAME_SIZE
            || self.frame_size > page
        {
            return Err(Error::Config(format!(
                "frame_size {} must be a power of two from {MIN_FRAME_SIZE} to the page size \
                 ({page})",
                self.frame_size
            )));
        }
        if !self.ring_size.is_power_of_two() {
            return Err(Error::Config(format!(
                "ring_size {} must be a power of two (e.g. 2048)",
                self.ring_size
            )));
        }
        if self.batch_size == 0 || self.batch_size > self.ring_size {
            return Err(Error::Config(format!(
                "batch_size {} must be from 1 to ring_size ({})",
                self.batch_size, self.ring_size
            )));
        }
        if let Some(bp) = self.busy_poll {
            if bp.usecs == 0 || bp.budget == 0 {
                return Err(Error::Config(format!(
                    "busy_poll needs usecs and budget above 0 (got {} µs, budget {})",
                    bp.usecs, bp.budget
                )));
            }
        }
        Ok(())
    }

    /// Bytes of UMEM this configuration maps and pins.
    pub fn umem_bytes(&self) -> u64 {
        self.frame_count as u64 * self.frame_size as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(c: Config, field: &str) {
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains(field), "{err}");
    }

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().unwrap();
        assert_eq!(Config::default().umem_bytes(), 16 << 20);
    }

    #[test]
    fn each_bad_field_is_named() {
        let ok = Config::default();
        refused(
            Config {
                frame_count: 0,
                ..ok.clone()
            },
            "frame_count is 0",
        );
        for frame_size in [0, 1000, 3000, 1024, 1 << 20] {
            refused(
                Config {
                    frame_size,
                    ..ok.clone()
                },
                "frame_size",
            );
        }
        refused(
            Config {
                ring_size: 1000,
                ..ok.clone()
            },
            "ring_size 1000",
        );
        for batch_size in [0, 4096] {
            refused(
                Config {
                    batch_size,
                    ..ok.clone()
                },
                "batch_size",
            );
        }
        refused(
            Config {
                busy_poll: Some(BusyPoll {
                    usecs: 0,
                    budget: 64,
                }),
                ..ok
            },
            "busy_poll",
        );
    }
}
