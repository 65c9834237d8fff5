//! What `weir-lab hnlb` shows: a text table per figure, next to the
//! paper's claims, and an SVG per figure (weir-plot).

use anyhow::{anyhow, Result};
use weir_plot::{Axis, Bar, Bars, Figure, Lines, Panel, Point, Series as Line, Style};

use super::fit::LinearFit;
use super::search::Ended;
use super::throughput::SearchRow;
use super::utilization::{Point as UtilizationPoint, UtilizationRow};
use super::variant::{Mix, Series, Variant};
use super::workers::Ledger;
use super::{Plan, Report};

/// HNLB's claim for Fig. 5: hybrid over software at 8000 connections.
const PAPER_GAIN_AT_8000: f64 = 1.5;

fn mpps(pps: f64) -> String {
    format!("{:.3}", pps / 1e6)
}

/// A loss-free rate, starred when the generator was the limit.
fn loss_free(r: &SearchRow) -> String {
    let star = if r.found.ended == Ended::GeneratorBound {
        "*"
    } else {
        ""
    };
    format!("{}{star}", mpps(r.found.loss_free_pps))
}

/// The setting of a figure whose trials last `trial_s` seconds.
fn setting(plan: &Plan, trial_s: f64) -> String {
    format!(
        "{}-byte UDP frames to a nat VIP, loss <= {}%, {trial_s} s trials",
        plan.frame_bytes_on_wire,
        plan.limits.loss_threshold * 100.0,
    )
}

fn ended(r: &SearchRow) -> String {
    format!(
        "{}, {} trials",
        r.found.ended.describe(),
        r.found.trials.len()
    )
}

/// `num`'s `value` over `den`'s, as "1.52x".
fn ratio(num: Option<&SearchRow>, den: Option<&SearchRow>, value: fn(&SearchRow) -> f64) -> String {
    match (num, den) {
        (Some(n), Some(d)) if value(d) > 0.0 => format!("{:.2}x", value(n) / value(d)),
        _ => "-".to_string(),
    }
}

fn find(rows: &[SearchRow], variant: Variant, zipf: bool, connections: u32) -> Option<&SearchRow> {
    rows.iter().find(|r| {
        r.series.variant == variant
            && matches!(r.series.mix, Mix::Zipf { .. }) == zipf
            && r.connections == connections
    })
}

pub fn fig4_table(plan: &Plan, rows: &[SearchRow]) -> String {
    let software = rows.iter().find(|r| r.series.variant == Variant::Software);
    let header: Vec<String> = [
        "variant",
        "loss-free Mpps",
        "first loss Mpps",
        "full speed: offered",
        "received",
        "vs software: loss-free",
        "full speed",
        "worker CPU at full speed",
        "search",
    ]
    .map(String::from)
    .to_vec();
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.series.label(),
                loss_free(r),
                r.found.first_loss_pps.map_or("-".into(), mpps),
                mpps(r.found.full_speed_offered_pps),
                mpps(r.found.full_speed_received_pps),
                ratio(Some(r), software, |r| r.found.loss_free_pps),
                ratio(Some(r), software, |r| r.found.full_speed_received_pps),
                percent(r.found.trials[0].worker_cpu_share),
                ended(r),
            ]
        })
        .collect();
    format!(
        "\nFig. 4: highest loss-free rate, 1 flow, 1 DIP ({}; * = the generator's full \
         speed was loss-free)\n{}{}",
        setting(plan, plan.duration_s),
        crate::text_table::aligned(&header, &body),
        ledger_table(rows.iter().map(|r| (r.series.label(), r.workers.as_ref())))
    )
}

/// The series of `rows` in order of first appearance.
fn series_of(rows: &[SearchRow]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in rows {
        if !out.contains(&r.series) {
            out.push(r.series);
        }
    }
    out
}

fn connections_of(rows: &[SearchRow]) -> Vec<u32> {
    let mut out: Vec<u32> = rows.iter().map(|r| r.connections).collect();
    out.sort_unstable();
    out.dedup();
    out
}

pub fn fig5_table(plan: &Plan, rows: &[SearchRow]) -> String {
    let series = series_of(rows);
    let conns = connections_of(rows);
    let by_conns = |value: &dyn Fn(&SearchRow) -> String| -> String {
        let mut header = vec!["connections".to_string()];
        header.extend(series.iter().map(|s| s.label()));
        let body: Vec<Vec<String>> = conns
            .iter()
            .map(|&c| {
                let mut row = vec![c.to_string()];
                row.extend(series.iter().map(|s| {
                    rows.iter()
                        .find(|r| r.series == *s && r.connections == c)
                        .map_or("-".into(), value)
                }));
                row
            })
            .collect();
        crate::text_table::aligned(&header, &body)
    };
    let mut out = format!(
        "\nFig. 5: highest loss-free rate (Mpps) vs concurrent connections, {} DIPs ({}; * = \
         the generator's full speed was loss-free)\n{}",
        plan.dips,
        setting(plan, plan.duration_s),
        by_conns(&loss_free)
    );
    out += &format!(
        "\nFig. 5, throughput at the generator's full speed (received Mpps)\n{}",
        by_conns(&|r: &SearchRow| mpps(r.found.full_speed_received_pps))
    );

    out += &ledger_table(rows.iter().map(|r| {
        (
            format!("{}, {} conn.", r.series.label(), r.connections),
            r.workers.as_ref(),
        )
    }));

    let gains: Vec<(&str, Variant, Variant, bool)> = vec![
        (
            "hybrid-first / software",
            Variant::HybridFirst,
            Variant::Software,
            false,
        ),
        (
            "hybrid-first / software (Zipf)",
            Variant::HybridFirst,
            Variant::Software,
            true,
        ),
        (
            "hybrid-heavy / software (Zipf)",
            Variant::HybridHeavy,
            Variant::Software,
            true,
        ),
    ];
    let gains: Vec<_> = gains
        .into_iter()
        .filter(|(_, a, b, z)| {
            rows.iter()
                .any(|r| r.series.variant == *a && is_zipf(r) == *z)
                && rows
                    .iter()
                    .any(|r| r.series.variant == *b && is_zipf(r) == *z)
        })
        .collect();
    if gains.is_empty() {
        return out;
    }
    let mut header = vec!["connections".to_string()];
    for g in &gains {
        header.push(format!("{}: loss-free", g.0));
        header.push("full speed".to_string());
    }
    let body: Vec<Vec<String>> = conns
        .iter()
        .map(|&c| {
            let mut row = vec![c.to_string()];
            for &(_, a, b, z) in &gains {
                let (a, b) = (find(rows, a, z, c), find(rows, b, z, c));
                row.push(ratio(a, b, |r| r.found.loss_free_pps));
                row.push(ratio(a, b, |r| r.found.full_speed_received_pps));
            }
            row
        })
        .collect();
    out + &format!(
        "\nFig. 5, hybrid over software\n{}paper (HNLB V-A): HNLB / SLB = \
         {PAPER_GAIN_AT_8000:.1}x (loss-free) at 8000 connections\n",
        crate::text_table::aligned(&header, &body)
    )
}

/// Where each row's worker packets went, for the rows with workers.
fn ledger_table<'a>(rows: impl Iterator<Item = (String, Option<&'a Ledger>)>) -> String {
    let header: Vec<String> = [
        "row",
        "worker rx",
        "worker tx",
        "RX ring full",
        "fill ring empty",
        "TX ring full",
        "dropped by the LB",
        "fast table",
    ]
    .map(String::from)
    .to_vec();
    let body: Vec<Vec<String>> = rows
        .filter_map(|(label, l)| Some((label, l?)))
        .map(|(label, l)| {
            let drops = if l.lb_drops.is_empty() {
                "0".to_string()
            } else {
                l.lb_drops
                    .iter()
                    .map(|(k, v)| format!("{v} {k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            vec![
                label,
                l.rx_packets.to_string(),
                l.tx_packets.to_string(),
                l.rx_ring_full.to_string(),
                l.fill_ring_empty.to_string(),
                l.tx_ring_full.to_string(),
                drops,
                l.fast_table_occupancy.map_or("-".to_string(), |o| {
                    format!("{o} held, {} promoted, {} demoted", l.promoted, l.demoted)
                }),
            ]
        })
        .collect();
    if body.is_empty() {
        return String::new();
    }
    format!(
        "where the workers' packets went over each row's trials\n{}",
        crate::text_table::aligned(&header, &body)
    )
}

fn percent(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0))
}

pub fn fig7_table(plan: &Plan, worker_cpu: usize, rows: &[UtilizationRow]) -> String {
    let mut out = format!(
        "\nFig. 7: the worker's utilization (HNLB eq. 2/3) vs offered rate, one worker on CPU \
         {worker_cpu}, {} DIPs ({}; * = the loss onset)\n",
        plan.dips,
        setting(plan, plan.utilization_trial_s),
    );
    let header: Vec<String> = [
        "offered Mpps",
        "received Mpps",
        "loss",
        "U (eq. 2/3)",
        "U_c (eq. 1)",
        "burst fill",
        "cost-model load",
        "windows",
        "worker CPU",
    ]
    .map(String::from)
    .to_vec();
    let line = |p: &UtilizationPoint, offered: String| {
        vec![
            offered,
            mpps(p.received_pps),
            format!("{:.3}%", p.loss * 100.0),
            percent(p.utilization),
            percent(p.busy_fraction),
            percent(p.burst_fill),
            percent(p.load),
            p.windows.to_string(),
            percent(p.worker_cpu_share),
        ]
    };
    for r in rows {
        let onset = r
            .points
            .iter()
            .position(|p| Some(p.offered_pps) == r.onset_pps);
        let mut body: Vec<Vec<String>> = r
            .points
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let star = if Some(i) == onset { "*" } else { "" };
                line(p, format!("{}{star}", mpps(p.offered_pps)))
            })
            .collect();
        body.push(line(
            &r.full_speed,
            format!("{} (full speed)", mpps(r.full_speed.offered_pps)),
        ));
        out += &format!(
            "\n{}, {} connections (capacity {} Mpps: received at full speed)\n{}",
            r.series.label(),
            r.connections,
            mpps(r.full_speed.received_pps),
            crate::text_table::aligned(&header, &body)
        );
        let fit = |f: Option<LinearFit>, what: &str| match f {
            Some(f) => format!(
                "U = {:.3} + {:.3} x {what} Mpps, R^2 = {:.4} over {} rates",
                f.intercept, f.slope, f.r2, f.n
            ),
            None => "fewer than 3 rates, no fit".to_string(),
        };
        out += &format!(
            "below the onset: {}\nbelow 90% of the capacity: {}\n",
            fit(r.fit_offered, "offered"),
            fit(r.fit_received, "received")
        );
        out += &format!(
            "U at the highest loss-free rate {}, at the onset {}, at full speed {}\n",
            percent(r.utilization_last_loss_free),
            match r.onset_pps {
                Some(_) => percent(r.utilization_at_onset),
                None => "(no loss below full speed)".into(),
            },
            percent(r.full_speed.utilization)
        );
    }
    out += &ledger_table(rows.iter().map(|r| {
        (
            format!("{}, {} conn.", r.series.label(), r.connections),
            r.workers.as_ref(),
        )
    }));
    out + "paper (HNLB V-B): U linear in the rate below the onset, 100% at the onset\n"
}

fn is_zipf(r: &SearchRow) -> bool {
    matches!(r.series.mix, Mix::Zipf { .. })
}

/// Each figure's SVG, named.
pub fn svgs(report: &Report) -> Result<Vec<(&'static str, String)>> {
    let mut out = Vec::new();
    let draw = |f: Figure| f.svg().map_err(|e| anyhow!("{e}"));
    if !report.fig4.is_empty() {
        out.push(("hnlb-fig4.svg", draw(fig4_figure(report))?));
    }
    if !report.fig5.is_empty() {
        out.push(("hnlb-fig5.svg", draw(fig5_figure(report))?));
    }
    if !report.fig7.is_empty() {
        out.push(("hnlb-fig7.svg", draw(fig7_figure(report))?));
    }
    Ok(out)
}

/// One color per variant, the same in every figure; dashed under Zipf.
fn style(s: Series) -> Style {
    let color = match s.variant {
        Variant::Xdp => 2,
        Variant::Software => 0,
        Variant::HybridFirst => 1,
        Variant::HybridHeavy => 3,
    };
    match s.mix {
        Mix::RoundRobin => Style::solid(color),
        Mix::Zipf { .. } => Style::dashed(color),
    }
}

/// Fig. 4 and 5 draw two measures side by side: the loss-free rate (the
/// paper's) and what got through at the generator's full speed.
type Measure = (&'static str, fn(&SearchRow) -> f64);
const MEASURES: [Measure; 2] = [
    ("highest loss-free rate (Mpps)", |r| {
        r.found.loss_free_pps / 1e6
    }),
    ("throughput at full speed (Mpps)", |r| {
        r.found.full_speed_received_pps / 1e6
    }),
];

fn fig4_figure(report: &Report) -> Figure {
    let panels = MEASURES
        .iter()
        .map(|(what, value)| {
            Panel::Bars(Bars {
                title: String::new(),
                y: Axis::new(*what),
                bars: report
                    .fig4
                    .iter()
                    .map(|r| Bar {
                        label: if r.found.ended == Ended::GeneratorBound {
                            format!("{} *", r.series.label())
                        } else {
                            r.series.label()
                        },
                        value: value(r),
                        err: None,
                        style: style(r.series),
                    })
                    .collect(),
            })
        })
        .collect();
    Figure {
        title: "HNLB Fig. 4: 1 flow, 1 DIP".into(),
        subtitle: Some(format!(
            "{}; * the generator's full speed was loss-free",
            setting(&report.plan, report.plan.duration_s)
        )),
        panels,
        columns: 2,
        size: (1100, 440),
    }
}

fn fig5_figure(report: &Report) -> Figure {
    let rows = &report.fig5;
    let conns = connections_of(rows);
    let panels = MEASURES
        .iter()
        .map(|(what, value)| {
            Panel::Lines(Lines {
                title: String::new(),
                x: Axis::new("concurrent connections").log().ticks(
                    conns
                        .iter()
                        .map(|&c| (f64::from(c), c.to_string()))
                        .collect(),
                ),
                y: Axis::new(*what).from_zero(),
                series: series_of(rows)
                    .into_iter()
                    .map(|s| Line {
                        name: s.label(),
                        style: style(s),
                        points: rows
                            .iter()
                            .filter(|r| r.series == s)
                            .map(|r| Point::new(f64::from(r.connections), value(r)))
                            .collect(),
                    })
                    .collect(),
            })
        })
        .collect();
    Figure {
        title: "HNLB Fig. 5: concurrent connections".into(),
        subtitle: Some(format!(
            "{} DIPs, {}",
            report.plan.dips,
            setting(&report.plan, report.plan.duration_s)
        )),
        panels,
        columns: 2,
        size: (1200, 520),
    }
}

/// A column per number of connections. Top: each series' utilization
/// against the offered rate, with a dashed vertical line of its color at
/// its loss onset (the paper's view). Bottom: against the received rate,
/// the full-speed trial included, where the metric meets saturation.
fn fig7_figure(report: &Report) -> Figure {
    let rows = &report.fig7;
    let mut conns: Vec<u32> = rows.iter().map(|r| r.connections).collect();
    conns.dedup();
    let vs_offered = conns.iter().map(|&c| {
        let mut series = Vec::new();
        for r in rows.iter().filter(|r| r.connections == c) {
            let color = style(r.series).color;
            series.push(Line {
                name: r.series.label(),
                style: Style::solid(color),
                points: r
                    .points
                    .iter()
                    .filter_map(|p| Some(Point::new(p.offered_pps / 1e6, p.utilization? * 100.0)))
                    .collect(),
            });
            if let Some(onset) = r.onset_pps {
                series.push(Line {
                    name: r.series.label(),
                    style: Style::dashed(color),
                    points: vec![Point::new(onset / 1e6, 0.0), Point::new(onset / 1e6, 100.0)],
                });
            }
        }
        Panel::Lines(Lines {
            title: format!("{c} connections, against the offered rate"),
            x: Axis::new("offered rate (Mpps)").from_zero(),
            y: Axis::new("utilization (%)").from_zero(),
            series,
        })
    });
    let vs_received = conns.iter().map(|&c| {
        let series = rows
            .iter()
            .filter(|r| r.connections == c)
            .map(|r| {
                let mut points: Vec<&UtilizationPoint> = r.points.iter().collect();
                points.push(&r.full_speed);
                points.sort_by(|a, b| a.received_pps.total_cmp(&b.received_pps));
                Line {
                    name: r.series.label(),
                    style: Style::solid(style(r.series).color),
                    points: points
                        .into_iter()
                        .filter_map(|p| {
                            Some(Point::new(p.received_pps / 1e6, p.utilization? * 100.0))
                        })
                        .collect(),
                }
            })
            .collect();
        Panel::Lines(Lines {
            title: format!("{c} connections, against the received rate (full speed included)"),
            x: Axis::new("received rate (Mpps)").from_zero(),
            y: Axis::new("utilization (%)").from_zero(),
            series,
        })
    });
    let panels: Vec<Panel> = vs_offered.chain(vs_received).collect();
    Figure {
        title: "HNLB Fig. 7: worker utilization (dashed: loss onset)".into(),
        subtitle: Some(format!(
            "one worker on CPU {}, {} DIPs, {}",
            report.worker_cpu,
            report.plan.dips,
            setting(&report.plan, report.plan.utilization_trial_s)
        )),
        columns: conns.len().max(1),
        panels,
        size: (1100, 860),
    }
}
