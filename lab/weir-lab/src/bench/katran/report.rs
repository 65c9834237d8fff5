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
            }
            cells
        })
        .collect();
    s += &crate::text_table::aligned(&header, &rows);
    let _ = writeln!(
        s,
        "program size (translated / jited bytes): weir_lb {} / {}, Katran {} / {} (weir/Katran {:.2} / {:.2})",
        report.weir_program.xlated_bytes,
        report.weir_program.jited_bytes,
        report.katran_program.xlated_bytes,
        report.katran_program.jited_bytes,
        report.weir_program.xlated_bytes as f64 / report.katran_program.xlated_bytes.max(1) as f64,
        report.weir_program.jited_bytes as f64 / report.katran_program.jited_bytes.max(1) as f64,
    );
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

    #[test]
    fn the_table_marks_each_ratio_against_the_target() {
        let size = ProgramSize {
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
        };
        let report = Report {
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
            weir_program: size,
            katran_program: ProgramSize {
                xlated_bytes: 1000,
                ..size
            },
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
        };
        let text = render(&report);
        let line = text.lines().find(|l| l.starts_with("v4")).unwrap();
        assert!(line.contains("0.70 ok"), "{line}");
        assert!(line.contains("1.20 MISS"), "{line}");
        assert!(text.contains("weir_lb 800 / 1000, Katran 1000 / 1000 (weir/Katran 0.80 / 1.00)"));
        assert!(text.contains("1 of 2 figures"));
    }
}
