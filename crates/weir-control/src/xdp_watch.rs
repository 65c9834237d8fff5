//! Whether weir's program still runs on every configured interface. Another
//! tool can detach it (`ip link set dev X xdp off`) or put its own program
//! in its place; the daemon would go on serving nothing there without a
//! word. `weir serve` checks every second, logs each change, and writes
//! what it found to `<run dir>/xdp_attach.json` for `weir status`, the
//! management API and /metrics (`weir_xdp_attached`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::run_report::{Published, RunReport};

/// The last check, for `weir status`, the API and /metrics.
pub const REPORT: RunReport<Vec<IfaceAttach>> = RunReport::new("xdp_attach.json");

/// What runs on one configured interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfaceAttach {
    pub interface: String,
    /// weir's program (the one this daemon attached) is the one there.
    pub attached: bool,
    /// The program there instead, if any: its kernel id and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_prog_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_prog_name: Option<String>,
}

impl IfaceAttach {
    /// The state of `interface`, where `ours` is the id weir attached and
    /// `found` the id attached now (None: nothing); `name_of` names a
    /// foreign program.
    pub fn of(
        interface: &str,
        ours: u32,
        found: Option<u32>,
        name_of: impl Fn(u32) -> Option<String>,
    ) -> IfaceAttach {
        let other = found.filter(|&id| id != ours);
        IfaceAttach {
            interface: interface.to_string(),
            attached: found == Some(ours),
            other_prog_id: other,
            other_prog_name: other.and_then(name_of),
        }
    }

    /// What is on the interface instead of weir's program, in words.
    pub fn what_is_there(&self) -> String {
        match (self.other_prog_id, &self.other_prog_name) {
            (None, _) => "no XDP program".to_string(),
            (Some(id), Some(name)) => format!("program {id} ({name})"),
            (Some(id), None) => format!("program {id}"),
        }
    }

    /// The warning for an interface that lost weir's program: what is
    /// there and what to do.
    pub fn warning(&self) -> String {
        format!(
            "{}: weir's XDP program is no longer attached ({} is there now): nothing on {} is \
             load balanced. `weir reload` does not attach again; restart weir (stop and start) \
             to attach it again{}",
            self.interface,
            self.what_is_there(),
            self.interface,
            if self.other_prog_id.is_some() {
                ", after detaching the other program"
            } else {
                ""
            }
        )
    }
}

/// The daemon's side: the last state of each interface, to log changes.
/// A change counts once two checks in a row see it: a successor taking
/// over swaps its program in and retires this daemon at once, which is no
/// loss to report.
pub struct Watch {
    ours: u32,
    report: Published<Vec<IfaceAttach>>,
    pending: Vec<IfaceAttach>,
}

impl Watch {
    /// Watches for program `ours`; nothing is written before the first
    /// [`Watch::check`].
    pub fn new(ours: u32, run_dir: &Path) -> Watch {
        Watch {
            ours,
            report: REPORT.publisher(run_dir),
            pending: Vec::new(),
        }
    }

    /// Watches for program `ours` from now on: weir swapped in a program
    /// that carries more features.
    pub fn follow(&mut self, ours: u32) {
        self.ours = ours;
    }

    /// Compares what is attached to each `(name, ifindex)` now with the
    /// program weir attached; logs and records what changed.
    pub fn check(&mut self, ifaces: &[(String, u32)]) {
        let now: Vec<IfaceAttach> = ifaces
            .iter()
            .map(|(name, idx)| {
                let found = weir_dataplane::attach::attached_prog_id(*idx);
                IfaceAttach::of(name, self.ours, found, weir_dataplane::attach::prog_name)
            })
            .collect();
        let last = self.report.last();
        if now == *last {
            self.pending.clear();
            return;
        }
        if !last.is_empty() && now != self.pending {
            self.pending = now;
            return;
        }
        self.pending.clear();
        for (i, state) in now.iter().enumerate() {
            let before = last.get(i);
            if before == Some(state) || (before.is_none() && state.attached) {
                continue;
            }
            if state.attached {
                log::info!("{}: weir's XDP program is attached again", state.interface);
            } else {
                log::warn!("warning: {}", state.warning());
            }
        }
        self.report.publish(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(id: u32) -> Option<String> {
        (id == 7).then(|| "xdp_pass".to_string())
    }

    #[test]
    fn our_program_is_attached() {
        let s = IfaceAttach::of("eth0", 42, Some(42), named);
        assert!(s.attached);
        assert_eq!((s.other_prog_id, s.other_prog_name), (None, None));
    }

    #[test]
    fn nothing_attached_says_so_and_how_to_recover() {
        let s = IfaceAttach::of("eth0", 42, None, named);
        assert!(!s.attached);
        let w = s.warning();
        assert!(w.starts_with("eth0: "), "{w}");
        assert!(w.contains("no XDP program is there"), "{w}");
        assert!(w.contains("`weir reload` does not attach again"), "{w}");
        assert!(w.contains("restart weir"), "{w}");
        assert!(!w.contains("other program"), "{w}");
    }

    #[test]
    fn another_program_is_named_with_its_id() {
        let s = IfaceAttach::of("eth0", 42, Some(7), named);
        assert!(!s.attached);
        assert_eq!(s.other_prog_id, Some(7));
        let w = s.warning();
        assert!(w.contains("program 7 (xdp_pass) is there"), "{w}");
        assert!(w.contains("after detaching the other program"), "{w}");
        let unnamed = IfaceAttach::of("eth0", 42, Some(9), named);
        assert_eq!(unnamed.what_is_there(), "program 9");
    }

    #[test]
    fn the_recorded_state_round_trips() {
        let dir = std::env::temp_dir().join(format!("weir-xdp-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let states = vec![
            IfaceAttach::of("a", 1, Some(1), named),
            IfaceAttach::of("b", 1, Some(7), named),
        ];
        std::fs::write(REPORT.file(&dir), serde_json::to_vec(&states).unwrap()).unwrap();
        assert_eq!(REPORT.read(&dir), Some(states));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
