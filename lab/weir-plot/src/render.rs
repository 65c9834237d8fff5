//! Drawing a [`Figure`] with plotters' SVG backend: the title strip, a grid
//! of panels, and the legend (right of a single panel, under a grid).

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::figure::{Axis, Bars, Figure, Lines, Panel, Scale, Style};
use crate::ticks;

/// Matplotlib's "tab10": distinguishable, and readable on white.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];
const GRID: RGBColor = RGBColor(0xdd, 0xdd, 0xdd);
const SUBTLE: RGBColor = RGBColor(0x55, 0x55, 0x55);
const FONT: &str = "sans-serif";
/// Smallest text drawn, in pixels; tick labels shrink to it before they
/// would overlap.
pub const MIN_FONT: u32 = 11;

/// A figure that could not be drawn (plotters' layout or backend error).
#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "drawing a figure: {}", self.0)
    }
}

impl std::error::Error for Error {}

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for Error {
    fn from(e: DrawingAreaErrorKind<E>) -> Error {
        Error(e.to_string())
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Result<T> = std::result::Result<T, Error>;

fn color(style: Style) -> RGBColor {
    PALETTE[style.color % PALETTE.len()]
}

/// The width plotters' estimate gives `text` at `size` px (it is all an SVG
/// renderer can know before a viewer picks the font).
fn text_width(text: &str, size: u32) -> u32 {
    (text.chars().count() as f64 * f64::from(size) * 0.6).ceil() as u32
}

impl Figure {
    /// The figure as a standalone SVG document.
    pub fn svg(&self) -> Result<String> {
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, self.size).into_drawing_area();
            root.fill(&WHITE)?;
            let body = self.draw_title(&root)?;
            let legend = legend_entries(&self.panels);
            let grid = if legend.is_empty() {
                body
            } else if self.panels.len() == 1 {
                let width = legend
                    .iter()
                    .map(|(name, _)| text_width(name, 13) + 56)
                    .max()
                    .unwrap_or(0)
                    .clamp(120, body.dim_in_pixel().0 / 3);
                let (chart, side) = body.split_horizontally(body.dim_in_pixel().0 - width);
                draw_legend_column(&side, &legend)?;
                chart
            } else {
                let rows = legend_rows(&legend, body.dim_in_pixel().0);
                let height = 26 * rows.len() as u32 + 8;
                let (grid, bottom) = body.split_vertically(body.dim_in_pixel().1 - height);
                draw_legend_rows(&bottom, &legend, &rows)?;
                grid
            };
            let columns = self.columns.clamp(1, self.panels.len().max(1));
            let rows = self.panels.len().div_ceil(columns).max(1);
            for (panel, area) in self
                .panels
                .iter()
                .zip(grid.split_evenly((rows, columns)).iter())
            {
                match panel {
                    Panel::Lines(p) => draw_lines(area, p)?,
                    Panel::Bars(p) => draw_bars(area, p)?,
                }
            }
            root.present()?;
        }
        Ok(out)
    }

    /// Draws the title (and subtitle); returns the area under them.
    fn draw_title<'a>(&self, root: &Area<'a>) -> Result<Area<'a>> {
        let (w, _) = root.dim_in_pixel();
        let height = if self.subtitle.is_some() { 52 } else { 34 };
        let (top, rest) = root.split_vertically(height);
        let centered = Pos::new(HPos::Center, VPos::Center);
        top.draw_text(
            &self.title,
            &font(17).into_text_style(&top).pos(centered),
            (w as i32 / 2, 18),
        )?;
        if let Some(sub) = &self.subtitle {
            top.draw_text(
                sub,
                &font(13).color(&SUBTLE).into_text_style(&top).pos(centered),
                (w as i32 / 2, 40),
            )?;
        }
        Ok(rest)
    }
}

/// One entry per distinct name of the line series, in first-seen order.
fn legend_entries(panels: &[Panel]) -> Vec<(String, Style)> {
    let mut out: Vec<(String, Style)> = Vec::new();
    for p in panels {
        if let Panel::Lines(l) = p {
            for s in &l.series {
                if !s.name.is_empty() && !out.iter().any(|(n, _)| *n == s.name) {
                    out.push((s.name.clone(), s.style));
                }
            }
        }
    }
    out
}

/// The line sample of a legend entry, 36 px wide, from `(x, y)`.
fn draw_key(area: &Area, (x, y): (i32, i32), name: &str, style: Style) -> Result<()> {
    let c = color(style);
    let line = vec![(x, y), (x + 36, y)];
    if style.dashed {
        area.draw(&DashedPathElement::new(line, 6, 4, c.stroke_width(3)))?;
    } else {
        area.draw(&PathElement::new(line, c.stroke_width(3)))?;
    }
    area.draw(&Circle::new((x + 18, y), 3, c.filled()))?;
    area.draw_text(
        name,
        &font(13)
            .into_text_style(area)
            .pos(Pos::new(HPos::Left, VPos::Center)),
        (x + 44, y),
    )?;
    Ok(())
}

fn draw_legend_column(area: &Area, legend: &[(String, Style)]) -> Result<()> {
    for (k, (name, style)) in legend.iter().enumerate() {
        draw_key(area, (8, 60 + 24 * k as i32), name, *style)?;
    }
    Ok(())
}

/// Splits the legend into rows that fit `width`: each row is a list of
/// (entry index, x offset).
fn legend_rows(legend: &[(String, Style)], width: u32) -> Vec<Vec<(usize, i32)>> {
    let mut rows: Vec<Vec<(usize, i32)>> = vec![Vec::new()];
    let mut x = 0;
    for (k, (name, _)) in legend.iter().enumerate() {
        let w = (text_width(name, 13) + 68) as i32;
        let row = rows.last_mut().expect("never empty");
        if x + w > width as i32 - 40 && !row.is_empty() {
            rows.push(Vec::new());
            x = 0;
        }
        rows.last_mut().expect("never empty").push((k, x));
        x += w;
    }
    rows
}

fn draw_legend_rows(
    area: &Area,
    legend: &[(String, Style)],
    rows: &[Vec<(usize, i32)>],
) -> Result<()> {
    let (w, _) = area.dim_in_pixel();
    for (r, row) in rows.iter().enumerate() {
        let used = row
            .last()
            .map_or(0, |&(k, x)| x + (text_width(&legend[k].0, 13) + 44) as i32);
        let left = (w as i32 - used).max(0) / 2;
        for &(k, x) in row {
            let (name, style) = &legend[k];
            draw_key(area, (left + x, 14 + 26 * r as i32), name, *style)?;
        }
    }
    Ok(())
}

/// An axis laid out for drawing: its range in drawing units (log10 of the
/// value on a log axis) and its ticks there. It is plotters' coordinate
/// too, so the ticks drawn are exactly these.
#[derive(Clone)]
struct Layout {
    lo: f64,
    hi: f64,
    ticks: Vec<(f64, String)>,
}

impl Layout {
    /// Lays out `axis` for `values` (in data units; the ones the axis
    /// cannot place are skipped). `pad` widens a range with room to spare
    /// around the data by that share of its span on each side.
    fn new(axis: &Axis, values: impl Iterator<Item = f64>, pad: f64) -> Layout {
        let at: Vec<f64> = values.filter_map(|v| to_axis(axis.scale, v)).collect();
        let span = axis.span.and_then(|(a, b)| {
            let (a, b) = (to_axis(axis.scale, a)?, to_axis(axis.scale, b)?);
            (a < b).then_some((a, b))
        });
        let (mut lo, mut hi) = min_max(at.iter().copied()).unwrap_or((0.0, 1.0));
        if axis.from_zero && axis.scale == Scale::Linear {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if !axis.ticks.is_empty() {
            let ticks: Vec<(f64, String)> = axis
                .ticks
                .iter()
                .filter_map(|(v, l)| to_axis(axis.scale, *v).map(|p| (p, l.clone())))
                .collect();
            if let Some((a, b)) = min_max(ticks.iter().map(|t| t.0).chain(at.iter().copied())) {
                let (a, b) = widen(a, b);
                let room = (b - a) * pad;
                let (lo, hi) = match span {
                    Some((s0, s1)) => (s0.min(a), s1.max(b)),
                    None => (a - room, b + room),
                };
                return Layout { lo, hi, ticks };
            }
        }
        let (a, b) = widen(lo, hi);
        let room = (b - a) * pad;
        let (a, b) = (
            if axis.from_zero && a >= 0.0 {
                a
            } else {
                a - room
            },
            b + room,
        );
        let ticks: Vec<(f64, String)> = match axis.scale {
            Scale::Linear => {
                let t = ticks::linear(a, b, 5);
                let step = ticks::step_of(&t);
                t.into_iter().map(|v| (v, ticks::label(v, step))).collect()
            }
            Scale::Log => ticks::log(a, b)
                .into_iter()
                .map(|e| (e, 10f64.powf(e)))
                .filter(|(_, v)| v.is_finite() && *v > 0.0)
                .map(|(e, v)| (e, ticks::label(v, v.min(1.0))))
                .collect(),
        };
        let (lo, hi) = min_max(ticks.iter().map(|t| t.0)).unwrap_or((a, b));
        let (lo, hi) = match span {
            Some((s0, s1)) => (s0.min(lo), s1.max(hi)),
            None => (lo, hi),
        };
        Layout { lo, hi, ticks }
    }

    /// The label of the tick at `v` (plotters asks by position).
    fn label(&self, v: f64) -> String {
        let near = (self.hi - self.lo).abs() * 1e-9;
        self.ticks
            .iter()
            .find(|t| (t.0 - v).abs() <= near)
            .map(|t| t.1.clone())
            .unwrap_or_default()
    }
}

impl Ranged for Layout {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    /// Linear in drawing units, and never outside the plotting area.
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let share = ((v - self.lo) / (self.hi - self.lo)).clamp(0.0, 1.0);
        let share = if share.is_nan() { 0.0 } else { share };
        limit.0 + (share * f64::from(limit.1 - limit.0)).round() as i32
    }

    /// The ticks (grid lines only where they are: no light grid).
    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.iter().map(|t| t.0).collect()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// Where `v` sits on an axis of `scale`, if it can be drawn there at all.
fn to_axis(scale: Scale, v: f64) -> Option<f64> {
    let p = match scale {
        Scale::Linear => v,
        Scale::Log if v > 0.0 => v.log10(),
        Scale::Log => return None,
    };
    // Also keeps 1e308-sized values, whose spans overflow, off the axis.
    (p.is_finite() && p.abs() < 1e150).then_some(p)
}

fn min_max(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((a, b)) => Some((a.min(v), b.max(v))),
    })
}

/// A range of positive width around `[a, b]`.
fn widen(a: f64, b: f64) -> (f64, f64) {
    if b > a {
        (a, b)
    } else {
        let d = (a.abs() * 0.1).max(0.5);
        (a - d, b + d)
    }
}

/// A font whose SVG `font-size` is `px` (plotters writes a size / 1.24).
fn font(px: u32) -> FontDesc<'static> {
    (FONT, f64::from(px) * 1.24).into_font()
}

/// Tick labels for `count` slots of `width` px: 13 px, smaller down to
/// MIN_FONT when the longest would not fit its slot.
fn tick_font_for(labels: impl Iterator<Item = usize>, count: usize, width: u32) -> u32 {
    let longest = labels.max().unwrap_or(0).max(1) as f64;
    let slot = f64::from(width) / count.max(1) as f64;
    ((slot * 0.9 / (longest * 0.6)).floor() as u32).clamp(MIN_FONT, 13)
}

/// A chart builder with the panel's caption, if it has one.
fn builder<'a, 'b>(area: &'a Area<'b>, title: &str) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(area);
    b.margin(12);
    if !title.is_empty() {
        b.caption(title, font(14));
    }
    b
}

fn draw_lines(area: &Area, p: &Lines) -> Result<()> {
    let x = Layout::new(
        &p.x,
        p.series.iter().flat_map(|s| s.points.iter().map(|q| q.x)),
        0.04,
    );
    let y = Layout::new(
        &p.y,
        p.series.iter().flat_map(|s| {
            s.points.iter().flat_map(|q| {
                let e = q.err.filter(|e| e.is_finite()).unwrap_or(0.0);
                [q.y - e, q.y + e]
            })
        }),
        0.04,
    );
    let (w, _) = area.dim_in_pixel();
    let x_font = tick_font_for(
        x.ticks.iter().map(|t| t.1.chars().count()),
        x.ticks.len(),
        w.saturating_sub(90),
    );
    let mut chart = builder(area, &p.title)
        .x_label_area_size(48)
        .y_label_area_size(66)
        .build_cartesian_2d(x.clone(), y.clone())?;
    chart
        .configure_mesh()
        .x_desc(p.x.label.as_str())
        .y_desc(p.y.label.as_str())
        .x_label_formatter(&|v| x.label(*v))
        .y_label_formatter(&|v| y.label(*v))
        .x_label_style(font(x_font))
        .y_label_style(font(13))
        .axis_desc_style(font(14))
        .bold_line_style(GRID)
        .light_line_style(WHITE)
        .draw()?;
    for s in &p.series {
        let c = color(s.style);
        let pts: Vec<(f64, f64, Option<f64>)> = s
            .points
            .iter()
            .filter_map(|q| {
                let px = to_axis(p.x.scale, q.x)?;
                let py = to_axis(p.y.scale, q.y)?;
                Some((px, py, q.err.filter(|e| e.is_finite() && *e > 0.0)))
            })
            .collect();
        let line = pts.iter().map(|&(a, b, _)| (a, b));
        if s.style.dashed {
            chart.draw_series(DashedLineSeries::new(line, 8, 5, c.stroke_width(2)))?;
        } else {
            chart.draw_series(LineSeries::new(line, c.stroke_width(2)))?;
        }
        chart.draw_series(
            pts.iter()
                .map(|&(a, b, _)| Circle::new((a, b), 3, c.filled())),
        )?;
        if p.y.scale == Scale::Linear {
            let cap = (x.hi - x.lo) * 0.008;
            for &(a, b, e) in &pts {
                if let Some(e) = e {
                    whisker(&mut chart, a, b, e, cap)?;
                }
            }
        }
    }
    Ok(())
}

fn draw_bars(area: &Area, p: &Bars) -> Result<()> {
    let n = p.bars.len().max(1);
    let y_axis = Axis {
        from_zero: true,
        scale: Scale::Linear,
        ..p.y.clone()
    };
    let y = Layout::new(
        &y_axis,
        p.bars.iter().flat_map(|b| {
            let e = b.err.filter(|e| e.is_finite()).unwrap_or(0.0);
            [b.value - e, b.value + e]
        }),
        0.04,
    );
    let x = Layout {
        lo: 0.0,
        hi: n as f64,
        ticks: p
            .bars
            .iter()
            .enumerate()
            .map(|(k, b)| (k as f64 + 0.5, b.label.clone()))
            .collect(),
    };
    let (w, _) = area.dim_in_pixel();
    let x_font = tick_font_for(
        p.bars.iter().map(|b| b.label.chars().count()),
        n,
        w.saturating_sub(90),
    );
    let mut chart = builder(area, &p.title)
        .x_label_area_size(36)
        .y_label_area_size(66)
        .build_cartesian_2d(x.clone(), y.clone())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(p.y.label.as_str())
        .x_label_formatter(&|v| x.label(*v))
        .y_label_formatter(&|v| y.label(*v))
        .x_label_style(font(x_font))
        .y_label_style(font(13))
        .axis_desc_style(font(14))
        .bold_line_style(GRID)
        .light_line_style(WHITE)
        .draw()?;
    let drawable = |v: f64| v.is_finite() && v.abs() < 1e150;
    let drawn = p.bars.iter().enumerate().filter(|(_, b)| drawable(b.value));
    chart.draw_series(drawn.clone().map(|(k, b)| {
        let k = k as f64;
        Rectangle::new(
            [(k + 0.2, 0.0), (k + 0.8, b.value)],
            color(b.style).filled(),
        )
    }))?;
    for (k, b) in drawn {
        if let Some(e) = b.err.filter(|e| drawable(*e) && *e > 0.0) {
            whisker(&mut chart, k as f64 + 0.5, b.value, e, 0.06)?;
        }
    }
    Ok(())
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Layout, Layout>>;

/// A standard-error whisker from y - e to y + e at x, with caps `cap` wide
/// on each side (in x's units).
fn whisker(chart: &mut Chart, x: f64, y: f64, e: f64, cap: f64) -> Result<()> {
    let style = BLACK.stroke_width(1);
    chart.draw_series([
        PathElement::new(vec![(x, y - e), (x, y + e)], style),
        PathElement::new(vec![(x - cap, y - e), (x + cap, y - e)], style),
        PathElement::new(vec![(x - cap, y + e), (x + cap, y + e)], style),
    ])?;
    Ok(())
}
