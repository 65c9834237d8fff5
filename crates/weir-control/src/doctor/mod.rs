//! `weir doctor`: whether this host is ready for `weir serve` (or, with
//! `--role backend`, for being a dsr backend), item by item: OK, WARN or
//! FAIL, with what to change. [`checks`] holds the rules (no I/O),
//! [`probe`] reads the host and the configuration and applies them.
//!
//! The exit status is 1 when any item FAILs, 0 otherwise: WARNs are
//! printed but do not fail, so a script can run `weir doctor && weir serve`.

pub mod checks;
pub mod probe;

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

/// Where `weir doctor` looks for the configuration by default.
pub const DEFAULT_CONFIG: &str = "/etc/weir/weir.toml";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// What was checked: `kernel`, `interface eth0`, `route to 10.0.1.11`...
    pub check: String,
    pub level: Level,
    /// What was found.
    pub detail: String,
    /// What to change, for WARN and FAIL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// Which host this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// The host that runs `weir serve`.
    Lb,
    /// A backend of dsr VIPs (its ARP settings, the VIPs on lo).
    Backend,
}

#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// The configuration `weir serve` will run (without one at the default
    /// path, only the host is checked).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Which host this is.
    #[arg(long, value_enum, default_value = "lb")]
    pub role: Role,
    /// With --role backend: a dsr VIP this backend serves (repeatable).
    #[arg(long = "vip")]
    pub vips: Vec<IpAddr>,
    /// Machine-readable output: {"items": [...], "fail": N, "warn": N}.
    #[arg(long)]
    pub json: bool,
}

/// Every finding, in the order checked.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub items: Vec<Item>,
    pub fail: usize,
    pub warn: usize,
}

impl Report {
    pub fn of(items: Vec<Item>) -> Report {
        let count = |l| items.iter().filter(|i| i.level == l).count();
        Report {
            fail: count(Level::Fail),
            warn: count(Level::Warn),
            items,
        }
    }

    /// One line per item, its fix indented below it, and a summary.
    pub fn render(&self) -> String {
        let mut o = String::new();
        for i in &self.items {
            let tag = match i.level {
                Level::Ok => "OK  ",
                Level::Warn => "WARN",
                Level::Fail => "FAIL",
            };
            let _ = writeln!(o, "{tag}  {}: {}", i.check, i.detail);
            if let Some(fix) = &i.fix {
                let _ = writeln!(o, "      fix: {fix}");
            }
        }
        let _ = writeln!(
            o,
            "{} checks: {} failed, {} warnings",
            self.items.len(),
            self.fail,
            self.warn
        );
        o
    }
}

/// Runs the checks and prints them; an error (exit status 1) when any
/// failed.
pub fn run(args: &DoctorArgs) -> Result<()> {
    let items = probe::run(args)?;
    let report = Report::of(items);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    if report.fail > 0 {
        anyhow::bail!(
            "{} of {} checks failed: change what each FAIL's fix says, then run weir doctor again",
            report.fail,
            report.items.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_counts_and_shows_fixes() {
        let item = |level, fix: Option<&str>| Item {
            check: "x".into(),
            level,
            detail: "found".into(),
            fix: fix.map(Into::into),
        };
        let r = Report::of(vec![
            item(Level::Ok, None),
            item(Level::Warn, Some("do a")),
            item(Level::Fail, Some("do b")),
        ]);
        assert_eq!((r.fail, r.warn), (1, 1));
        let text = r.render();
        assert!(text.contains("OK    x: found\n"), "{text}");
        assert!(text.contains("WARN  x: found\n      fix: do a\n"), "{text}");
        assert!(text.ends_with("3 checks: 1 failed, 1 warnings\n"), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["items"][2]["level"], "FAIL");
        assert!(json["items"][0].get("fix").is_none());
    }
}
