//! Hand-written SVG line charts (no plotting dependency).

use std::fmt::Write;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

/// A line chart with a legend on the right.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    /// Tick positions and labels on the x axis.
    pub x_ticks: Vec<(f64, String)>,
    pub series: Vec<Series>,
}

const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Chart {
    pub fn render(&self) -> String {
        let (w, h) = (760.0, 460.0);
        let (l, r, t, b) = (72.0, 190.0, 44.0, 62.0);
        let pw = w - l - r;
        let ph = h - t - b;
        let fx = |x: f64| if self.log_x { x.log10() } else { x };
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| fx(p.0)))
            .chain(self.x_ticks.iter().map(|t| fx(t.0)));
        let (mut x0, mut x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        if !x0.is_finite() || x1 <= x0 {
            x0 -= 1.0;
            x1 += 1.0;
        }
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1));
        let (ymin, ymax) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
            (a.min(y), b.max(y))
        });
        let (ymin, ymax) = if ymin.is_finite() {
            (ymin, ymax)
        } else {
            (0.0, 1.0)
        };
        let step = if ymax - ymin > 0.4 {
            0.1
        } else if ymax - ymin > 0.1 {
            0.05
        } else {
            0.02
        };
        let y0 = ((ymin - step * 0.3) / step).floor() * step;
        let y1 = ((ymax + step * 0.3) / step).ceil() * step;
        let px = |x: f64| l + (fx(x) - x0) / (x1 - x0) * pw;
        let py = |y: f64| t + (1.0 - (y - y0) / (y1 - y0)) * ph;

        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
            l + pw / 2.0,
            esc(&self.title)
        );
        // Grid and y ticks.
        let mut y = y0;
        while y <= y1 + step * 0.01 {
            let yy = py(y);
            let _ = writeln!(
                s,
                r##"<line x1="{l}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{y:.2}</text>"##,
                l + pw,
                l - 6.0,
                yy + 4.0
            );
            y += step;
        }
        for (x, label) in &self.x_ticks {
            let xx = px(*x);
            let _ = writeln!(
                s,
                r##"<line x1="{xx:.1}" y1="{t}" x2="{xx:.1}" y2="{:.1}" stroke="#f0f0f0"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                t + ph,
                t + ph + 18.0,
                esc(label)
            );
        }
        let _ = writeln!(
            s,
            r#"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            l + pw / 2.0,
            h - 16.0,
            esc(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
            t + ph / 2.0,
            t + ph / 2.0,
            esc(&self.y_label)
        );
        for (k, series) in self.series.iter().enumerate() {
            let c = PALETTE[k % PALETTE.len()];
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let pts: Vec<String> = series
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
                pts.join(" ")
            );
            for &(x, y) in &series.points {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"><title>{}: {y:.4}</title></circle>"#,
                    px(x),
                    py(y),
                    esc(&series.name)
                );
            }
            let ly = t + 14.0 + 20.0 * k as f64;
            let lx = l + pw + 16.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"{dash}/><text x="{}" y="{:.1}">{}</text>"#,
                lx + 24.0,
                lx + 30.0,
                ly + 4.0,
                esc(&series.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_well_formed_svg() {
        let c = Chart {
            title: "a < b".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: true,
            x_ticks: vec![(1.0, "1".into()), (1000.0, "1000".into())],
            series: vec![
                Series {
                    name: "one".into(),
                    points: vec![(1.0, 0.8), (10.0, 0.9), (1000.0, 0.95)],
                    dashed: false,
                },
                Series {
                    name: "two & more".into(),
                    points: vec![(1.0, 0.7), (1000.0, 0.7)],
                    dashed: true,
                },
            ],
        };
        let s = c.render();
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("a &lt; b") && s.contains("two &amp; more"));
        assert_eq!(s.matches("<polyline").count(), 2);
    }
}
