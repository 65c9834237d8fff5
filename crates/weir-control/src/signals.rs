//! Signals for daemons: block them in every thread, then take them one at a
//! time in one place (no async signal handlers). The calls are weir-sys's.

pub use weir_sys::SignalSet;
