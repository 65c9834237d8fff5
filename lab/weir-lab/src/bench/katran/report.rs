//! The report of `weir-lab bench katran`: rows, the JSON shape and the text table.

use super::*;

/// min, median and max over runs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Figure {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Figure {
    pub(super) fn of(v: &[f64]) -> Figure {
        let (min, median, max) = stats(v);
        Figure { median, min, max }
    }
}

/// One weir mode in a row.
#[derive(Debug, Clone, Serialize)]
pub struct WeirFigure {
    pub mode: Mode,
    /// ns per packet over runs.
    pub ns: Figure,
    /// Per-run ratio weir / Katran over runs.
    pub over_katran: Figure,
    /// over_katran's median at most TARGET_OVER_KATRAN.
    pub meets_target: bool,
    /// With `--baseline`: the same figure's over_katran median there.
    pub baseline_over_katran: Option<f64>,
}

/// One measured path: Katran and every weir mode, interleaved in the same runs.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub family: Family,
    /// "hit" or "miss".
    pub path: &'static str,
    /// "hot1" (one connection, one call per packet) or "spread" (one call
    /// per packet, each a connection unused since the fill; SYNs of new
    /// connections on the miss path).
    pub measure: &'static str,
    /// Connections installed in each table.
    pub conns: u64,
    pub runs: u32,
    pub calls_per_run: u32,
    /// Katran's ns per packet over runs.
    pub katran_ns: Figure,
    pub weir: Vec<WeirFigure>,
}

/// Everything the bench measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub bench: &'static str,
    pub kernel: String,
    pub method: Vec<&'static str>,
    pub katran_object: String,
    pub runs: u32,
    pub spread: u32,
    pub keys: u32,
    pub sizes: Vec<u32>,
    pub families: Vec<Family>,
    pub modes: Vec<Mode>,
    pub seed: u64,
    pub conn_capacity: u32,
    pub half_open_capacity: u32,
    pub target_over_katran: f64,
    pub weir_program: ProgramSize,
    pub katran_program: ProgramSize,
    /// The `--baseline` report compared with, if any.
    pub baseline: Option<String>,
    pub rows: Vec<Row>,
    pub total_seconds: f64,
}

/// The text table.
pub fn render(report: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "weir-lab bench katran: BPF_PROG_TEST_RUN, weir_lb and Katran's balancer interleaved, kernel {}, \
         {} runs, {} calls per run; ns = median over runs, x K = median of per-run weir/Katran \
         (target <= {:.2}: ok / MISS)",
        report.kernel, report.runs, report.spread, report.target_over_katran
    );
    let mut header = vec![
        "family".to_string(),
        "path".into(),
        "measure".into(),
        "conns".into(),
        "Katran ns".into(),
    ];
    for m in &report.modes {
        header.push(format!("weir {} ns", m.name()));
        header.push(format!("{} x K", m.name()));
        if report.baseline.is_some() {
            header.push(format!("{} base x K", m.name()));
        }
    }
    let rows: Vec<Vec<String>> = report
        .rows
        .iter()
        .map(|r| {
            let mut cells = vec![
                r.family.name().to_string(),
                r.path.to_string(),
                r.measure.to_string(),
                r.conns.to_string(),
                format!("{:.1}", r.katran_ns.median),
            ];
            for w in &r.weir {
                cells.push(format!("{:.1}", w.ns.median));
                cells.push(format!(
                    "{:.2} {}",
                    w.over_katran.median,
                    if w.meets_target { "ok" } else { "MISS" }
                ));
                if report.baseline.is_some() {
                    cells.push(baseline_cell(w));
                }
            }
            cells
        })
        .collect();
    s += &crate::text_table::aligned(&header, &rows);
    let _ = writeln!(
        s,
        "program size (translated / jited bytes): weir_lb {} / {} (carrying {}), Katran {} / {} (weir/Katran {:.2} / {:.2})",
        report.weir_program.xlated_bytes,
        report.weir_program.jited_bytes,
        report.weir_program.features.as_deref().unwrap_or("-"),
        report.katran_program.xlated_bytes,
        report.katran_program.jited_bytes,
        report.weir_program.xlated_bytes as f64 / report.katran_program.xlated_bytes.max(1) as f64,
        report.weir_program.jited_bytes as f64 / report.katran_program.jited_bytes.max(1) as f64,
    );
    if let Some(base) = &report.baseline {
        let _ = writeln!(
            s,
            "base x K: the same figure in {base}; SLOWER where weir's cost over Katran's grew by more than {:.0}%; \
             baseline program size {} / {}",
            (SLOWER_THAN - 1.0) * 100.0,
            report.weir_program.baseline_xlated_bytes.map_or("-".into(), |b| b.to_string()),
            report.weir_program.baseline_jited_bytes.map_or("-".into(), |b| b.to_string()),
        );
    }
    let missed = report
        .rows
        .iter()
        .flat_map(|r| &r.weir)
        .filter(|w| !w.meets_target)
        .count();
    let total: usize = report.rows.iter().map(|r| r.weir.len()).sum();
    let _ = writeln!(
        s,
        "{} of {total} figures at most {:.2}x Katran; took {:.0} s",
        total - missed,
        report.target_over_katran,
        report.total_seconds
    );
    s
}

/// A figure's baseline cell: the ratio to Katran there, SLOWER where weir's
/// ratio grew past SLOWER_THAN times it, "-" without a baseline figure.
fn baseline_cell(w: &WeirFigure) -> String {
    match w.baseline_over_katran {
        Some(b) if w.over_katran.median > b * SLOWER_THAN => format!("{b:.2} SLOWER"),
        Some(b) => format!("{b:.2}"),
        None => "-".to_string(),
    }
}

/// Compares `report` with an earlier `bench katran --json` report: every
/// weir figure with the same family, path, measure, table size and mode
/// there (as a ratio to Katran, measured in the same run as it, so that
/// two runs on a noisy machine compare), and weir_lb's size.
pub(super) fn compare_with_baseline(report: &mut Report, path: &std::path::Path) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let refuse = |what: &str| {
        anyhow::anyhow!(
            "{} {what}; --baseline takes a file that `weir-lab bench katran --json` wrote",
            path.display()
        )
    };
    let base: serde_json::Value = serde_json::from_str(&text).map_err(|_| refuse("is not JSON"))?;
    if base["bench"].as_str() != Some("katran") {
        return Err(refuse("is no `bench katran` report"));
    }
    let rows = base["rows"]
        .as_array()
        .ok_or_else(|| refuse("has no \"rows\""))?;
    for row in &mut report.rows {
        let found = rows.iter().find(|b| {
            b["family"].as_str() == Some(row.family.name())
                && b["path"].as_str() == Some(row.path)
                && b["measure"].as_str() == Some(row.measure)
                && b["conns"].as_u64() == Some(row.conns)
        });
        let Some(b) = found else { continue };
        for w in &mut row.weir {
            w.baseline_over_katran = b["weir"].as_array().and_then(|ws| {
                ws.iter()
                    .find(|x| x["mode"].as_str() == Some(w.mode.name()))
                    .and_then(|x| x["over_katran"]["median"].as_f64())
            });
        }
    }
    let size = |k: &str| base["weir_program"][k].as_u64().map(|v| v as usize);
    report.weir_program.baseline_xlated_bytes = size("xlated_bytes");
    report.weir_program.baseline_jited_bytes = size("jited_bytes");
    report.baseline = Some(path.display().to_string());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(median: f64) -> Figure {
        Figure {
            median,
            min: median,
            max: median,
        }
    }

    /// One row: dsr at 0.7x Katran, nat at 1.2x.
    fn sample() -> Report {
        let size = ProgramSize {
            features: Some("dsr, nat".into()),
            xlated_bytes: 800,
            jited_bytes: 1000,
            baseline_xlated_bytes: None,
            baseline_jited_bytes: None,
        };
        let weir = |mode, ratio: f64| WeirFigure {
            mode,
            ns: figure(50.0 * ratio),
            over_katran: figure(ratio),
            meets_target: ratio <= TARGET_OVER_KATRAN,
            baseline_over_katran: None,
        };
        Report {
            bench: "katran",
            kernel: "k".into(),
            method: vec![],
            katran_object: "o".into(),
            runs: 3,
            spread: 10,
            keys: 1,
            sizes: vec![1],
            families: vec![Family::V4],
            modes: vec![Mode::Dsr, Mode::Nat],
            seed: 1,
            conn_capacity: 10,
            half_open_capacity: 2,
            target_over_katran: TARGET_OVER_KATRAN,
            weir_program: size.clone(),
            katran_program: ProgramSize {
                features: None,
                xlated_bytes: 1000,
                ..size
            },
            baseline: None,
            rows: vec![Row {
                family: Family::V4,
                path: "hit",
                measure: "hot1",
                conns: 1,
                runs: 3,
                calls_per_run: 10,
                katran_ns: figure(50.0),
                weir: vec![weir(Mode::Dsr, 0.7), weir(Mode::Nat, 1.2)],
            }],
            total_seconds: 1.0,
        }
    }

    #[test]
    fn the_table_marks_each_ratio_against_the_target() {
        let report = sample();
        let text = render(&report);
        let line = text.lines().find(|l| l.starts_with("v4")).unwrap();
        assert!(line.contains("0.70 ok"), "{line}");
        assert!(line.contains("1.20 MISS"), "{line}");
        assert!(text.contains(
            "weir_lb 800 / 1000 (carrying dsr, nat), Katran 1000 / 1000 (weir/Katran 0.80 / 1.00)"
        ));
        assert!(text.contains("1 of 2 figures"));
    }

    #[test]
    fn a_figure_that_grew_over_its_baseline_is_marked_slower() {
        let w = |ratio: f64, base: Option<f64>| WeirFigure {
            mode: Mode::Nat,
            ns: figure(ratio * 100.0),
            over_katran: figure(ratio),
            meets_target: false,
            baseline_over_katran: base,
        };
        assert_eq!(baseline_cell(&w(1.0, Some(0.9))), "0.90 SLOWER");
        assert_eq!(baseline_cell(&w(0.9, Some(0.9))), "0.90");
        assert_eq!(baseline_cell(&w(0.7, Some(0.9))), "0.90");
        assert_eq!(baseline_cell(&w(0.7, None)), "-");
    }

    #[test]
    fn a_baseline_that_is_no_katran_report_is_refused_by_name() {
        let path = std::env::temp_dir().join(format!("not-katran-{}.json", std::process::id()));
        std::fs::write(&path, r#"{"bench":"xdp","rows":[]}"#).unwrap();
        let mut report = sample();
        let err = compare_with_baseline(&mut report, &path)
            .unwrap_err()
            .to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(err.contains("is no `bench katran` report"), "{err}");
        assert!(err.contains("not-katran-"), "{err}");
    }

    #[test]
    fn a_baseline_report_is_matched_row_by_row_and_mode_by_mode() {
        let mut before = sample();
        before.rows[0].weir[1].over_katran = figure(0.9);
        let path = std::env::temp_dir().join(format!("katran-base-{}.json", std::process::id()));
        std::fs::write(&path, serde_json::to_string(&before).unwrap()).unwrap();
        let mut report = sample();
        compare_with_baseline(&mut report, &path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(report.rows[0].weir[0].baseline_over_katran, Some(0.7));
        assert_eq!(report.rows[0].weir[1].baseline_over_katran, Some(0.9));
        let text = render(&report);
        let line = text.lines().find(|l| l.starts_with("v4")).unwrap();
        assert!(line.contains("0.90 SLOWER"), "{line}");
    }
}
