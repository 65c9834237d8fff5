//! `[dataplane] tier` and the keys of the software and hybrid tiers: the
//! workers, how packets reach them, the reorder stage, the SYN budget and
//! the hybrid fast table.

use std::collections::HashSet;

use serde::Deserialize;
use weir_core::cost::validate_cost_cycles;
use weir_core::worker_policy::{Mode as Distribution, MAX_WORKERS};

use crate::cpus;
use crate::dataplane::{given, XdpModeCfg};
use crate::error::{Checker, ConfigError, ConfigWarning};
use crate::load::Config;

/// `[dataplane] tier`: which tier handles the traffic of the VIPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Everything in XDP (dispatch, connection table, rewrite).
    #[default]
    Xdp,
    /// XDP steers VIP traffic and nat replies to the workers, which keep
    /// the connections, dispatch and rewrite (HNLB's software LB).
    Software,
    /// XDP forwards the connections its bounded fast table holds; the
    /// workers handle the rest and fill the fast table (HNLB).
    Hybrid,
}

impl Config {
    /// `tier` and the keys that only some tiers read.
    pub(crate) fn validate_tier(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        // The default is always in range; a given size is checked in any
        // tier, so switching to hybrid later brings no surprise.
        if !(1..=dp.conn_table_size).contains(&dp.fast_size()) {
            return Err(ck.err(
                dp.fast_table_size.as_ref().map(|s| s.span()),
                "dataplane.fast_table_size",
                format!(
                    "must be between 1 and conn_table_size ({}): the fast table holds a part of \
                     the workers' connections",
                    dp.conn_table_size
                ),
            ));
        }
        if dp.tier != Tier::Hybrid {
            let only_hybrid = [
                (
                    "fast_table_size",
                    dp.fast_table_size.as_ref().map(|s| s.span()),
                ),
                ("offload", given(&dp.offload).then(|| dp.offload.span())),
            ];
            for (key, span) in only_hybrid.into_iter().filter(|(_, s)| s.is_some()) {
                warnings.push(ck.err(
                    span,
                    format!("dataplane.{key}"),
                    "only tier = \"hybrid\" has a fast table; this is ignored",
                ));
            }
        }
        if dp.tier == Tier::Xdp && given(&dp.workers) {
            warnings.push(ck.err(
                Some(dp.workers.span()),
                "dataplane.workers",
                "tier = \"xdp\" runs no workers; this is ignored",
            ));
        }
        let workers = dp.workers.get_ref();
        let err = |msg: String| ck.err(Some(dp.workers.span()), "dataplane.workers", msg);
        if workers.is_empty() {
            return Err(err(
                "list at least one CPU to run a worker on, e.g. [1]".into()
            ));
        }
        let usable = cpus::usable();
        let mut seen = HashSet::new();
        for cpu in workers {
            if !seen.insert(cpu) {
                return Err(err(format!(
                    "CPU {cpu} is listed twice; a worker busy-polls its CPU, list each CPU once"
                )));
            }
            if !usable.contains(cpu) {
                return Err(err(format!(
                    "CPU {cpu} does not exist or weir may not run on it; usable CPUs: {}",
                    cpus::format(&usable)
                )));
            }
        }
        self.validate_distribution(ck, warnings)?;
        self.validate_syn_budget(ck, warnings)
    }

    /// `syn_rate` and `syn_burst`.
    fn validate_syn_budget(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        let keys = [("syn_rate", &dp.syn_rate), ("syn_burst", &dp.syn_burst)];
        let given_keys = keys.iter().filter(|(_, v)| given(v));
        if dp.tier == Tier::Xdp {
            for (key, v) in given_keys {
                warnings.push(ck.err(
                    Some(v.span()),
                    format!("dataplane.{key}"),
                    "tier = \"xdp\" runs no workers and keeps its SYNs in the half-open \
                     table; this is ignored",
                ));
            }
            return Ok(());
        }
        dp.syn_budget().validate().map_err(|e| {
            // The message names the key at fault; point at it if given.
            let (key, v) = if e.starts_with("syn_burst") {
                keys[1]
            } else {
                keys[0]
            };
            ck.err(
                Some(v.span()).filter(|_| given(v)),
                format!("dataplane.{key}"),
                e,
            )
        })?;
        if *dp.syn_rate.get_ref() == 0 && given(&dp.syn_burst) {
            warnings.push(ck.err(
                Some(dp.syn_burst.span()),
                "dataplane.syn_burst",
                "syn_rate = 0 admits every SYN; this is ignored",
            ));
        }
        Ok(())
    }

    /// `distribution`, `spray_scope`, `reorder` and `cost_cycles`.
    fn validate_distribution(
        &self,
        ck: &Checker<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<(), ConfigError> {
        let dp = &self.dataplane;
        if let Some(c) = &dp.cost_cycles {
            let field = "dataplane.cost_cycles";
            validate_cost_cycles(*c.get_ref())
                .map_err(|e| ck.err(Some(c.span()), field, e.to_string()))?;
            if !weir_core::cost::AVAILABLE {
                return Err(ck.err(
                    Some(c.span()),
                    field,
                    "the added cost spins on the x86-64 time-stamp counter, which this machine \
                     lacks",
                ));
            }
        }
        if let Some(h) = &dp.reorder_hold_us {
            dp.reorder_config()
                .validate()
                .map_err(|e| ck.err(Some(h.span()), "dataplane.reorder_hold_us", e.to_string()))?;
        }
        let keys = [
            (
                "distribution",
                given(&dp.distribution).then(|| dp.distribution.span()),
            ),
            (
                "spray_scope",
                given(&dp.spray_scope).then(|| dp.spray_scope.span()),
            ),
            ("reorder", given(&dp.reorder).then(|| dp.reorder.span())),
            (
                "reorder_hold_us",
                dp.reorder_hold_us.as_ref().map(|h| h.span()),
            ),
            ("cost_cycles", dp.cost_cycles.as_ref().map(|c| c.span())),
        ];
        if dp.tier == Tier::Xdp {
            for (key, span) in keys.into_iter().filter(|(_, s)| s.is_some()) {
                warnings.push(ck.err(
                    span,
                    format!("dataplane.{key}"),
                    "tier = \"xdp\" runs no workers; this is ignored",
                ));
            }
            return Ok(());
        }
        let mode = *dp.distribution.get_ref();
        workers_for(mode, dp.workers.get_ref().len()).map_err(|e| {
            ck.err(
                Some(dp.distribution.span()).filter(|_| given(&dp.distribution)),
                "dataplane.distribution",
                e,
            )
        })?;
        if mode == Distribution::Flow {
            for (key, span) in keys[1..4].iter().filter(|(_, s)| s.is_some()) {
                warnings.push(ck.err(
                    span.clone(),
                    format!("dataplane.{key}"),
                    "distribution = \"flow\" keeps each flow on one worker; this is ignored",
                ));
            }
        } else if dp.reorders() && dp.xdp_mode == XdpModeCfg::Generic {
            return Err(ck.err(
                Some(dp.reorder.span()).filter(|_| given(&dp.reorder)),
                "dataplane.reorder",
                "generic XDP may run one queue's packets on several CPUs at once, so there is \
                 no ingress order to restore: use xdp_mode = \"native\", or reorder = false",
            ));
        }
        Ok(())
    }
}

/// Whether `workers` workers can carry out `mode`: the workers' own rule
/// (weir-software-engine's `DistributionConfig::validate`) for what a
/// configuration can get wrong, the buckets and adaptive thresholds being
/// fixed.
fn workers_for(mode: Distribution, workers: usize) -> Result<(), String> {
    if workers == 0 || workers > usize::from(MAX_WORKERS) {
        return Err(format!(
            "workers must be from 1 to {MAX_WORKERS}, got {workers}"
        ));
    }
    if mode != Distribution::Flow && workers < 2 {
        return Err(format!(
            "distribution = \"{mode}\" spreads packets over several workers, but only \
             1 worker is configured: configure at least 2 workers, or use \
             distribution = \"flow\""
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::ConnLru;
    use crate::test_files::*;
    use weir_core::reorder_bounds::ReorderConfig;
    use weir_core::worker_policy::{OffloadPolicy, SprayScope};

    #[test]
    fn the_tier_is_xdp_unless_asked_and_its_keys_default() {
        let last = *cpus::usable().last().unwrap();
        let dp = Config::parse("t.toml", GOOD).unwrap().dataplane;
        assert_eq!(dp.tier, Tier::Xdp);
        assert_eq!(dp.conn_lru, ConnLru::Shared);
        assert_eq!(dp.fast_size(), 8192);
        assert_eq!(*dp.offload.get_ref(), OffloadPolicy::Heavy);
        assert_eq!(dp.workers.get_ref(), &vec![last]);

        let src = dataplane_with(&format!(
            "tier = \"hybrid\"\nfast_table_size = 2000\noffload = \"first\"\nworkers = [{last}]"
        ));
        let c = Config::parse("t.toml", &src).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let dp = c.dataplane;
        assert_eq!((dp.tier, dp.fast_size()), (Tier::Hybrid, 2000));
        assert_eq!(*dp.offload.get_ref(), OffloadPolicy::First);
        let sw = dataplane_with("tier = \"software\"");
        assert_eq!(
            Config::parse("t.toml", &sw).unwrap().dataplane.tier,
            Tier::Software
        );
        // A connection table smaller than the default fast table caps it.
        let small = dataplane_with("tier = \"hybrid\"\nconn_table_size = 4096");
        let dp = Config::parse("t.toml", &small).unwrap().dataplane;
        assert_eq!(dp.fast_size(), 4096);
    }

    #[test]
    fn tier_mistakes_name_the_field_and_the_line() {
        let last = *cpus::usable().last().unwrap();
        let cases = [
            (
                "tier = \"hybrid\"\nfast_table_size = 0".to_string(),
                "dataplane.fast_table_size",
                5,
                "between 1 and conn_table_size (1048576)",
            ),
            (
                "tier = \"hybrid\"\nconn_table_size = 1000\nfast_table_size = 2000".into(),
                "dataplane.fast_table_size",
                6,
                "between 1 and conn_table_size (1000)",
            ),
            (
                "fast_table_size = 0".into(),
                "dataplane.fast_table_size",
                4,
                "between 1 and conn_table_size",
            ),
            (
                "conn_lru = \"percpu\"".into(),
                "dataplane.conn_lru",
                4,
                "unknown variant `percpu`, expected `shared` or `per-cpu`",
            ),
            (
                "tier = \"fpga\"".into(),
                "dataplane.tier",
                4,
                "unknown variant `fpga`",
            ),
            (
                "offload = \"all\"".into(),
                "dataplane.offload",
                4,
                "unknown variant `all`",
            ),
            (
                "tier = \"software\"\nworkers = [100000]".into(),
                "dataplane.workers",
                5,
                "CPU 100000 does not exist or weir may not run on it; usable CPUs: ",
            ),
            (
                "tier = \"software\"\nworkers = []".into(),
                "dataplane.workers",
                5,
                "at least one CPU",
            ),
            (
                format!("tier = \"hybrid\"\nworkers = [{last}, {last}]"),
                "dataplane.workers",
                5,
                "listed twice",
            ),
        ];
        for (keys, field, line, what) in cases {
            let e = err_of(&dataplane_with(&keys));
            assert_eq!(
                (e.field.as_str(), e.line),
                (field, Some(line)),
                "{keys}: {e}"
            );
            assert!(e.message.contains(what), "{keys}: {e}");
        }
    }

    #[test]
    fn keys_the_tier_does_not_read_are_warned_about() {
        let last = *cpus::usable().last().unwrap();
        let warned = |keys: &str| {
            let w = Config::parse("t.toml", &dataplane_with(keys))
                .unwrap()
                .warnings;
            w.iter()
                .map(|w| (w.field.clone(), w.line.unwrap()))
                .collect::<Vec<_>>()
        };
        let field = |f: &str, l: usize| (f.to_string(), l);
        assert_eq!(
            warned("fast_table_size = 100"),
            [field("dataplane.fast_table_size", 4)]
        );
        assert_eq!(
            warned(&format!("workers = [{last}]\noffload = \"first\"")),
            [field("dataplane.offload", 5), field("dataplane.workers", 4)]
        );
        assert_eq!(
            warned("tier = \"software\"\noffload = \"heavy\""),
            [field("dataplane.offload", 5)]
        );
    }

    #[test]
    fn the_syn_budget_is_checked_with_the_field_and_the_line() {
        let dp = Config::parse("t.toml", GOOD).unwrap().dataplane;
        assert_eq!(
            dp.syn_budget(),
            weir_core::syn_budget::SynBudget {
                rate: 10_000,
                burst: 1_000
            }
        );
        let sw = "tier = \"software\"";
        let c = Config::parse(
            "t.toml",
            &dataplane_with(&format!("{sw}\nsyn_rate = 5000\nsyn_burst = 50")),
        )
        .unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(
            (
                c.dataplane.syn_budget().rate,
                c.dataplane.syn_budget().burst
            ),
            (5000, 50)
        );
        let cases = [
            (
                "syn_rate = 100000001",
                "dataplane.syn_rate",
                5,
                "beyond 100000000",
            ),
            ("syn_rate = -1", "dataplane.syn_rate", 5, "invalid value"),
            ("syn_burst = 0", "dataplane.syn_burst", 5, "admit no SYN"),
            (
                "syn_rate = 10\nsyn_burst = 101",
                "dataplane.syn_burst",
                6,
                "more than 10 s",
            ),
            // The default rate, a burst beyond 10 s of it.
            (
                "syn_burst = 100001",
                "dataplane.syn_burst",
                5,
                "at most 100000",
            ),
        ];
        for (keys, field, line, what) in cases {
            let e = err_of(&dataplane_with(&format!("{sw}\n{keys}")));
            assert_eq!(
                (e.field.as_str(), e.line),
                (field, Some(line)),
                "{keys}: {e}"
            );
            assert!(e.message.contains(what), "{keys}: {e}");
        }
        let warned = |keys: &str| {
            Config::parse("t.toml", &dataplane_with(keys))
                .unwrap()
                .warnings
                .iter()
                .map(|w| (w.field.clone(), w.line.unwrap()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            warned("syn_rate = 100"),
            [("dataplane.syn_rate".to_string(), 4)]
        );
        assert_eq!(
            warned(&format!("{sw}\nsyn_rate = 0\nsyn_burst = 5")),
            [("dataplane.syn_burst".to_string(), 6)]
        );
    }

    #[test]
    fn distribution_reorder_and_cost_are_checked_with_the_field_and_the_line() {
        let cpus = cpus::usable();
        let dp = Config::parse("t.toml", GOOD).unwrap().dataplane;
        assert_eq!(*dp.distribution.get_ref(), Distribution::Flow);
        assert_eq!(*dp.spray_scope.get_ref(), SprayScope::Tcp);
        assert!(*dp.reorder.get_ref() && !dp.reorders());
        assert!(dp.cost_cycles.is_none());
        let one = "tier = \"software\"";
        let e = err_of(&dataplane_with(&format!("{one}\ndistribution = \"spray\"")));
        assert_eq!(
            (e.field.as_str(), e.line),
            ("dataplane.distribution", Some(5))
        );
        assert!(e.message.contains("at least 2 workers"), "{e}");
        let e = err_of(&dataplane_with(&format!("{one}\ndistribution = \"rss\"")));
        assert_eq!(e.field, "dataplane.distribution");
        assert!(e.message.contains("unknown variant `rss`"), "{e}");
        for (cost, what) in [
            ("0", "remove cost_cycles"),
            ("2000000", "more than 1000000"),
        ] {
            let e = err_of(&dataplane_with(&format!("{one}\ncost_cycles = {cost}")));
            assert_eq!(
                (e.field.as_str(), e.line),
                ("dataplane.cost_cycles", Some(5))
            );
            assert!(e.message.contains(what), "{e}");
        }
        // A bad cost is refused in any tier; other keys of the workers only
        // warn in the xdp tier.
        assert_eq!(
            err_of(&dataplane_with("cost_cycles = 0")).field,
            "dataplane.cost_cycles"
        );
        let w = Config::parse("t.toml", &dataplane_with("distribution = \"spray\""))
            .unwrap()
            .warnings;
        assert_eq!(w[0].field, "dataplane.distribution", "{w:?}");
        let flow = Config::parse(
            "t.toml",
            &dataplane_with(&format!("{one}\nreorder = false")),
        );
        assert_eq!(flow.unwrap().warnings[0].field, "dataplane.reorder");
        for hold in ["0", "200000"] {
            let e = err_of(&dataplane_with(&format!("{one}\nreorder_hold_us = {hold}")));
            assert_eq!(
                (e.field.as_str(), e.line),
                ("dataplane.reorder_hold_us", Some(5))
            );
            assert!(
                e.message.contains("hold time must be from 1 µs to 100 ms"),
                "{e}"
            );
        }
        let [a, b] = cpus[..] else {
            return; // spreading needs two CPUs
        };
        let two = format!("tier = \"software\"\nworkers = [{a}, {b}]");
        let spray = format!("{two}\ndistribution = \"spray\"\ncost_cycles = 10000");
        let c = Config::parse("t.toml", &dataplane_with(&spray)).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert!(c.dataplane.reorders());
        assert_eq!(c.dataplane.reorder_config(), ReorderConfig::default());
        let held = format!("{spray}\nreorder_hold_us = 20000");
        let dp = Config::parse("t.toml", &dataplane_with(&held))
            .unwrap()
            .dataplane;
        assert_eq!(dp.reorder_config().hold_ns, 20_000_000);
        assert_eq!(c.dataplane.workers.get_ref().len(), 2);
        let generic = format!("{spray}\nxdp_mode = \"generic\"");
        let e = err_of(&dataplane_with(&generic));
        assert_eq!(e.field, "dataplane.reorder");
        assert!(e.message.contains("reorder = false"), "{e}");
        let unordered = format!("{generic}\nreorder = false\nspray_scope = \"all\"");
        let dp = Config::parse("t.toml", &dataplane_with(&unordered))
            .unwrap()
            .dataplane;
        assert_eq!(*dp.spray_scope.get_ref(), SprayScope::All);
        assert!(!dp.reorders());
    }
}
