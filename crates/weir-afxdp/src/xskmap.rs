//! Registering a socket in the XSKMAP its steering program redirects to.
//! The kernel takes the socket out of every map when the socket closes, so
//! there is no deregistration to forget.

use libbpf_rs::{MapCore, MapFlags, MapType};

use crate::error::{Error, Result};
use crate::socket::Socket;

impl Socket {
    /// Puts this socket in `map` at the index of its queue, the convention
    /// of a program that redirects by `ctx->rx_queue_index`.
    pub fn register(&self, map: &impl MapCore) -> Result<()> {
        let fail = |reason: String| Error::XskMap {
            iface: self.iface.name.clone(),
            queue: self.queue,
            map: map.name().to_string_lossy().into_owned(),
            reason,
        };
        if map.map_type() != MapType::Xskmap {
            return Err(fail(format!(
                "it is a {:?} map, not an XSKMAP",
                map.map_type()
            )));
        }
        if self.queue >= map.max_entries() {
            return Err(fail(format!(
                "it has {} slots, too few for queue {}: size it to the interface's queues",
                map.max_entries(),
                self.queue
            )));
        }
        map.update(
            &self.queue.to_ne_bytes(),
            &self.fd().to_ne_bytes(),
            MapFlags::ANY,
        )
        .map_err(|e| fail(e.to_string()))
    }
}
