//! What a row of `weir-lab hnlb` measures: a data-plane tier (with its
//! offload policy) and a connection mix.

use serde::Serialize;

/// A tier of `[dataplane]`, and for the hybrid tier its offload policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Everything in XDP (weir's default; the reference).
    Xdp,
    /// XDP steers to the workers, which do everything (HNLB's SLB).
    Software,
    /// A bounded XDP fast table filled first come, first served (HNLB).
    HybridFirst,
    /// A bounded XDP fast table kept filled with the heaviest connections.
    HybridHeavy,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Xdp => "xdp",
            Variant::Software => "software",
            Variant::HybridFirst => "hybrid-first",
            Variant::HybridHeavy => "hybrid-heavy",
        }
    }

    /// The `tier` value of `[dataplane]`.
    pub fn tier(self) -> &'static str {
        match self {
            Variant::Xdp => "xdp",
            Variant::Software => "software",
            Variant::HybridFirst | Variant::HybridHeavy => "hybrid",
        }
    }

    /// Whether software-tier workers run (and report utilization).
    pub fn has_workers(self) -> bool {
        self != Variant::Xdp
    }

    /// The `[dataplane]` lines that select this variant, with the worker on
    /// `worker_cpu`. The xdp tier is weir's default and needs none.
    pub fn config_lines(self, fast_table_size: u32, worker_cpu: usize) -> String {
        let workers = format!("tier = \"{}\"\nworkers = [{worker_cpu}]\n", self.tier());
        match self {
            Variant::Xdp => String::new(),
            Variant::Software => workers,
            Variant::HybridFirst | Variant::HybridHeavy => format!(
                "{workers}fast_table_size = {fast_table_size}\noffload = \"{}\"\n",
                if self == Variant::HybridFirst {
                    "first"
                } else {
                    "heavy"
                }
            ),
        }
    }
}

/// How packets pick their connection.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Mix {
    /// Every connection in turn: all equally heavy.
    RoundRobin,
    /// Connection k with probability ~ (k + 1)^-s.
    Zipf { s: f64 },
}

impl Mix {
    pub fn label(self) -> String {
        match self {
            Mix::RoundRobin => "round robin".to_string(),
            Mix::Zipf { s } => format!("Zipf s={s}"),
        }
    }
}

/// One line of a figure: a variant under a mix.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Series {
    pub variant: Variant,
    pub mix: Mix,
}

impl Series {
    pub fn label(self) -> String {
        match self.mix {
            Mix::RoundRobin => self.variant.name().to_string(),
            Mix::Zipf { .. } => format!("{} ({})", self.variant.name(), self.mix.label()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_variant_names_its_tier_and_policy() {
        assert_eq!(Variant::Xdp.config_lines(8192, 1), "");
        assert_eq!(
            Variant::Software.config_lines(8192, 1),
            "tier = \"software\"\nworkers = [1]\n"
        );
        let heavy = Variant::HybridHeavy.config_lines(4096, 3);
        assert!(heavy.contains("tier = \"hybrid\"") && heavy.contains("workers = [3]"));
        assert!(heavy.contains("fast_table_size = 4096") && heavy.contains("offload = \"heavy\""));
        assert!(Variant::HybridFirst
            .config_lines(8192, 1)
            .contains("offload = \"first\""));
    }
}
