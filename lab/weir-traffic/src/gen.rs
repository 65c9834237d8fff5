//! The labs' packet generator `weir_gen` (lab/bpf/weir_gen.bpf.c): a template
//! frame that BPF_PROG_TEST_RUN in live-frames mode (Linux >= 5.18) turns
//! into millions of packets a second, each one of a chosen set of flows.
//!
//! ```no_run
//! # use weir_traffic::gen::*;
//! # fn main() -> anyhow::Result<()> {
//! let mut spec = GenSpec::new("10.1.0.0".parse()?, "10.2.0.1:80".parse()?, L4::Udp);
//! spec.sources.prefix = 16;     // sources 10.1.0.0 .. 10.1.255.255
//! spec.flows = 1000;            // flow i = 10.1.(i / 256).(i % 256)
//! let gen = Generator::load(&spec)?;
//! gen.number_packets(&[(0, 0)], 1)?;   // the thread on CPU 0 numbers from 0
//! // In the network namespace of the interface, on CPU 0:
//! let ifindex = 2;
//! gen.live(ifindex).send(1 << 20, DEFAULT_BATCH)?;
//! # Ok(()) }
//! ```
//!
//! The flow of each packet comes from [`FlowDist`]; which 5-tuple flow i is
//! comes from [`Sources`] ([`GenSpec::flow`] computes it the way the program
//! does). Live runs send each packet out of the interface whose index they
//! are given (XDP_TX), which must be in the caller's network namespace; a
//! veth only accepts them when its peer runs an XDP program.

mod frame;
mod zipf;

use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use weir_core::flow::{FlowTuple, Proto};
use weir_core::splitmix::splitmix64;

pub use frame::{FrameSpec, L4, TCP_SEQ};

use crate::skel::gen::types::{weir_gen_dist, weir_gen_state};
use crate::skel::gen::{OpenWeirGenSkel, WeirGenSkel, WeirGenSkelBuilder};

/// TCP flags, for [`L4::Tcp`].
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

/// Frames of a live run handled between two transmit flushes (the kernel's
/// default, the NAPI budget).
pub const DEFAULT_BATCH: u32 = 64;
/// The kernel's largest live-mode batch.
pub const MAX_BATCH: u32 = 256;
/// The largest number of flows (the Zipf table holds one entry per flow).
pub const MAX_FLOWS: u32 = 1 << 24;
/// The largest frame: a 1500-byte IP packet in Ethernet.
pub const MAX_FRAME: usize = 1514;
/// Bit flag of BPF_PROG_TEST_RUN: run the program on live frames.
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// How the flow of each packet is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FlowDist {
    /// Packet c (numbered across threads) carries flow c mod flows: every
    /// flow gets the same share, in order.
    RoundRobin,
    /// A uniformly random flow per packet.
    Uniform,
    /// Flow k with probability proportional to (k + 1)^-s: flow 0 is the
    /// most popular. s = 0 is uniform, s ~ 1 a typical skew.
    Zipf { s: f64 },
    /// Packet c carries flow c of the whole source space (`flows` is not
    /// used): a source never seen before on every packet until the space
    /// wraps, e.g. the spoofed sources of a SYN flood.
    Fresh,
}

/// The sources flows are made of. Flow i has the source address
/// `net | host` and the source port `port + (i >> host_bits) % ports`, where
/// host is `i mod 2^host_bits`, put through a keyed bijection when
/// `scramble` is set. host_bits = address bits - prefix, at most 32 (for
/// IPv6 the last 32 bits vary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sources {
    /// The first address; its host bits must be zero.
    pub net: IpAddr,
    pub prefix: u8,
    /// The first source port.
    pub port: u16,
    /// How many source ports, from `port` up.
    pub ports: u32,
    /// Some(seed): hosts in a pseudo-random order fixed by the seed, so
    /// flows look unrelated but flow i is still always the same tuple.
    pub scramble: Option<u64>,
}

impl Sources {
    /// Varied low bits of the address.
    pub fn host_bits(&self) -> u32 {
        let bits = match self.net {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        bits - u32::from(self.prefix)
    }

    /// Distinct sources: 2^host_bits addresses times the ports.
    pub fn capacity(&self) -> u64 {
        (1u64 << self.host_bits()) * u64::from(self.ports)
    }

    fn host_mask(&self) -> u32 {
        ((1u64 << self.host_bits()) - 1) as u32
    }

    fn keys(&self) -> [u32; 2] {
        let k = splitmix64(self.scramble.unwrap_or(0));
        [k as u32, (k >> 32) as u32]
    }

    /// The scramble's xorshift: half the host bits, rounded up.
    fn shift(&self) -> u32 {
        self.host_bits().div_ceil(2).max(1)
    }

    /// The varied 32-bit word of the address (the last one of IPv6), host
    /// order.
    fn base_word(&self) -> u32 {
        match self.net {
            IpAddr::V4(a) => u32::from(a),
            IpAddr::V6(a) => (u128::from(a) & 0xffff_ffff) as u32,
        }
    }

    /// The scramble: xor, odd multiply, xorshift, odd multiply, xor, each
    /// invertible modulo 2^host_bits (lab/bpf/weir_gen.bpf.c does the same).
    fn scramble_host(&self, x: u32) -> u32 {
        let (m, k) = (self.host_mask(), self.keys());
        let mut x = (x ^ k[0]) & m;
        x = x.wrapping_mul(0x9e37_79b1) & m;
        x ^= x >> self.shift();
        x = x.wrapping_mul(0x85eb_ca6b) & m;
        x ^ (k[1] & m)
    }

    /// Source address and port of flow i.
    pub fn source(&self, i: u64) -> (IpAddr, u16) {
        let mut host = (i & u64::from(self.host_mask())) as u32;
        if self.scramble.is_some() {
            host = self.scramble_host(host);
        }
        let port = u32::from(self.port) + ((i >> self.host_bits()) % u64::from(self.ports)) as u32;
        let word = self.base_word() | host;
        let addr = match self.net {
            IpAddr::V4(_) => IpAddr::from(word.to_be_bytes()),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(
                (u128::from(a) & !0xffff_ffff) | u128::from(word),
            )),
        };
        (addr, port as u16)
    }

    fn validate(&self) -> Result<()> {
        let bits = match self.net {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        ensure!(
            u32::from(self.prefix) <= bits,
            "source prefix /{} is longer than an address of {} ({bits} bits)",
            self.prefix,
            self.net
        );
        ensure!(
            self.host_bits() <= 32,
            "source prefix {}/{} leaves {} host bits; the generator varies at most 32 \
             (use /96 or longer for IPv6)",
            self.net,
            self.prefix,
            self.host_bits()
        );
        ensure!(
            self.base_word() & self.host_mask() == 0,
            "source prefix {}/{} has host bits set; give the network address",
            self.net,
            self.prefix
        );
        ensure!(
            self.ports >= 1 && u32::from(self.port) + self.ports <= 65536,
            "source ports {}..{} are not within 0..65535 (ports must be at least 1)",
            self.port,
            u64::from(self.port) + u64::from(self.ports)
        );
        Ok(())
    }
}

/// What the generator sends.
#[derive(Debug, Clone, PartialEq)]
pub struct GenSpec {
    pub src_mac: [u8; 6],
    /// The next hop's MAC: the peer interface, or the load balancer's.
    pub dst_mac: [u8; 6],
    pub sources: Sources,
    /// Destination address and port, the same for every flow.
    pub dst: SocketAddr,
    pub l4: L4,
    /// L4 payload bytes (zeros).
    pub payload_len: usize,
    /// Concurrent flows, 1..=MAX_FLOWS, at most `sources.capacity()` (not
    /// used by [`FlowDist::Fresh`]).
    pub flows: u32,
    pub dist: FlowDist,
}

impl GenSpec {
    /// One flow from `src` (a single address, one port: 40000) to `dst`,
    /// round robin, with the payload that makes a 60-byte frame (64 bytes
    /// on the wire with the FCS) when the headers leave room. MACs are zero:
    /// set them.
    pub fn new(src: IpAddr, dst: SocketAddr, l4: L4) -> GenSpec {
        let mut spec = GenSpec {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            sources: Sources {
                net: src,
                prefix: match src {
                    IpAddr::V4(_) => 32,
                    IpAddr::V6(_) => 128,
                },
                port: 40000,
                ports: 1,
                scramble: None,
            },
            dst,
            l4,
            payload_len: 0,
            flows: 1,
            dist: FlowDist::RoundRobin,
        };
        spec.fill_to(60);
        spec
    }

    /// A SYN flood from fresh spoofed sources in `net/prefix`, every packet
    /// from an address (and port, once the addresses wrap) not used before,
    /// in an order scrambled by `seed`.
    pub fn syn_flood(net: IpAddr, prefix: u8, dst: SocketAddr, seed: u64) -> GenSpec {
        let mut spec = GenSpec::new(
            net,
            dst,
            L4::Tcp {
                flags: tcp_flags::SYN,
            },
        );
        spec.sources = Sources {
            net,
            prefix,
            port: 1024,
            ports: 65536 - 1024,
            scramble: Some(seed),
        };
        spec.dist = FlowDist::Fresh;
        spec
    }

    /// Sets the payload so the frame has `len` bytes (FCS not counted), or
    /// none if the headers alone are longer.
    pub fn fill_to(&mut self, len: usize) {
        self.payload_len = len.saturating_sub(self.headers_len());
    }

    fn headers_len(&self) -> usize {
        weir_core::wire::ETH_HLEN + frame::ip_header_len(self.dst.ip()) + self.l4.header_len()
    }

    /// Bytes of every frame (no FCS).
    pub fn frame_len(&self) -> usize {
        self.headers_len() + self.payload_len
    }

    pub fn proto(&self) -> Proto {
        match self.l4 {
            L4::Udp => Proto::Udp,
            L4::Tcp { .. } => Proto::Tcp,
        }
    }

    /// The 5-tuple of flow i.
    pub fn flow(&self, i: u64) -> FlowTuple {
        let (src, sport) = self.sources.source(i);
        FlowTuple {
            src,
            dst: self.dst.ip(),
            sport,
            dport: self.dst.port(),
            proto: self.proto(),
        }
    }

    /// Checks the spec; the error names what is wrong and what to do.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.sources.net.is_ipv4() == self.dst.is_ipv4(),
            "source {} and destination {} are of different address families",
            self.sources.net,
            self.dst.ip()
        );
        self.sources.validate()?;
        ensure!(
            self.frame_len() <= MAX_FRAME,
            "a {}-byte payload makes {}-byte frames; the generator sends at most {MAX_FRAME}",
            self.payload_len,
            self.frame_len()
        );
        if self.dist != FlowDist::Fresh {
            ensure!(
                (1..=MAX_FLOWS).contains(&self.flows),
                "{} flows: the generator takes 1 to {MAX_FLOWS}",
                self.flows
            );
            ensure!(
                u64::from(self.flows) <= self.sources.capacity(),
                "{} flows do not fit in {} source addresses x {} ports; use a shorter \
                 source prefix or more source ports",
                self.flows,
                1u64 << self.sources.host_bits(),
                self.sources.ports
            );
        }
        if let FlowDist::Zipf { s } = self.dist {
            ensure!(
                s.is_finite() && s >= 0.0,
                "Zipf skew {s}: it must be a finite number >= 0"
            );
        }
        Ok(())
    }

    /// The template frame: the sources' first address and port.
    fn template(&self) -> Vec<u8> {
        let (src, sport) = (self.sources.net, self.sources.port);
        frame::build(&FrameSpec {
            src_mac: self.src_mac,
            dst_mac: self.dst_mac,
            src,
            dst: self.dst.ip(),
            sport,
            dport: self.dst.port(),
            l4: self.l4,
            payload_len: self.payload_len,
        })
    }
}

/// A loaded weir_gen and its template frame.
pub struct Generator {
    skel: WeirGenSkel<'static>,
    frame: Vec<u8>,
}

fn configure(open: &mut OpenWeirGenSkel<'static>, spec: &GenSpec, frame: &[u8]) -> Result<()> {
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("weir_gen has no .rodata")?;
    let l3 = weir_core::wire::ETH_HLEN;
    let l4 = l3 + frame::ip_header_len(spec.dst.ip());
    let l4_csum = l4 + if spec.l4 == L4::Udp { 6 } else { 16 };
    let src = &spec.sources;
    ro.cfg_ipv6 = u32::from(spec.dst.is_ipv6());
    ro.cfg_tcp = u32::from(spec.l4 != L4::Udp);
    ro.cfg_dist = match spec.dist {
        FlowDist::RoundRobin => weir_gen_dist::WEIR_GEN_ROUND_ROBIN,
        FlowDist::Uniform => weir_gen_dist::WEIR_GEN_UNIFORM,
        FlowDist::Zipf { .. } => weir_gen_dist::WEIR_GEN_ZIPF,
        FlowDist::Fresh => weir_gen_dist::WEIR_GEN_FRESH,
    };
    ro.cfg_flows = spec.flows;
    ro.cfg_host_bits = src.host_bits();
    ro.cfg_host_mask = src.host_mask();
    ro.cfg_src_base = src.base_word();
    ro.cfg_port_base = u32::from(src.port);
    ro.cfg_ports = src.ports;
    ro.cfg_scramble = u32::from(src.scramble.is_some());
    ro.cfg_key = src.keys();
    ro.cfg_shift = src.shift();
    // As they sit in memory: the program updates them in that form.
    ro.cfg_ip_csum = u16::from_ne_bytes([frame[l3 + 10], frame[l3 + 11]]);
    ro.cfg_l4_csum = u16::from_ne_bytes([frame[l4_csum], frame[l4_csum + 1]]);
    let headers = l4 + spec.l4.header_len();
    ro.cfg_headers[..headers].copy_from_slice(&frame[..headers]);
    if let FlowDist::Zipf { .. } = spec.dist {
        open.maps
            .gen_alias
            .set_max_entries(spec.flows)
            .context("sizing the Zipf table gen_alias")?;
    }
    Ok(())
}

impl Generator {
    /// Checks `spec`, builds its template and loads weir_gen for it.
    pub fn load(spec: &GenSpec) -> Result<Generator> {
        spec.validate()?;
        let frame = spec.template();
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = WeirGenSkelBuilder::default()
            .open(storage)
            .context("opening the weir_gen BPF object")?;
        configure(&mut open, spec, &frame)?;
        let skel = open.load().map_err(|e| {
            anyhow::anyhow!(
                "the kernel refused to load weir_gen: {e}; it needs BTF and root \
                 (CAP_BPF, CAP_NET_ADMIN)"
            )
        })?;
        if let FlowDist::Zipf { s } = spec.dist {
            for (k, col) in zipf::alias_table(spec.flows, s).iter().enumerate() {
                skel.maps
                    .gen_alias
                    .update(&(k as u32).to_ne_bytes(), as_bytes(col), MapFlags::ANY)
                    .context("writing the Zipf table gen_alias")?;
            }
        }
        Ok(Generator { skel, frame })
    }

    /// The template frame every packet is made from.
    pub fn frame(&self) -> &[u8] {
        &self.frame
    }

    /// Restarts packet numbering (what [`FlowDist::RoundRobin`] and
    /// [`FlowDist::Fresh`] count): the thread that generates on CPU `cpu`
    /// numbers its packets `first, first + stride, ...` for each
    /// `(cpu, first)` given. Threads must stay on their CPU.
    pub fn number_packets(&self, lanes: &[(usize, u64)], stride: u64) -> Result<()> {
        let cpus = libbpf_rs::num_possible_cpus().context("counting CPUs")?;
        let mut values = vec![
            weir_gen_state {
                next: 0,
                stride: stride.max(1),
            };
            cpus
        ];
        for &(cpu, first) in lanes {
            ensure!(
                cpu < cpus,
                "CPU {cpu} does not exist (this machine has {cpus})"
            );
            values[cpu].next = first;
        }
        let bytes: Vec<Vec<u8>> = values.iter().map(|v| as_bytes(v).to_vec()).collect();
        self.skel
            .maps
            .gen_state
            .update_percpu(&0u32.to_ne_bytes(), &bytes, MapFlags::ANY)
            .context("writing the packet counters gen_state")
    }

    /// Runs the program once on the template (not live) and returns the
    /// packet it made: packet `n` of the numbering, whatever the CPU.
    pub fn packet(&self, n: u64) -> Result<Vec<u8>> {
        self.packet_on(n, &self.frame)
    }

    /// As [`Generator::packet`], on a page that holds `page` instead of the
    /// template: what a live run meets when its page was last used by a
    /// packet that a receiver rewrote in place.
    pub fn packet_on(&self, n: u64, page: &[u8]) -> Result<Vec<u8>> {
        ensure!(
            page.len() == self.frame.len(),
            "a page of {} bytes for a {}-byte template",
            page.len(),
            self.frame.len()
        );
        let cpus = libbpf_rs::num_possible_cpus().context("counting CPUs")?;
        let lanes: Vec<(usize, u64)> = (0..cpus).map(|c| (c, n)).collect();
        self.number_packets(&lanes, 1)?;
        let prog = &self.skel.progs.weir_gen;
        let mut out = vec![0u8; self.frame.len()];
        let mut opts = libbpf_rs::libbpf_sys::bpf_test_run_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_test_run_opts>() as _,
            data_in: page.as_ptr().cast(),
            data_size_in: page.len() as u32,
            data_out: out.as_mut_ptr().cast(),
            data_size_out: out.len() as u32,
            repeat: 1,
            ..Default::default()
        };
        // SAFETY: the buffers outlive the call and their sizes are given.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(prog.as_fd().as_raw_fd(), &mut opts)
        };
        if rc != 0 {
            bail!(
                "BPF_PROG_TEST_RUN of weir_gen: {}",
                std::io::Error::from_raw_os_error(-rc)
            );
        }
        ensure!(
            opts.retval == 3,
            "weir_gen returned {} instead of XDP_TX (3) on its own template",
            opts.retval
        );
        out.truncate(opts.data_size_out as usize);
        Ok(out)
    }

    /// A sender of live packets out of interface `ifindex` (in the calling
    /// thread's network namespace). It is Send + Sync: threads share it.
    pub fn live(&self, ifindex: u32) -> LiveSender<'_> {
        LiveSender {
            prog: self.skel.progs.weir_gen.as_fd(),
            frame: &self.frame,
            ifindex,
        }
    }
}

/// Sends packets with BPF_PROG_TEST_RUN in live-frames mode.
#[derive(Clone, Copy)]
pub struct LiveSender<'a> {
    prog: BorrowedFd<'a>,
    frame: &'a [u8],
    ifindex: u32,
}

impl LiveSender<'_> {
    /// Makes and sends `packets` packets (>= 1), flushed to the interface
    /// every `batch` (1..=MAX_BATCH). Returns the kernel's mean time per
    /// packet. Packets the interface cannot take (a full ring) are dropped
    /// by the kernel and still count as made: measure at the receiver.
    pub fn send(&self, packets: u32, batch: u32) -> Result<Duration> {
        ensure!(packets >= 1, "a live run sends at least one packet");
        ensure!(
            (1..=MAX_BATCH).contains(&batch),
            "batch {batch}: the kernel takes 1 to {MAX_BATCH}"
        );
        // SAFETY: xdp_md is plain data; zero is a valid value.
        let mut ctx: libbpf_rs::libbpf_sys::xdp_md = unsafe { std::mem::zeroed() };
        // The kernel wants data_end = the frame's size and no metadata.
        ctx.data_end = self.frame.len() as u32;
        ctx.ingress_ifindex = self.ifindex;
        let mut opts = libbpf_rs::libbpf_sys::bpf_test_run_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_test_run_opts>() as _,
            data_in: self.frame.as_ptr().cast(),
            data_size_in: self.frame.len() as u32,
            ctx_in: (&ctx as *const libbpf_rs::libbpf_sys::xdp_md).cast(),
            ctx_size_in: std::mem::size_of_val(&ctx) as u32,
            repeat: packets.min(i32::MAX as u32) as i32,
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            batch_size: batch,
            ..Default::default()
        };
        // SAFETY: the frame and context outlive the call; no output buffers
        // (live mode refuses them).
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(self.prog.as_raw_fd(), &mut opts)
        };
        if rc != 0 {
            let err = std::io::Error::from_raw_os_error(-rc);
            bail!(
                "live BPF_PROG_TEST_RUN of weir_gen on ifindex {}: {err}{}",
                self.ifindex,
                match -rc {
                    libc::EINVAL =>
                        "; live frames need Linux >= 5.18 and an interface of \
                                     this network namespace",
                    libc::ENODEV => "; no interface with that index in this network namespace",
                    _ => "",
                }
            );
        }
        Ok(Duration::from_nanos(u64::from(opts.duration)))
    }
}

/// The bytes of a skeleton type (plain integers, no padding: weir_traffic.h
/// asserts the sizes).
fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is one of weir_traffic.h's padding-free structs.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(net: &str, prefix: u8, ports: u32, scramble: Option<u64>) -> Sources {
        Sources {
            net: net.parse().unwrap(),
            prefix,
            port: 1000,
            ports,
            scramble,
        }
    }

    #[test]
    fn flows_are_distinct_and_fill_the_space() {
        for s in [
            sources("10.1.0.0", 24, 4, None),
            sources("10.1.0.0", 24, 4, Some(7)),
            sources("fd00::", 120, 3, Some(9)),
            sources("10.0.0.0", 29, 1, Some(1)),
            sources("10.0.0.1", 32, 1000, Some(3)),
        ] {
            let all: std::collections::HashSet<(IpAddr, u16)> =
                (0..s.capacity()).map(|i| s.source(i)).collect();
            assert_eq!(all.len() as u64, s.capacity(), "{s:?}");
            assert!(all
                .iter()
                .all(|(_, p)| (1000..1000 + s.ports).contains(&u32::from(*p))));
        }
    }

    #[test]
    fn counting_order_is_hosts_first() {
        let s = sources("10.1.0.0", 24, 2, None);
        assert_eq!(s.source(0), ("10.1.0.0".parse().unwrap(), 1000));
        assert_eq!(s.source(5), ("10.1.0.5".parse().unwrap(), 1000));
        assert_eq!(s.source(256 + 3), ("10.1.0.3".parse().unwrap(), 1001));
        // Fresh sources wrap around the space.
        assert_eq!(s.source(512 + 7), s.source(7));
        let v6 = sources("2001:db8::", 112, 1, None);
        assert_eq!(
            v6.source(0x1234).0,
            "2001:db8::1234".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn bad_specs_are_refused_with_the_reason() {
        let dst: SocketAddr = "10.2.0.1:80".parse().unwrap();
        let base = GenSpec::new("10.1.0.0".parse().unwrap(), dst, L4::Udp);
        let cases: Vec<(GenSpec, &str)> = vec![
            (
                GenSpec {
                    sources: sources("10.1.0.1", 24, 1, None),
                    ..base.clone()
                },
                "host bits set",
            ),
            (
                GenSpec {
                    sources: sources("fd00::", 64, 1, None),
                    dst: "[fd00::1]:80".parse().unwrap(),
                    ..base.clone()
                },
                "at most 32",
            ),
            (
                GenSpec {
                    flows: 300,
                    sources: sources("10.1.0.0", 24, 1, None),
                    ..base.clone()
                },
                "do not fit",
            ),
            (
                GenSpec {
                    flows: 0,
                    ..base.clone()
                },
                "1 to",
            ),
            (
                GenSpec {
                    dst: "[fd00::1]:80".parse().unwrap(),
                    ..base.clone()
                },
                "different address families",
            ),
            (
                GenSpec {
                    payload_len: 2000,
                    ..base.clone()
                },
                "at most 1514",
            ),
            (
                GenSpec {
                    dist: FlowDist::Zipf { s: -1.0 },
                    ..base.clone()
                },
                "Zipf skew",
            ),
            (
                GenSpec {
                    sources: Sources {
                        port: 65000,
                        ports: 1000,
                        ..base.sources
                    },
                    ..base.clone()
                },
                "source ports",
            ),
        ];
        for (spec, want) in cases {
            let err = format!("{:#}", spec.validate().unwrap_err());
            assert!(err.contains(want), "{err} should say {want:?}");
        }
        assert!(base.validate().is_ok());
        assert_eq!(base.frame_len(), 60);
        assert!(
            GenSpec::syn_flood("198.18.0.0".parse().unwrap(), 15, dst, 1)
                .validate()
                .is_ok()
        );
    }
}
