//! AWFD, the Spotlight dispatcher, in one place: `table.rs` builds the
//! two-stage priority-class table the XDP data plane reads (the layout of
//! `awfd_select()` in `bpf/lib/dispatch.h`), and `dispatcher.rs` runs AWFD(m)
//! as a [`Dispatcher`](super::Dispatcher) over that same table, so the
//! controller, the simulator and the data plane pick the same DIP for the
//! same flow.

mod dispatcher;
mod table;

pub use self::dispatcher::{table_weights, AwfdDispatcher, DEFAULT_M};
pub use self::table::{weights_from_capacity, AwfdTable, DipId, PriorityClass, TableError};
