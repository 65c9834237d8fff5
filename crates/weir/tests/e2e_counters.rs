//! Counters that add up in the software and hybrid tiers: under a mix of
//! malformed frames, fragments, traffic for no VIP and valid flows, every
//! frame XDP counts as `to_software` is in exactly one socket counter once
//! the traffic stops and the workers drained: received by a worker, or
//! dropped by the kernel on its way to the socket (RX ring full, no frame,
//! invalid descriptor).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use weir_core::csum::checksum;
use weir_lab::daemon::Daemon;
use weir_lab::topology::Lab;

const NAT_VIP: [u8; 4] = [10, 77, 100, 1];
const CLIENT: [u8; 4] = [10, 77, 0, 2];
/// The load balancer's own address: traffic for no VIP.
const LB_ADDR: [u8; 4] = [10, 77, 0, 1];
const ETH_P_ALL: u16 = 0x0003;
/// Rounds of the mix; each round is one frame of every kind.
const ROUNDS: u16 = 600;

fn config(tier: &str) -> String {
    let mut s = format!(
        "[dataplane]\ninterfaces = [\"wc0\", \"wb1\", \"wb2\", \"wb3\"]\nworkers = [1]\n{tier}\n"
    );
    for (name, port, proto) in [("web", 80, "tcp"), ("dns", 5353, "udp")] {
        s += &format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"10.77.100.1\"\nport = {port}\nprotocol = \"{proto}\"\nmode = \"nat\"\n"
        );
        for b in 1..=3 {
            s += &format!("[[vip.dip]]\naddress = \"10.77.{b}.2\"\nweight = 1\n");
        }
    }
    s
}

/// An Ethernet frame carrying an IPv4 packet: `ihl` in 32-bit words,
/// `frag` the flags-and-offset field, `l4` what follows the header.
fn ipv4(
    macs: ([u8; 6], [u8; 6]),
    dst: [u8; 4],
    proto: u8,
    ihl: u8,
    frag: u16,
    l4: &[u8],
) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&macs.1);
    f.extend_from_slice(&macs.0);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = vec![0u8; 20];
    ip[0] = 0x40 | ihl;
    ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    ip[6..8].copy_from_slice(&frag.to_be_bytes());
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&CLIENT);
    ip[16..20].copy_from_slice(&dst);
    let c = checksum(&ip, 0);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(l4);
    f
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&0u16.to_be_bytes()); // no checksum (IPv4 allows it)
    u.extend_from_slice(payload);
    u
}

/// A TCP header with `flags` and no options (checksum left 0: the backend
/// drops it, which is not what is counted here).
fn tcp(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&u32::from(sport).to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    t
}

/// One round of the mix: valid UDP and TCP flows to the VIPs, a truncated
/// TCP header, a bad IHL, a first and a later fragment, a frame cut inside
/// the IPv4 header, and UDP for the load balancer's own address.
fn mix(macs: ([u8; 6], [u8; 6]), round: u16) -> Vec<Vec<u8>> {
    let sport = 10_000 + round;
    let mut cut = ipv4(macs, NAT_VIP, 17, 5, 0, &udp(sport, 5353, b"x"));
    cut.truncate(14 + 12);
    vec![
        ipv4(macs, NAT_VIP, 17, 5, 0, &udp(sport, 5353, b"query")),
        ipv4(macs, NAT_VIP, 6, 5, 0, &tcp(sport, 80, 0x02)),
        ipv4(macs, NAT_VIP, 6, 5, 0, &tcp(sport, 80, 0x10)),
        ipv4(macs, NAT_VIP, 6, 5, 0, &tcp(sport, 80, 0x02)[..8]),
        ipv4(macs, NAT_VIP, 17, 4, 0, &udp(sport, 5353, b"bad ihl")),
        ipv4(macs, NAT_VIP, 17, 5, 0x2000, &udp(sport, 5353, b"first")),
        ipv4(macs, NAT_VIP, 17, 5, 0x0003, b"later fragment"),
        cut,
        ipv4(macs, LB_ADDR, 17, 5, 0, &udp(sport, 9, b"not a VIP")),
    ]
}

/// Sends the mix from the client's end of wc0's veth through a packet
/// socket, in rounds with a pause, so the load stays bounded.
fn send_mix(lab: &Lab) -> Result<usize> {
    let (client, lb) = (lab.client.clone(), lab.lb.clone());
    let lb_mac = std::thread::spawn(move || -> Result<[u8; 6]> {
        weir_lab::netns::enter(&lb)?;
        Ok(weir_dataplane::iface::Iface::by_name("wc0")?.mac)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("reading wc0's MAC panicked"))??;
    std::thread::spawn(move || -> Result<usize> {
        weir_lab::netns::enter(&client)?;
        let eth0 = weir_dataplane::iface::Iface::by_name("eth0")?;
        // SAFETY: plain socket(2); the fd is owned right after.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW,
                i32::from(ETH_P_ALL.to_be()),
            )
        };
        if fd < 0 {
            bail!("packet socket: {}", std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh socket we own.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a zeroed sockaddr_ll is valid; the fields are set below.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_ifindex = eth0.ifindex as i32;
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&lb_mac);
        let mut sent = 0;
        for round in 0..ROUNDS {
            for frame in mix((eth0.mac, lb_mac), round) {
                // SAFETY: sendto with a live buffer and a sized address.
                let n = unsafe {
                    libc::sendto(
                        sock.as_raw_fd(),
                        frame.as_ptr().cast(),
                        frame.len(),
                        0,
                        (&to as *const libc::sockaddr_ll).cast(),
                        std::mem::size_of::<libc::sockaddr_ll>() as u32,
                    )
                };
                if n < 0 {
                    bail!("sending a frame: {}", std::io::Error::last_os_error());
                }
                sent += 1;
            }
            if round % 50 == 49 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(sent)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the sender panicked"))?
}

fn xdp_counter(status: &serde_json::Value, name: &str) -> u64 {
    status["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}: {status}"))
}

/// Over every socket of every worker: (received by the worker, dropped by
/// the kernel on the way to it).
fn socket_sums(d: &Daemon) -> (u64, u64) {
    let workers = weir_control::tier::read_workers(&d.run_dir()).expect("workers.json");
    let mut sums = (0, 0);
    for w in workers.as_array().unwrap() {
        for s in w["sockets"].as_array().unwrap() {
            let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("no {k} in {s}"));
            sums.0 += n("rx_packets");
            sums.1 += n("rx_dropped") + n("rx_ring_full") + n("rx_invalid_descs");
        }
    }
    sums
}

/// XDP's `to_software` since the tier started (from the baseline it
/// recorded) and the sockets' sums, once both stood still for 2 s (the
/// workers report every half second and the file is rewritten every
/// second, so a report lags by up to 1.5 s), or after 15 s.
fn settled(d: &Daemon) -> (u64, (u64, u64)) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = None;
    loop {
        std::thread::sleep(Duration::from_millis(2000));
        let baseline = weir_control::tier::read_baseline(&d.run_dir()).expect("tier.json");
        let to_software = xdp_counter(&d.status_json().unwrap(), "to_software");
        let now = (to_software - baseline.to_software_at_start, socket_sums(d));
        if last == Some(now) || Instant::now() > deadline {
            return now;
        }
        last = Some(now);
    }
}

fn every_steered_frame_is_in_a_socket_counter(tier: &str) {
    let lab = Lab::build(3).expect("building the lab");
    let mut d = Daemon::new(Path::new(env!("CARGO_BIN_EXE_weir")), &lab.lb).unwrap();
    d.write_config(&config(tier)).unwrap();
    d.start().unwrap();
    let sent = send_mix(&lab).expect("sending the mix");
    assert_eq!(sent, ROUNDS as usize * 9);
    // A second daemon finds the pinned state, XDP's counters included,
    // and opens sockets of its own, whose counters start at zero.
    let first = settled(&d);
    assert_eq!(first.0, first.1 .0 + first.1 .1, "first daemon");
    d.stop().unwrap();
    d.start().unwrap();
    send_mix(&lab).expect("sending the mix again");
    let (to_software, (received, dropped)) = settled(&d);
    let status = d.status_json().unwrap();
    // The valid flows' first packets at least (hybrid forwards the rest of
    // an offloaded TCP flow in XDP).
    assert!(to_software >= 2 * ROUNDS as u64, "{status}");
    assert_eq!(
        to_software,
        received + dropped,
        "XDP steered {to_software} frames, the sockets account for {received} received \
         and {dropped} dropped\nstatus: {status}\nworkers: {:?}",
        weir_control::tier::read_workers(&d.run_dir())
    );
    // weir status says the same.
    let a = &status["software_accounting"];
    assert_eq!(a["steered"].as_u64(), Some(to_software), "{status}");
    assert_eq!(a["received"].as_u64(), Some(received), "{status}");
    assert_eq!(a["unaccounted"].as_i64(), Some(0), "{status}");
    // The malformed frames and the traffic for no VIP never reached a worker.
    assert!(
        xdp_counter(&status, "drop_malformed") + xdp_counter(&status, "pass_malformed") > 0,
        "{status}"
    );
    d.stop().unwrap();
}

#[test]
fn software_tier_sockets_account_for_every_steered_frame() {
    every_steered_frame_is_in_a_socket_counter("tier = \"software\"");
}

#[test]
fn hybrid_tier_sockets_account_for_every_steered_frame() {
    every_steered_frame_is_in_a_socket_counter(
        "tier = \"hybrid\"\nfast_table_size = 64\noffload = \"first\"",
    );
}
