//! Bad input gets one clear error each (run as root): what is wrong, on
//! which interface and queue, and what to do.

mod common;

use anyhow::Result;
use common::{in_netns, VethPair, IF_A};
use libbpf_rs::{MapHandle, MapType};
use weir_afxdp::{Config, Error, Mode, Socket};

fn message(err: &Error) -> String {
    err.to_string()
}

#[test]
fn a_missing_interface_is_named() {
    let err = Socket::new("weir-nope0", 0, &Config::default())
        .err()
        .unwrap();
    assert!(matches!(err, Error::NoInterface(_)), "{err}");
    let msg = message(&err);
    assert!(
        msg.contains("\"weir-nope0\"") && msg.contains("ip link"),
        "{msg}"
    );
}

#[test]
fn a_zero_size_umem_is_refused_before_anything_is_allocated() {
    let config = Config {
        frame_count: 0,
        ..Config::default()
    };
    // Checked before the interface is even looked up.
    let err = Socket::new("weir-nope0", 0, &config).err().unwrap();
    assert!(matches!(err, Error::Config(_)), "{err}");
    assert!(message(&err).contains("frame_count is 0"), "{err}");
}

#[test]
fn a_queue_past_the_interfaces_queues_is_named_with_the_ones_there_are() -> Result<()> {
    let pair = VethPair::new()?;
    let err = in_netns(&pair.ns_a, || {
        Ok(Socket::new(IF_A, 1, &Config::default()).err().unwrap())
    })?;
    assert!(
        matches!(
            err,
            Error::NoQueue {
                queue: 1,
                queues: 1,
                ..
            }
        ),
        "{err}"
    );
    let msg = message(&err);
    assert!(
        msg.contains("xa has no queue 1") && msg.contains("0..=0"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn a_umem_larger_than_memory_is_refused_with_its_size() -> Result<()> {
    let pair = VethPair::new()?;
    let config = Config {
        frame_count: u32::MAX,
        ..Config::default()
    };
    let err = in_netns(&pair.ns_a, || {
        Ok(Socket::new(IF_A, 0, &config).err().unwrap())
    })?;
    assert!(matches!(err, Error::Umem { .. }), "{err}");
    let msg = message(&err);
    assert!(
        msg.contains("16777215 MiB") && msg.contains("more than this machine's memory"),
        "{msg}"
    );
    assert!(msg.contains("lower frame_count or frame_size"), "{msg}");
    Ok(())
}

/// CAP_IPC_LOCK from linux/capability.h.
const CAP_IPC_LOCK: u32 = 14;

/// Drops CAP_IPC_LOCK from the calling thread's effective set (capabilities
/// are per thread; the thread ends with the test).
fn drop_ipc_lock() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a v3 header and two data structs.
    unsafe {
        if libc::syscall(libc::SYS_capget, &header, data.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        data[0].effective &= !(1 << CAP_IPC_LOCK);
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[test]
fn a_umem_over_the_locked_memory_limit_says_to_raise_it() -> Result<()> {
    let pair = VethPair::new()?;
    let err = in_netns(&pair.ns_a, || {
        drop_ipc_lock()?;
        let mut old = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain rlimit calls on valid structs. The limit is the
        // process's: other tests' threads keep CAP_IPC_LOCK, which the
        // kernel's UMEM accounting checks first, so only this one is bound.
        unsafe {
            libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut old);
            let low = libc::rlimit {
                rlim_cur: 64 << 10,
                rlim_max: old.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &low);
        }
        let result = Socket::new(IF_A, 0, &Config::default());
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &old) };
        Ok(result.err().unwrap())
    })?;
    assert!(matches!(err, Error::Umem { .. }), "{err}");
    let msg = message(&err);
    assert!(
        msg.contains("RLIMIT_MEMLOCK") && msg.contains("xa queue 0"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn bind_failures_give_the_likely_cause() -> Result<()> {
    let pair = VethPair::new()?;
    in_netns(&pair.ns_a, || {
        // veth has no zero-copy AF_XDP: forcing it is an error that says so.
        let zc = Config {
            mode: Mode::ZeroCopy,
            ..Config::default()
        };
        let err = Socket::new(IF_A, 0, &zc).err().unwrap();
        assert!(
            matches!(
                err,
                Error::Bind {
                    mode: "zero-copy",
                    ..
                }
            ),
            "{err}"
        );
        assert!(message(&err).contains("no zero-copy"), "{err}");

        // A queue holds one socket: a second one is EBUSY, named as such.
        let first = Socket::new(IF_A, 0, &Config::default())?;
        assert!(!first.zero_copy());
        let err = Socket::new(IF_A, 0, &Config::default()).err().unwrap();
        assert!(matches!(err, Error::Bind { mode: "auto", .. }), "{err}");
        let msg = message(&err);
        assert!(
            msg.contains("xa queue 0") && msg.contains("already has an AF_XDP socket"),
            "{msg}"
        );
        drop(first);
        // The queue is free again once the first socket is gone (the kernel
        // releases it from a workqueue; Socket::new waits that out).
        Socket::new(IF_A, 0, &Config::default())?;
        Ok(())
    })
}

#[test]
fn registering_in_a_map_that_cannot_hold_the_socket_is_refused() -> Result<()> {
    let pair = VethPair::with_queues(2)?;
    in_netns(&pair.ns_a, || {
        let socket = Socket::new(IF_A, 1, &Config::default())?;

        let one_slot = weir_traffic::xsk_redirect::load(1)?;
        let err = socket.register(&one_slot.maps.xsks).err().unwrap();
        assert!(matches!(err, Error::XskMap { queue: 1, .. }), "{err}");
        assert!(
            message(&err).contains("1 slots, too few for queue 1"),
            "{err}"
        );

        let array = MapHandle::create(
            MapType::Array,
            Some("not_xsk"),
            4,
            4,
            2,
            &libbpf_rs::libbpf_sys::bpf_map_create_opts {
                sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
                ..Default::default()
            },
        )?;
        let err = socket.register(&array).err().unwrap();
        let msg = message(&err);
        assert!(
            msg.contains("not_xsk") && msg.contains("not an XSKMAP"),
            "{msg}"
        );

        let two_slots = weir_traffic::xsk_redirect::load(2)?;
        socket.register(&two_slots.maps.xsks)?;
        Ok(())
    })
}
