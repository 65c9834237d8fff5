//! `weir-lab gen`: what the packet generator reaches on this machine. Two
//! namespaces joined by one veth pair; weir_gen offers packets from one end,
//! weir_sink counts and drops them at the other. Prints offered and
//! received packets while it runs, then a summary (and JSON with --json).
//!
//! ```text
//!  [gen] eth0 ── veth ── eth0 [sink: weir_sink]
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use weir_progress::Progress;

use super::{
    mac_in, start, tcp_flags, FlowDist, GenSpec, OfferSpec, Offered, Sink, SinkOptions, L4,
};
use crate::netns::{ip, ip_in, NamespaceSet};

/// Where the packets go (UDP and TCP "discard").
const DST_V4: &str = "10.78.0.2:9";
const DST_V6: &str = "[fd00:78::2]:9";
/// Sources: 2^22 IPv4 addresses (2^32 IPv6), then ports 1024 and up.
const SRC_V4: (&str, u8) = ("10.64.0.0", 10);
const SRC_V6: (&str, u8) = ("fd00:64::", 96);
/// Flow-table size of the sink with fresh sources.
const FRESH_TRACKED: u32 = 1 << 20;
/// Time for frames still in the veth ring to reach the sink.
const DRAIN: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DistArg {
    /// Every flow in turn.
    RoundRobin,
    /// A uniformly random flow per packet.
    Uniform,
    /// Flow k with probability ~ (k + 1)^-s (see --zipf-s).
    Zipf,
    /// A new source per packet (spoofed sources of a flood); --flows unused.
    Fresh,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProtoArg {
    Udp,
    Tcp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlagArg {
    Fin,
    Syn,
    Rst,
    Psh,
    Ack,
}

impl DistArg {
    fn label(self) -> &'static str {
        match self {
            DistArg::RoundRobin => "round robin",
            DistArg::Uniform => "uniform",
            DistArg::Zipf => "Zipf",
            DistArg::Fresh => "fresh",
        }
    }
}

impl FlagArg {
    fn bit(self) -> u8 {
        match self {
            FlagArg::Fin => tcp_flags::FIN,
            FlagArg::Syn => tcp_flags::SYN,
            FlagArg::Rst => tcp_flags::RST,
            FlagArg::Psh => tcp_flags::PSH,
            FlagArg::Ack => tcp_flags::ACK,
        }
    }
}

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct GenArgs {
    /// Concurrent flows (5-tuples), 1 to 16M.
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
    /// How each packet picks its flow.
    #[arg(long, value_enum, default_value = "round-robin")]
    pub dist: DistArg,
    /// Zipf skew, with --dist zipf (0 = uniform).
    #[arg(long, default_value_t = 1.0)]
    pub zipf_s: f64,
    /// Transport protocol.
    #[arg(long, value_enum, default_value = "udp")]
    pub proto: ProtoArg,
    /// TCP flags, comma-separated (with --proto tcp).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "syn")]
    pub tcp_flags: Vec<FlagArg>,
    /// IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Frame size on the wire, FCS included (64: the smallest Ethernet
    /// frame). The payload fills it.
    #[arg(long, default_value_t = 64)]
    pub frame_size: usize,
    /// Source addresses in a pseudo-random order fixed by this seed
    /// (default: counted up).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Packets per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Seconds to offer for.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Stop after this many packets.
    #[arg(long)]
    pub count: Option<u64>,
    /// CPUs to generate on.
    #[arg(long, default_value_t = 1)]
    pub cpus: usize,
    /// Packets per transmit flush (1..=256).
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
    /// Queues of the veth pair (default: one per generating CPU, so that
    /// CPUs do not share a ring).
    #[arg(long)]
    pub queues: Option<u32>,
    /// Count distinct flows at the sink (a hash-table update per packet).
    #[arg(long)]
    pub track_flows: bool,
    /// Write the result as JSON to this file.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
}

/// What one `weir-lab gen` run measured.
#[derive(Debug, Clone, Serialize)]
pub struct GenReport {
    pub args: GenArgs,
    pub frame_bytes: usize,
    pub offered: Offered,
    /// Packets the sink counted.
    pub received: u64,
    /// received / offered.elapsed.
    pub received_pps: f64,
    /// (sent - received) / sent.
    pub loss: f64,
    /// TCP SYNs the sink counted.
    pub syns: u64,
    /// Distinct flows at the sink (with --track-flows).
    pub flows_seen: Option<u64>,
}

impl GenArgs {
    fn spec(&self) -> Result<GenSpec> {
        ensure!(
            self.frame_size >= 64,
            "--frame-size {}: an Ethernet frame has at least 64 bytes on the wire",
            self.frame_size
        );
        let (dst, (net, prefix)) = if self.ipv6 {
            (DST_V6, SRC_V6)
        } else {
            (DST_V4, SRC_V4)
        };
        let l4 = match self.proto {
            ProtoArg::Udp => L4::Udp,
            ProtoArg::Tcp => L4::Tcp {
                flags: self.tcp_flags.iter().fold(0, |f, b| f | b.bit()),
            },
        };
        let net: IpAddr = net.parse()?;
        let mut spec = GenSpec::new(net, dst.parse::<SocketAddr>()?, l4);
        spec.sources.prefix = prefix;
        spec.sources.port = 1024;
        spec.sources.ports = 65536 - 1024;
        spec.sources.scramble = self.seed;
        spec.flows = self.flows;
        spec.dist = match self.dist {
            DistArg::RoundRobin => FlowDist::RoundRobin,
            DistArg::Uniform => FlowDist::Uniform,
            DistArg::Zipf => FlowDist::Zipf { s: self.zipf_s },
            DistArg::Fresh => FlowDist::Fresh,
        };
        spec.fill_to(self.frame_size - 4);
        spec.validate()?;
        Ok(spec)
    }
}

/// Two namespaces joined by one veth pair (`eth0` at both ends): the
/// generator's and the sink's. Removed on drop.
pub struct Pair {
    /// Owns the namespaces: dropping it removes them.
    _ns: NamespaceSet,
    pub gen: String,
    pub sink: String,
}

impl Pair {
    /// Builds the pair with `queues` receive and transmit queues per end.
    pub fn build(queues: u32) -> Result<Pair> {
        ensure!(
            (1..=64).contains(&queues),
            "{queues} veth queues: give 1 to 64"
        );
        let mut ns = NamespaceSet::new();
        let gen = ns.add("gen")?;
        let sink = ns.add("sink")?;
        let q = queues.to_string();
        #[rustfmt::skip]
        ip(&[
            "link", "add", "eth0", "netns", &gen, "numtxqueues", &q, "numrxqueues", &q,
            "type", "veth", "peer", "name", "eth0", "netns", &sink,
            "numtxqueues", &q, "numrxqueues", &q,
        ])?;
        for n in [&gen, &sink] {
            ip_in(n, &["link", "set", "eth0", "up"])?;
        }
        Ok(Pair { _ns: ns, gen, sink })
    }
}

fn mpps(packets: u64, secs: f64) -> f64 {
    packets as f64 / secs.max(1e-9) / 1e6
}

pub fn run(args: &GenArgs) -> Result<()> {
    let mut spec = args.spec()?;
    ensure!(
        args.duration > 0.0 && args.duration <= 3600.0,
        "--duration {}: give more than 0 and at most 3600 seconds",
        args.duration
    );
    let offer_spec = OfferSpec {
        packets: spec.clone(),
        rate: args.rate,
        duration: Duration::from_secs_f64(args.duration),
        count: args.count,
        cpus: args.cpus,
        batch: args.batch,
    };
    offer_spec.validate()?;
    let queues = args.queues.unwrap_or(args.cpus as u32);
    crate::netns::install_signal_teardown();
    let pair = Pair::build(queues).context("building the lab: two namespaces, one veth pair")?;
    spec.dst_mac = mac_in(&pair.sink, "eth0")?;
    let sink = Sink::attach(
        &pair.sink,
        "eth0",
        &SinkOptions {
            proto: Some(spec.proto()),
            dport: Some(spec.dst.port()),
            drop: true,
            track_flows: match (args.track_flows, spec.dist) {
                (false, _) => 0,
                (true, FlowDist::Fresh) => FRESH_TRACKED,
                (true, _) => spec.flows,
            },
        },
    )?;
    let what = format!(
        "{}-byte {}/{} frames, {}, {}, {} CPU{}, {} queue{}",
        args.frame_size,
        match args.proto {
            ProtoArg::Udp => "UDP",
            ProtoArg::Tcp => "TCP",
        },
        if args.ipv6 { "IPv6" } else { "IPv4" },
        match spec.dist {
            FlowDist::Fresh => "a fresh source per packet".to_string(),
            _ => format!(
                "{} flow{} ({})",
                spec.flows,
                if spec.flows == 1 { "" } else { "s" },
                args.dist.label()
            ),
        },
        args.rate
            .map_or("as fast as possible".to_string(), |r| format!("{r:.0} pps")),
        args.cpus,
        if args.cpus == 1 { "" } else { "s" },
        queues,
        if queues == 1 { "" } else { "s" },
    );
    eprintln!("weir-lab gen: {what}, {:.1} s", args.duration);
    let offering = start(
        &pair.gen,
        "eth0",
        &OfferSpec {
            packets: spec.clone(),
            ..offer_spec
        },
    )?;
    // The bar runs over the duration, in ms; a --count may end the run first.
    let progress = Progress::bar("weir-lab gen", (args.duration * 1e3) as u64);
    let t0 = Instant::now();
    let mut last = (t0, 0u64, 0u64);
    while !offering.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
        progress.set_position(t0.elapsed().as_millis() as u64);
        if last.0.elapsed() >= Duration::from_secs(1) {
            let (now, sent, received) = (Instant::now(), offering.sent(), sink.stats()?.packets);
            let dt = (now - last.0).as_secs_f64();
            progress.set_message(format!(
                "offered {:.3} Mpps, received {:.3} Mpps ({sent} sent, {received} received)",
                mpps(sent - last.1, dt),
                mpps(received - last.2, dt),
            ));
            last = (now, sent, received);
        }
    }
    let offered = offering.wait()?;
    std::thread::sleep(DRAIN);
    let got = sink.stats()?;
    progress.finish(format!("{} sent, {} received", offered.sent, got.packets));
    let report = GenReport {
        args: args.clone(),
        frame_bytes: spec.frame_len(),
        offered,
        received: got.packets,
        received_pps: got.packets as f64 / offered.elapsed.as_secs_f64(),
        loss: if offered.sent > 0 {
            offered.sent.saturating_sub(got.packets) as f64 / offered.sent as f64
        } else {
            0.0
        },
        syns: got.syns,
        flows_seen: args.track_flows.then_some(got.flows_new),
    };
    print!("{}", render(&report));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).context("encoding the report")?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn render(r: &GenReport) -> String {
    let secs = r.offered.elapsed.as_secs_f64();
    let mut out = format!(
        "offered   {:>12} packets in {secs:.2} s  {:7.3} Mpps  ({:.0} ns per packet in the kernel)\n\
         received  {:>12} packets           {:7.3} Mpps  (loss {:.3}%)\n",
        r.offered.sent,
        r.offered.pps / 1e6,
        r.offered.run_ns_per_packet,
        r.received,
        r.received_pps / 1e6,
        r.loss * 100.0,
    );
    if r.syns > 0 {
        out += &format!("SYNs at the sink: {}\n", r.syns);
    }
    if let Some(f) = r.flows_seen {
        out += &format!("distinct flows at the sink: {f}\n");
    }
    out
}
