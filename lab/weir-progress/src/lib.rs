//! weir-progress: how weir's long-running commands (labs, benchmarks, the
//! simulator's sweeps) report while they run.
//!
//! A [`Progress`] is a bar over a known number of steps on stderr,
//! drawn by indicatif only when stderr is a terminal, so logs and pipes get
//! no control characters. Two kinds of text go around it and are printed
//! whether or not a bar is drawn: [`Progress::note`] for lines worth keeping
//! (a run's result, a warning), and [`Progress::finish`]'s one-line summary
//! with the elapsed time. Results proper (tables, JSON) go to stdout as
//! before, and never through here.

use std::fmt::Display;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress of one command: its name prefixes the bar and the summary.
pub struct Progress {
    bar: ProgressBar,
    name: String,
    started: Instant,
    quiet: bool,
}

impl Progress {
    /// A bar over `total` steps.
    pub fn bar(name: &str, total: u64) -> Progress {
        let style = ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} (eta {eta}) {wide_msg}",
        )
        .expect("a valid template")
        .progress_chars("=> ");
        Progress::new(name, ProgressBar::new(total).with_style(style))
    }

    fn new(name: &str, bar: ProgressBar) -> Progress {
        // Hidden when stderr is not a terminal (indicatif checks).
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.set_prefix(name.to_string());
        Progress {
            bar,
            name: name.to_string(),
            started: Instant::now(),
            quiet: false,
        }
    }

    /// Shows nothing at all, notes and summary included (`--quiet`).
    pub fn quiet(mut self, quiet: bool) -> Progress {
        if quiet {
            self.bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        self.quiet = quiet;
        self
    }

    /// What is going on now, after the counts (cut to the terminal's width).
    pub fn set_message(&self, msg: impl Display) {
        self.bar.set_message(msg.to_string());
    }

    pub fn inc(&self, steps: u64) {
        self.bar.inc(steps);
    }

    pub fn set_position(&self, pos: u64) {
        self.bar.set_position(pos);
    }

    pub fn set_length(&self, total: u64) {
        self.bar.set_length(total);
    }

    /// Steps done so far.
    pub fn position(&self) -> u64 {
        self.bar.position()
    }

    /// Time since the progress started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// A line that stays: above the bar on a terminal, a plain stderr line
    /// otherwise.
    pub fn note(&self, line: impl Display) {
        if !self.quiet {
            self.bar.suspend(|| eprintln!("{line}"));
        }
    }

    /// Removes the bar and prints `name: summary (elapsed)`.
    pub fn finish(self, summary: impl Display) {
        self.bar.finish_and_clear();
        if !self.quiet {
            eprintln!(
                "{}: {summary} ({})",
                self.name,
                duration(self.started.elapsed())
            );
        }
    }
}

impl Drop for Progress {
    /// An error or a panic leaves no half-drawn bar behind.
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

/// "850 ms", "12.3 s", "7m35s".
pub fn duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else {
        let s = s.round() as u64;
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_every_scale() {
        assert_eq!(duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(duration(Duration::from_millis(12_340)), "12.3 s");
        assert_eq!(duration(Duration::from_secs(455)), "7m35s");
    }

    #[test]
    fn counts_steps_drawn_or_not() {
        let p = Progress::bar("test", 10);
        p.inc(3);
        p.set_message("three");
        assert_eq!(p.position(), 3);
        p.set_length(20);
        p.set_position(20);
        assert_eq!(p.position(), 20);
        p.finish("done");
    }
}
