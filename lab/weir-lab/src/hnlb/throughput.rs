//! HNLB Fig. 4 and Fig. 5: the highest loss-free rate of each series, with
//! one flow and one DIP (Fig. 4), and against the number of concurrent
//! connections (Fig. 5).

use anyhow::Result;
use serde::Serialize;
use weir_progress::Progress;

use super::rig::Testbed;
use super::search::{search, Found};
use super::variant::{Mix, Series, Variant};
use super::workers::Ledger;
use super::Plan;

/// One searched row.
#[derive(Debug, Clone, Serialize)]
pub struct SearchRow {
    pub series: Series,
    pub connections: u32,
    pub dips: usize,
    #[serde(flatten)]
    pub found: Found,
    /// Where the workers' packets went over the row's trials.
    pub workers: Option<Ledger>,
}

/// Fig. 4's series: each variant, one flow, round robin (there is no mix).
pub fn fig4_series(variants: &[Variant]) -> Vec<Series> {
    variants
        .iter()
        .map(|&variant| Series {
            variant,
            mix: Mix::RoundRobin,
        })
        .collect()
}

/// Fig. 5's series: every variant with equally heavy connections, and the
/// software and hybrid tiers again under a Zipf mix, the one where `heavy`
/// has something to choose (it is only run there).
pub fn fig5_series(variants: &[Variant], zipf_s: f64) -> Vec<Series> {
    let zipf = Mix::Zipf { s: zipf_s };
    let all = [
        (Variant::Xdp, Mix::RoundRobin),
        (Variant::Software, Mix::RoundRobin),
        (Variant::HybridFirst, Mix::RoundRobin),
        (Variant::Software, zipf),
        (Variant::HybridFirst, zipf),
        (Variant::HybridHeavy, zipf),
    ];
    all.into_iter()
        .filter(|(v, _)| variants.contains(v))
        .map(|(variant, mix)| Series { variant, mix })
        .collect()
}

/// Searches the highest loss-free rate of `series` with `connections`
/// concurrent connections over `dips` DIPs; `tag` names the row in
/// progress notes.
pub fn search_row(
    bed: &mut Testbed,
    plan: &Plan,
    progress: &Progress,
    tag: &str,
    series: Series,
    connections: u32,
    dips: usize,
) -> Result<SearchRow> {
    let setup = plan.setup(series, connections, dips, tag);
    let bench = bed.bench(&setup, progress)?;
    let before = bench.ledger()?;
    let found = search(&plan.limits, bench.trial_time(), |rate| bench.trial(rate))?;
    let workers = bench.ledger()?.zip(before).map(|(a, b)| a.since(&b));
    progress.note(format!(
        "{}: loss-free {:.3} Mpps, {:.3} Mpps through at full speed ({}, {} trials)",
        setup.label,
        found.loss_free_pps / 1e6,
        found.full_speed_received_pps / 1e6,
        found.ended.describe(),
        found.trials.len()
    ));
    Ok(SearchRow {
        series,
        connections,
        dips,
        found,
        workers,
    })
}
