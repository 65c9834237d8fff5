//! weir-plot: the SVG figures of weir's simulator, labs and benchmarks.
//!
//! A [`Figure`] is plain data (panels of [`Lines`] or [`Bars`], their
//! [`Axis`]es and [`Series`]); [`Figure::svg`] draws it with plotters' SVG
//! backend. Callers say what to show; this crate owns how it looks (palette,
//! fonts, ticks, legend), so the simulator's and the labs' figures read
//! alike. Values that cannot be placed on an axis (NaN, infinities, x <= 0 on
//! a log axis) are left out, never drawn at an infinite coordinate.

mod figure;
mod render;
mod ticks;

pub use figure::{Axis, Bar, Bars, Figure, Lines, Panel, Point, Scale, Series, Style};
pub use render::{Error, MIN_FONT};
