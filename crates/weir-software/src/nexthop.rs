//! Next hops of DIPs for the software tier: the resolver `weir serve` also
//! uses for the XDP data plane (weir_dataplane::nexthop). An unresolved DIP
//! is primed (a TCP connect makes the kernel resolve its neighbour) and
//! retried on the next refresh.

pub use weir_dataplane::nexthop::{resolve, NextHop};
