//! What a refused `weir serve` must not leave behind: an XDP program on an
//! interface, or pinned state.

use weir_dataplane::attach::attached_prog_id;
use weir_dataplane::iface::Iface;
use weir_lab::daemon::Daemon;
use weir_lab::netns::enter;

/// How many of `ifaces` in namespace `ns` have an XDP program attached.
pub fn attached_programs(ns: &str, ifaces: &[&str]) -> usize {
    let ns = ns.to_string();
    let ifaces: Vec<String> = ifaces.iter().map(|i| i.to_string()).collect();
    std::thread::spawn(move || {
        enter(&ns).unwrap();
        ifaces
            .iter()
            .filter_map(|i| Iface::by_name(i).ok())
            .filter_map(|i| attached_prog_id(i.ifindex))
            .count()
    })
    .join()
    .unwrap()
}

/// No XDP program on weir's `ifaces` in namespace `ns` (the lab's own
/// pass program sits on the backends' ends, not on these), and nothing
/// pinned in `d`'s pin directory. `what` names the case in the message.
pub fn assert_nothing_left(d: &Daemon, ns: &str, ifaces: &[&str], what: &str) {
    assert_eq!(
        attached_programs(ns, ifaces),
        0,
        "{what}: a program stayed attached"
    );
    assert!(
        !d.pin_dir.exists() || std::fs::read_dir(&d.pin_dir).unwrap().next().is_none(),
        "{what}: state was pinned in {}",
        d.pin_dir.display()
    );
}
