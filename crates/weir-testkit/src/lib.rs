//! What the load balancer's table-driven tests share, so that the software
//! engine (`weir_software_engine::slb`) and the XDP program (`weir_lb`)
//! are tested against one description of the setup:
//!
//! - [`fixture`]: the VIPs, DIPs, MACs and weights both suites load, and
//!   the DIP weir-core predicts for a new flow;
//! - [`frames`]: the frames of that setup (a client's, forwarded to a
//!   DIP, a DIP's reply, the kinds that are not balanced), every one built
//!   with `weir_core::wire`;
//! - [`verify`]: a checksum verifier independent of weir (etherparse) and
//!   a byte diff for assertion messages;
//! - [`stats`]: the names of `enum weir_stat`'s counters;
//! - [`cases`]: cases both suites run (forwarded frames and the entries
//!   they leave, frames passed untouched);
//! - [`cli`]: what every command-line tool must do (`weir`'s and
//!   `weir-lab`'s tests check it alike).
//! - [`quic`]: QUIC long- and short-header packets, built by hand.
//!
//! Nothing here runs or imitates the code under test: an expected output
//! is a second frame built from the rewritten fields, never a patched
//! input.

pub mod cases;
pub mod cli;
pub mod fixture;
pub mod frames;
pub mod quic;
pub mod stats;
pub mod verify;
