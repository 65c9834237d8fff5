//! The daemon's log: one line per message on stderr, `weir: <message>`
//! (a warning carries its own `warning:` in the text), whatever the level.

use log::{LevelFilter, Log, Metadata, Record};

struct StderrLines;

impl Log for StderrLines {
    fn enabled(&self, _: &Metadata) -> bool {
        true
    }

    fn log(&self, record: &Record) {
        eprintln!("weir: {}", record.args());
    }

    fn flush(&self) {}
}

static LOGGER: StderrLines = StderrLines;

/// Routes every `log::info!`/`warn!`/`error!` of the process to stderr.
pub fn init() {
    // Only fails when a logger is set already, which is then the one in use.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(LevelFilter::Info);
}
