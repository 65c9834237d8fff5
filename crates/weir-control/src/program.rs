//! The `weir_lb` that `weir serve` runs, and the features it carries.
//!
//! A program carries the features its configuration uses (the modes of its
//! VIPs, QUIC, passive telemetry) and the verifier leaves out the rest. A
//! change that needs one it lacks (a reload, an API edit) first loads a
//! program that carries the wider set into the same maps and swaps it in on
//! every interface, atomically: the connection tables are the same maps, so
//! established connections never notice. Only then are the tables written.
//! A load or swap that fails leaves the running program attached and the
//! change refused. A program is never narrowed while it runs: a feature the
//! configuration no longer uses stays until the next start.

use anyhow::{Context, Result};
use weir_config::{Config, Mode};
use weir_dataplane::attach::Attachment;
use weir_dataplane::features::Features;
use weir_dataplane::loader::{self, LoadOptions, LoadedLb};

/// The features `cfg` needs `weir_lb` to carry.
pub fn wanted_features(cfg: &Config) -> Features {
    let mut f = Features::DSR_ONLY;
    for v in &cfg.vips {
        f = f.union(match v.mode {
            Mode::Dsr => Features::DSR_ONLY,
            Mode::Nat => Features::NAT,
            Mode::Ipip => Features::IPIP,
            Mode::Gue => Features::GUE,
        });
        if v.quic.is_some() {
            f = f.union(Features::QUIC);
        }
    }
    if crate::live::wants_passive_telemetry(cfg) {
        f = f.union(Features::TELEMETRY);
    }
    f
}

/// The attached program, the options it was loaded with, and its
/// attachment to the interfaces.
pub struct Program {
    opts: LoadOptions,
    lb: LoadedLb,
    attachment: Attachment,
    /// Its kernel id; None if the kernel did not say.
    id: Option<u32>,
}

impl Program {
    /// Takes the program `serve` loaded with `opts` and attached.
    pub fn new(opts: LoadOptions, lb: LoadedLb, attachment: Attachment) -> Program {
        let id = attachment
            .prog_id()
            .map_err(|e| log::warn!("reading the attached program's id: {e:#}"))
            .ok();
        Program {
            opts,
            lb,
            attachment,
            id,
        }
    }

    /// The kernel id of the program attached now.
    pub fn id(&self) -> Option<u32> {
        self.id
    }

    pub fn features(&self) -> Features {
        self.lb.features
    }

    pub fn interfaces(&self) -> &[(String, u32)] {
        self.attachment.interfaces()
    }

    /// Makes sure the attached program carries what `cfg` needs: if it
    /// lacks a feature, loads one with the union of both into the same
    /// maps and swaps it in. Returns the features it added, if any. On an
    /// error the running program stays attached, unchanged.
    pub fn widen_for(&mut self, cfg: &Config) -> Result<Option<Features>> {
        let missing = wanted_features(cfg).missing_from(self.lb.features);
        if missing.is_empty() {
            return Ok(None);
        }
        let opts = LoadOptions {
            features: self.lb.features.union(missing),
            ..self.opts.clone()
        };
        let wider = loader::load_into(&opts, &self.lb)
            .with_context(|| format!("loading weir_lb with {}", opts.features))?;
        self.attachment.swap(wider.prog_fd())?;
        let was = self
            .id
            .map_or("the older one".to_string(), |id| id.to_string());
        // The older program goes once nothing holds it; its maps are the
        // new one's.
        self.lb = wider;
        self.opts = opts;
        self.id = self.attachment.prog_id().ok();
        log::info!(
            "weir_lb now carries {}: program {} swapped in for {was} on {}",
            self.lb.features,
            self.id
                .map_or("(id unknown)".to_string(), |id| id.to_string()),
            self.interfaces()
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(Some(missing))
    }

    /// Leaves the program attached when this is dropped: for handing the
    /// data plane over to a successor that has already replaced it.
    pub fn leave_attached(self) {
        self.attachment.leave_attached();
    }
}
