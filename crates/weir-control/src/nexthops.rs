//! Every live DIP's next hop in its slot (`weir_dip.nh`), so that `weir_lb`
//! forwards with no FIB or interface lookup per packet.
//!
//! A thread resolves each live DIP from the kernel's route and neighbour
//! tables (weir_dataplane::nexthop) and writes the slots whose next hop
//! changed. It runs again on every change of links, addresses, routes or
//! neighbours (netlink, debounced), and every [`REFRESH`] as a safety net
//! (a slot `apply` gave to a new DIP starts unresolved, and no netlink
//! message says so). A DIP that does not resolve (no route by an interface
//! weir holds, no neighbour entry or a failed one) gets its next hop
//! cleared: the data plane then asks the kernel's FIB per packet, as it did
//! before, and the kernel resolves the neighbour. Slots are written under
//! the table lock and only if `apply` did not rewrite them meanwhile.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use weir_abi::*;
use weir_core::flow::words_addr;
use weir_dataplane::maps::Maps;
use weir_dataplane::nexthop::resolve;
use weir_sys::RouteWatch;

/// Resolve everything at least this often, changes or not.
pub const REFRESH: Duration = Duration::from_secs(5);
/// A burst of changes (a link going up brings many) is one refresh.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// How long a wait lasts before the thread looks at its stop flag.
const TICK: Duration = Duration::from_millis(250);

/// The resolver thread; stops when dropped.
pub struct NextHops {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl NextHops {
    /// Starts resolving the DIPs of the maps pinned in `pin_dir`; `ifaces`
    /// are the interfaces weir sends by (name -> ifindex, MAC).
    pub fn start(
        pin_dir: &Path,
        ifaces: HashMap<String, (u32, [u8; 6])>,
        table_lock: Arc<Mutex<()>>,
    ) -> Result<NextHops> {
        let maps = Maps::pinned(pin_dir)?;
        let watch =
            RouteWatch::new().context("subscribing to route and neighbour changes (netlink)")?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("weir-nexthops".into())
            .spawn(move || run(&maps, &watch, &ifaces, &table_lock, &flag))
            .context("starting the next-hop resolver thread")?;
        Ok(NextHops {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for NextHops {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    maps: &Maps,
    watch: &RouteWatch,
    ifaces: &HashMap<String, (u32, [u8; 6])>,
    table_lock: &Mutex<()>,
    stop: &AtomicBool,
) {
    let mut last_error = String::new();
    while !stop.load(Ordering::SeqCst) {
        match refresh(maps, ifaces, table_lock) {
            Ok(_) => last_error.clear(),
            Err(e) => {
                // Said once, not every round.
                let e = format!("{e:#}");
                if e != last_error {
                    log::warn!("next hops: {e}; retrying");
                    last_error = e;
                }
            }
        }
        let due = Instant::now() + REFRESH;
        while !stop.load(Ordering::SeqCst) && Instant::now() < due {
            match watch.wait(TICK) {
                Ok(false) => {}
                Ok(true) => {
                    std::thread::sleep(DEBOUNCE);
                    let _ = watch.wait(Duration::ZERO);
                    break;
                }
                Err(e) => {
                    log::warn!(
                        "next hops: reading netlink changes: {e}; resolving every {REFRESH:?} only"
                    );
                    std::thread::sleep(TICK);
                }
            }
        }
    }
}

/// Resolves every live DIP and writes the slots whose next hop changed;
/// returns how many it wrote. Resolution runs `ip`, so it happens outside
/// the table lock; each write re-reads its slot under the lock and skips a
/// slot that changed meanwhile (the next round resolves it again).
pub fn refresh(
    maps: &Maps,
    ifaces: &HashMap<String, (u32, [u8; 6])>,
    table_lock: &Mutex<()>,
) -> Result<usize> {
    let mut changed = Vec::new();
    for id in 0..maps.dip_slots() {
        let Some(d) = maps.dip(id)? else {
            continue;
        };
        if d.flags & WEIR_DIP_F_LIVE == 0 {
            continue;
        }
        let Some(addr) = words_addr(&d.addr, d.family) else {
            continue;
        };
        let nh = resolve(addr, ifaces)?.map_or_else(weir_next_hop::default, |h| h.abi());
        if nh != d.nh {
            changed.push((id, d, nh));
        }
    }
    let _tables = table_lock.lock().unwrap_or_else(|e| e.into_inner());
    let mut written = 0;
    for (id, seen, nh) in changed {
        let Some(mut now) = maps.dip(id)? else {
            continue;
        };
        if now != seen {
            continue;
        }
        now.nh = nh;
        maps.put_dip(id, &now)?;
        written += 1;
    }
    Ok(written)
}
