//! `--compare-lru`: the connection tables' two LRU layouts side by side at
//! equal capacity. Two `weir_lb`s of the family's largest fill, one with
//! shared LRU lists and one with per-CPU lists (BPF_F_NO_COMMON_LRU), the
//! same capacity and the same connections, filled evenly from every CPU so
//! that each per-CPU share holds its part. Every run measures both, in an
//! order that rotates from run to run, so machine noise hits them alike;
//! a row's ratio is the median of the per-run ratios per-cpu / shared.
//!
//! The measures are the main bench's, on the same instances: the hit path
//! hot and spread, the miss path on one CPU (spread), and the miss path on
//! every CPU at once, where per-CPU lists should pay off: inserts from
//! different CPUs take no common LRU lock.

use super::*;

/// Progress steps per run and mode: hit hot, hit spread, miss, miss on all
/// CPUs.
pub(super) const STEPS_PER_MODE: u64 = 4;

/// The rows of one family's comparison, in the modes that do not
/// encapsulate (ipip and gue have no hot measure).
pub(super) fn shared_against_per_cpu(
    bench: &FamilyBench<'_>,
    rng: &mut SplitMix,
    next_fresh: &mut u64,
) -> Result<Vec<LruRow>> {
    let (args, progress, floor) = (bench.args, bench.progress, bench.floor);
    let family = bench.family;
    let size = u64::from(*bench.sizes.last().unwrap());
    let mut pair = Vec::new();
    for lru in [Lru::Shared, Lru::PerCpu] {
        progress.set_message(format!(
            "{} LRU comparison: filling the {} table",
            family.name(),
            lru.name()
        ));
        let inst = Inst::new(
            family,
            size,
            bench.capacity,
            bench.lo,
            bench.egress,
            args.next_hop,
            lru,
            features_of(bench.modes),
        )?;
        inst.fill(progress)?;
        inst.verify_installed(rng)?;
        pair.push(inst);
    }
    let mut rows = Vec::new();
    for &mode in bench.modes.iter().filter(|m| !m.encapsulates()) {
        for inst in &pair {
            inst.set_mode(mode)?;
        }
        progress.set_message(format!(
            "{} LRU comparison, {} mode",
            family.name(),
            mode.name()
        ));
        let row =
            |path, measure, times: &[(f64, f64)]| lru_row(family, path, mode, size, measure, times);
        // One series on both layouts; both tables get the same packets.
        let both_layouts = |path, measure, repeat, pkts: Vec<Set>| -> Result<LruRow> {
            let series = Series {
                path,
                measure,
                repeat,
                runs: args.runs,
            };
            let sets = [pkts.clone(), pkts];
            let t = series.run(floor, &pair, &sets, &warm_up(&sets), progress)?;
            Ok(row(path, measure, &pairs_of(&t)))
        };

        // Hit, hot: the same random connections in both tables.
        let hot: Vec<Set> = (0..args.keys)
            .map(|_| vec![pair[0].packet(rng.below(size), TCP_ACK)])
            .collect();
        rows.push(both_layouts("hit", "hot", args.repeat, hot)?);

        // Hit, spread: the same random connections, one call each.
        let spread: Vec<Set> = vec![(0..args.spread)
            .map(|_| pair[0].packet(rng.below(size), TCP_ACK))
            .collect()];
        rows.push(both_layouts("hit", "spread", 1, spread)?);

        // Miss on one CPU: SYNs of new connections (new in both tables).
        let syns: Vec<Set> = (0..args.runs)
            .map(|_| {
                (0..args.spread)
                    .map(|_| {
                        *next_fresh += 1;
                        pair[0].packet(*next_fresh, TCP_SYN)
                    })
                    .collect()
            })
            .collect();
        rows.push(both_layouts("miss", "spread", 1, syns)?);

        // Miss on every CPU at once, the layouts alternating which goes first.
        let mut both = Vec::new();
        for r in 0..args.runs {
            let mut ns = [0.0; 2];
            for k in 0..2 {
                let i = (k + r as usize) % 2;
                ns[i] = concurrent::miss_on_all_cpus(
                    &pair[i],
                    floor,
                    mode,
                    1,
                    args.spread,
                    bench.cpus,
                    next_fresh,
                )?
                .ns_median;
            }
            both.push((ns[0], ns[1]));
            progress.inc(1);
        }
        rows.push(row("miss", "allcpus", &both));
    }
    Ok(rows)
}

/// Per run: (shared ns, per-cpu ns).
fn pairs_of(times: &[RunTimes]) -> Vec<(f64, f64)> {
    times.iter().map(|t| (t.lb[0], t.lb[1])).collect()
}

fn lru_row(
    family: Family,
    path: &'static str,
    mode: Mode,
    conns: u64,
    measure: &'static str,
    times: &[(f64, f64)],
) -> LruRow {
    let shared: Vec<f64> = times.iter().map(|t| t.0).collect();
    let per_cpu: Vec<f64> = times.iter().map(|t| t.1).collect();
    let ratio: Vec<f64> = times.iter().map(|t| t.1 / t.0.max(1e-9)).collect();
    let (lo, med, hi) = stats(&ratio);
    LruRow {
        family,
        path,
        mode,
        conns,
        measure,
        shared_ns: stats(&shared).1,
        per_cpu_ns: stats(&per_cpu).1,
        per_cpu_over_shared: med,
        ratio_min: lo,
        ratio_max: hi,
        runs: times.len() as u32,
    }
}
