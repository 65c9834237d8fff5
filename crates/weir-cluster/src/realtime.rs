//! Real-time priority for the cluster's threads (`[cluster] realtime`):
//! the etcd agent, which applies the leader's tables, and connection sync's
//! sender and receiver. They sleep until etcd, a datagram or an
//! announcement wakes them, and then must run at once: on a busy machine a
//! thread at normal priority waits tens of milliseconds for a CPU, which
//! widens the sync window and delays tables. conntrackd, the sync daemon of
//! Linux's connection tracking, offers the same (its `Scheduler` option).

/// Puts the calling thread at the lowest real-time priority (SCHED_FIFO
/// 1): it runs as soon as it wakes, ahead of every ordinary thread. The
/// kernel still keeps 5% of each second for the others
/// (kernel.sched_rt_runtime_us). Without CAP_SYS_NICE it says so, once,
/// and the thread stays as it is.
pub fn go_realtime(what: &str) {
    if let Err(e) = weir_sys::process::set_realtime(0, 1) {
        eprintln!(
            "weir: cluster: the {what} stays at normal priority ({e}); real-time priority needs \
             CAP_SYS_NICE"
        );
    }
}
