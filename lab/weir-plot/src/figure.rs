//! What a figure shows: panels of line or bar charts, their axes and
//! series, in plain data. [`Figure::svg`](crate::Figure::svg) draws it.
//!
//! Values that cannot be drawn (NaN, infinities, and x <= 0 on a log axis)
//! are left out of the drawing rather than dragging an axis to infinity; a
//! value with no position, such as m = infinity, gets a finite stand-in x and
//! its own tick label from the caller.

/// The figure: a title, panels in a grid (filled row by row), and one legend
/// for every named line series, on the right of a single panel or under a
/// grid.
#[derive(Debug, Clone)]
pub struct Figure {
    pub title: String,
    /// A smaller line under the title (the experiment's parameters).
    pub subtitle: Option<String>,
    pub panels: Vec<Panel>,
    /// Panels per row (at least 1).
    pub columns: usize,
    /// Width and height in pixels.
    pub size: (u32, u32),
}

/// One chart of a figure.
#[derive(Debug, Clone)]
pub enum Panel {
    Lines(Lines),
    Bars(Bars),
}

/// A line chart: series of points over two axes.
#[derive(Debug, Clone)]
pub struct Lines {
    /// The panel's own caption; empty for none.
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
}

/// A bar chart: one bar per category, with an optional error whisker.
#[derive(Debug, Clone)]
pub struct Bars {
    pub title: String,
    /// The value axis. Bars start at zero, so `from_zero` is implied.
    pub y: Axis,
    pub bars: Vec<Bar>,
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend's entry; series with the same name share one entry.
    pub name: String,
    pub style: Style,
    pub points: Vec<Point>,
}

/// A point of a series, with an optional symmetric error (drawn as a
/// whisker from y - err to y + err).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub err: Option<f64>,
}

impl Point {
    pub fn new(x: f64, y: f64) -> Point {
        Point { x, y, err: None }
    }

    pub fn with_err(x: f64, y: f64, err: f64) -> Point {
        Point {
            x,
            y,
            err: Some(err),
        }
    }
}

/// One bar of a bar chart.
#[derive(Debug, Clone)]
pub struct Bar {
    /// The category, written under the bar.
    pub label: String,
    pub value: f64,
    pub err: Option<f64>,
    pub style: Style,
}

/// How a series or bar is drawn: a palette color (by index, so one policy
/// keeps its color across panels) and, for lines, dashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Style {
    pub color: usize,
    /// Dashed lines mark values that do not vary along x (a baseline).
    pub dashed: bool,
}

impl Style {
    pub fn solid(color: usize) -> Style {
        Style {
            color,
            dashed: false,
        }
    }

    pub fn dashed(color: usize) -> Style {
        Style {
            color,
            dashed: true,
        }
    }
}

/// An axis: its label, scale and ticks.
#[derive(Debug, Clone, Default)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
    /// Ticks at these values with these labels; the range then covers them
    /// all. Empty: evenly spaced ticks over the data, chosen automatically.
    pub ticks: Vec<(f64, String)>,
    /// Start a linear axis at zero even if every value is above it.
    pub from_zero: bool,
    /// The least the axis spans, in data units (it still grows to cover
    /// the data and the ticks); no padding is added to it.
    pub span: Option<(f64, f64)>,
}

impl Axis {
    pub fn new(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            ..Axis::default()
        }
    }

    pub fn log(mut self) -> Axis {
        self.scale = Scale::Log;
        self
    }

    pub fn from_zero(mut self) -> Axis {
        self.from_zero = true;
        self
    }

    pub fn ticks(mut self, ticks: Vec<(f64, String)>) -> Axis {
        self.ticks = ticks;
        self
    }

    pub fn span(mut self, lo: f64, hi: f64) -> Axis {
        self.span = Some((lo, hi));
        self
    }
}

/// Linear, or base-10 logarithmic (positive values only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scale {
    #[default]
    Linear,
    Log,
}
