//! What `weir-lab cores` shows: a text table per figure, with the seeds'
//! claims and the targets, and an SVG per figure (weir-plot).

use anyhow::{anyhow, Result};
use weir_plot::{Axis, Bar, Bars, Figure, Lines, Panel, Point, Series, Style};
use weir_software_engine::distribution::Mode;

use super::rate::RatePoint;
use super::{IperfPoint, Report};

/// The targets.
const SPRAY_OVER_FLOW_FIG2: f64 = 1.7;
const SPRAY_OVER_FLOW_FIG3: f64 = 1.6;
const TARGET_COST: u64 = 10_000;

fn mpps(pps: f64) -> String {
    format!("{:.3}", pps / 1e6)
}

fn ratio(num: Option<f64>, den: Option<f64>) -> Option<f64> {
    match (num, den) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    }
}

fn times(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}x"))
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "missed"
    }
}

fn point<'a>(
    points: &'a [RatePoint],
    traffic: &str,
    mode: Mode,
    cost: u64,
) -> Option<&'a RatePoint> {
    points
        .iter()
        .find(|p| p.traffic == traffic && p.setting.mode == mode && p.setting.cost_cycles == cost)
}

fn fig2_rate(r: &Report, mode: Mode, cost: u64) -> Option<f64> {
    point(&r.fig2, "single flow", mode, cost).map(|p| p.received_pps)
}

fn us(r: &Report, cycles: u64) -> String {
    format!("{:.2}", cycles as f64 / r.tsc_hz * 1e6)
}

/// Seed 001 Fig. 2 as a table.
pub fn fig2(r: &Report) -> String {
    let rows: Vec<Vec<String>> = r
        .plan
        .costs
        .iter()
        .map(|&c| {
            let rate = |m| fig2_rate(r, m, c);
            let cell = |m| {
                point(&r.fig2, "single flow", m, c).map_or("-".into(), |p| {
                    format!("{} ({:.2})", mpps(p.received_pps), p.workers_cpu)
                })
            };
            vec![
                c.to_string(),
                us(r, c),
                cell(Mode::Flow),
                cell(Mode::Spray),
                cell(Mode::Adaptive),
                times(ratio(rate(Mode::Spray), rate(Mode::Flow))),
                times(ratio(rate(Mode::Adaptive), rate(Mode::Flow))),
            ]
        })
        .collect();
    let mut out = format!(
        "\nSeed 001 Fig. 2: {}-byte TCP frames of one 5-tuple through a nat VIP, received Mpps \
         (the CPUs the 2 workers had)\n",
        r.plan.frame_bytes_on_wire
    );
    out += &crate::text_table::aligned(
        &[
            "cycles",
            "µs",
            "flow",
            "spray",
            "adaptive",
            "spray/flow",
            "adaptive/flow",
        ],
        &rows,
    );
    let at = ratio(
        fig2_rate(r, Mode::Spray, TARGET_COST),
        fig2_rate(r, Mode::Flow, TARGET_COST),
    );
    if let Some(x) = at {
        out += &format!(
            "target: spray >= {SPRAY_OVER_FLOW_FIG2}x flow at {TARGET_COST} cycles on 2 workers: \
             {x:.2}x, {} (seed 001: PPLB over RSS on 8 cores)\n",
            verdict(x >= SPRAY_OVER_FLOW_FIG2)
        );
    }
    out
}

/// Fig. 3's lines, by the setting's name.
fn fig3_lines(r: &Report) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in &r.fig3 {
        let n = p.setting.name();
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

fn fig3_point<'a>(r: &'a Report, line: &str, cost: u64) -> Option<&'a IperfPoint> {
    r.fig3
        .iter()
        .find(|p| p.setting.name() == line && p.setting.cost_cycles == cost)
}

/// Seed 001 Fig. 3 as a table.
pub fn fig3(r: &Report) -> String {
    let lines = fig3_lines(r);
    let rows: Vec<Vec<String>> = r
        .plan
        .costs
        .iter()
        .map(|&c| {
            let mut row = vec![c.to_string()];
            row.extend(lines.iter().map(|l| {
                fig3_point(r, l, c).map_or("-".into(), |p| {
                    format!(
                        "{:.2} ({}/{})",
                        p.iperf.received_gbps, p.iperf.receiver_out_of_order, p.iperf.retransmits
                    )
                })
            }));
            row
        })
        .collect();
    let mut out = format!(
        "\nSeed 001 Fig. 3: one iperf3 TCP flow through a nat VIP, {} s, Gbit/s (receiver's \
         out-of-order segments / sender's retransmissions)\n",
        r.plan.iperf_s
    );
    let mut header = vec!["cycles"];
    header.extend(lines.iter().map(String::as_str));
    out += &crate::text_table::aligned(&header, &rows);
    let flow = fig3_point(r, "flow", TARGET_COST);
    for line in lines
        .iter()
        .filter(|l| l.starts_with("spray") && !l.contains("no reorder"))
    {
        if let (Some(o), Some(f)) = (fig3_point(r, line, TARGET_COST), flow) {
            let x = o.iperf.received_gbps / f.iperf.received_gbps.max(1e-9);
            out += &format!(
                "target: {line} >= {SPRAY_OVER_FLOW_FIG3}x flow at {TARGET_COST} cycles: \
                 {x:.2}x, {}; receiver out of order: {}, {} (weir released {} out of order)\n",
                verdict(x >= SPRAY_OVER_FLOW_FIG3),
                o.iperf.receiver_out_of_order,
                verdict(o.iperf.receiver_out_of_order == 0),
                o.reordering.out_of_order
            );
        }
    }
    out
}

/// Seed 003's mixes as a table.
pub fn tbtd(r: &Report) -> String {
    let cost = r.plan.tbtd_cost;
    let (flows, s) = r.plan.dominant;
    let mut out = format!(
        "\nSeed 003: 64-byte TCP frames at {cost} cycles a packet, received Mpps (released out \
         of order by weir; the CPUs the workers had); dominant: {flows} flows, Zipf s = {s}; \
         backbone: {} flows round robin\n",
        r.plan.backbone_flows
    );
    let mut rows = Vec::new();
    let mut targets = String::new();
    for traffic in ["dominant flow", "backbone"] {
        let get = |m| point(&r.tbtd, traffic, m, cost);
        let cell = |p: Option<&RatePoint>| {
            p.map_or("-".into(), |p| {
                format!(
                    "{} ({}; {:.2})",
                    mpps(p.received_pps),
                    p.reordering.out_of_order,
                    p.workers_cpu
                )
            })
        };
        let rate = |m| get(m).map(|p| p.received_pps);
        rows.push(vec![
            traffic.to_string(),
            cell(get(Mode::Flow)),
            cell(get(Mode::Spray)),
            cell(get(Mode::Adaptive)),
            times(ratio(rate(Mode::Adaptive), rate(Mode::Flow))),
            times(ratio(rate(Mode::Adaptive), rate(Mode::Spray))),
        ]);
        let (against, within) = if traffic == "backbone" {
            (Mode::Flow, 0.05)
        } else {
            (Mode::Spray, 0.10)
        };
        if let Some(x) = ratio(rate(Mode::Adaptive), rate(against)) {
            targets += &format!(
                "target: adaptive within {:.0}% of {against} on the {traffic} mix: {:+.1}%, {}\n",
                within * 100.0,
                (x - 1.0) * 100.0,
                verdict(x >= 1.0 - within)
            );
        }
    }
    out += &crate::text_table::aligned(
        &[
            "mix",
            "flow",
            "spray",
            "adaptive",
            "adaptive/flow",
            "adaptive/spray",
        ],
        &rows,
    );
    out + &targets
}

const MODES: [(Mode, usize); 3] = [(Mode::Flow, 0), (Mode::Spray, 1), (Mode::Adaptive, 2)];

/// The SVGs of the figures that ran, by file name.
pub fn svgs(r: &Report) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let subtitle = format!("weir-lab cores: 2 workers, TSC {:.2} GHz", r.tsc_hz / 1e9);
    let x = || Axis::new("cycles added per packet").from_zero();
    if !r.fig2.is_empty() {
        let series = MODES
            .iter()
            .map(|&(m, color)| Series {
                name: m.to_string(),
                style: Style::solid(color),
                points: r
                    .fig2
                    .iter()
                    .filter(|p| p.setting.mode == m)
                    .map(|p| Point::new(p.setting.cost_cycles as f64, p.received_pps / 1e6))
                    .collect(),
            })
            .collect();
        out.push((
            "cores-fig2.svg",
            figure(
                "Seed 001 Fig. 2: one 5-tuple, 64-byte frames",
                &subtitle,
                Panel::Lines(Lines {
                    title: String::new(),
                    x: x(),
                    y: Axis::new("received Mpps").from_zero(),
                    series,
                }),
            )?,
        ));
    }
    if !r.fig3.is_empty() {
        let series = fig3_lines(r)
            .into_iter()
            .enumerate()
            .map(|(i, name)| Series {
                style: if name.contains("no reorder") {
                    Style::dashed(1)
                } else {
                    Style::solid(i)
                },
                points: r
                    .fig3
                    .iter()
                    .filter(|p| p.setting.name() == name)
                    .map(|p| Point::new(p.setting.cost_cycles as f64, p.iperf.received_gbps))
                    .collect(),
                name,
            })
            .collect();
        out.push((
            "cores-fig3.svg",
            figure(
                "Seed 001 Fig. 3: one iperf3 TCP flow through a nat VIP",
                &subtitle,
                Panel::Lines(Lines {
                    title: String::new(),
                    x: x(),
                    y: Axis::new("Gbit/s").from_zero(),
                    series,
                }),
            )?,
        ));
    }
    if !r.tbtd.is_empty() {
        let panels = ["dominant flow", "backbone"]
            .iter()
            .map(|&traffic| {
                Panel::Bars(Bars {
                    title: traffic.into(),
                    y: Axis::new("received Mpps"),
                    bars: MODES
                        .iter()
                        .filter_map(|&(m, color)| {
                            point(&r.tbtd, traffic, m, r.plan.tbtd_cost).map(|p| Bar {
                                label: m.to_string(),
                                value: p.received_pps / 1e6,
                                err: None,
                                style: Style::solid(color),
                            })
                        })
                        .collect(),
                })
            })
            .collect();
        let fig = Figure {
            title: format!("Seed 003: {} cycles a packet", r.plan.tbtd_cost),
            subtitle: Some(subtitle.clone()),
            panels,
            columns: 2,
            size: (900, 420),
        };
        out.push((
            "cores-tbtd.svg",
            fig.svg().map_err(|e| anyhow!("drawing: {e}"))?,
        ));
    }
    Ok(out.into_iter().map(|(n, s)| (n.to_string(), s)).collect())
}

fn figure(title: &str, subtitle: &str, panel: Panel) -> Result<String> {
    Figure {
        title: title.into(),
        subtitle: Some(subtitle.into()),
        panels: vec![panel],
        columns: 1,
        size: (820, 480),
    }
    .svg()
    .map_err(|e| anyhow!("drawing {title}: {e}"))
}
