//! Watching the client's link for frames that carry a backend's own
//! address: in nat mode every reply must reach the client from the VIP, so
//! one from 10.77.I.2 (I >= 1) is a reply weir let through untranslated.
//!
//! A packet socket in the client's namespace with a classic BPF filter that
//! keeps only IPv4 frames whose source is 10.77.I.2 with I != 0 (the client
//! itself is 10.77.0.2), so the kernel hands the socket nothing else however
//! busy the link is.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use weir_sys::PacketSocket;

use crate::netns::enter;

/// The running watch; stops when dropped.
pub struct LeakWatch {
    seen: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LeakWatch {
    /// Starts counting, in namespace `ns`, frames received on `iface` whose
    /// IPv4 source is a lab backend's address.
    pub fn start(ns: &str, iface: &str) -> Result<LeakWatch> {
        let (ns, iface) = (ns.to_string(), iface.to_string());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let seen = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let sock = enter(&ns).and_then(|_| open(&iface));
            let sock = match sock {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let mut buf = [0u8; 2048];
            while !stop2.load(Ordering::Relaxed) {
                // An error is the receive timeout: look at the stop flag.
                if matches!(sock.recv(&mut buf), Ok(n) if n > 0) {
                    seen2.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        ready_rx
            .recv()
            .context("leak watch thread ended before it was ready")??;
        Ok(LeakWatch {
            seen,
            stop,
            thread: Some(thread),
        })
    }

    /// Frames from a backend's address seen so far.
    pub fn count(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }
}

impl Drop for LeakWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Source address 10.77.I.2, I != 0, of an IPv4 frame: the filter's program.
fn filter() -> [libc::sock_filter; 8] {
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    const LD_H_ABS: u32 = libc::BPF_LD | libc::BPF_H | libc::BPF_ABS;
    const LD_W_ABS: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    const JEQ_K: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    const AND_K: u32 = libc::BPF_ALU | libc::BPF_AND | libc::BPF_K;
    const RET_K: u32 = libc::BPF_RET | libc::BPF_K;
    // Jump offsets count from the next instruction; 7 is "reject".
    [
        op(LD_H_ABS, 0, 0, 12),       // 0: EtherType
        op(JEQ_K, 0, 5, 0x0800),      // 1: IPv4, else reject
        op(LD_W_ABS, 0, 0, 26),       // 2: source address
        op(JEQ_K, 3, 0, 0x0a4d_0002), // 3: the client itself: reject
        op(AND_K, 0, 0, 0xffff_00ff), // 4
        op(JEQ_K, 0, 1, 0x0a4d_0002), // 5: 10.77.*.2, else reject
        op(RET_K, 0, 0, 0xffff),      // 6: keep
        op(RET_K, 0, 0, 0),           // 7: reject
    ]
}

fn open(iface: &str) -> Result<PacketSocket> {
    let ifindex = weir_dataplane::iface::Iface::by_name(iface)?.ifindex;
    let sock = PacketSocket::open().context("packet socket")?;
    sock.attach_filter(&filter())
        .context("attaching the leak filter")?;
    // The thread looks at its stop flag at least this often.
    sock.set_receive_timeout(Duration::from_millis(100))
        .context("setting the receive timeout")?;
    sock.bind(ifindex)
        .with_context(|| format!("binding to {iface}"))?;
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the filter program on a frame, as the kernel's classic BPF does.
    fn run(prog: &[libc::sock_filter], frame: &[u8]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            let class = u32::from(i.code) & 0x07;
            match class {
                c if c == libc::BPF_LD => {
                    let k = i.k as usize;
                    a = if u32::from(i.code) & 0x18 == libc::BPF_H {
                        u32::from(u16::from_be_bytes([frame[k], frame[k + 1]]))
                    } else {
                        u32::from_be_bytes(frame[k..k + 4].try_into().unwrap())
                    };
                }
                c if c == libc::BPF_ALU => a &= i.k,
                c if c == libc::BPF_JMP => {
                    pc += usize::from(if a == i.k { i.jt } else { i.jf });
                }
                _ => return i.k,
            }
            pc += 1;
        }
    }

    fn frame(ethertype: u16, src: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0u8; 34];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f[26..30].copy_from_slice(&src);
        f
    }

    #[test]
    fn keeps_only_backend_sources() {
        let p = filter();
        assert_ne!(run(&p, &frame(0x0800, [10, 77, 1, 2])), 0);
        assert_ne!(run(&p, &frame(0x0800, [10, 77, 50, 2])), 0);
        assert_eq!(run(&p, &frame(0x0800, [10, 77, 0, 2])), 0, "the client");
        assert_eq!(run(&p, &frame(0x0800, [10, 77, 100, 1])), 0, "a VIP");
        assert_eq!(run(&p, &frame(0x0800, [10, 77, 1, 1])), 0, "the lb");
        assert_eq!(run(&p, &frame(0x86dd, [10, 77, 1, 2])), 0, "not IPv4");
    }
}
