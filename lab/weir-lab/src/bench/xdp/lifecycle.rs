//! `weir-lab bench xdp --lifecycle`: what weir_lb spends on each packet of a
//! short TCP connection's life, timed with BPF_PROG_TEST_RUN in the state a
//! short-connection load leaves the tables in, and (with `--forward FILE`)
//! reconciled with the BPF run time per connection that `weir-lab bench
//! forward` measured on real traffic.
//!
//! One `weir_lb` per family with its connection and reverse tables filled to
//! the largest `--sizes` and its half-open table filled to its capacity (as
//! the main bench's miss path finds it). Per run and mode (nat and dsr, in an
//! order that rotates from run to run), `--spread` new connections go
//! through their life one step at a time, every step one test_run call per
//! connection: the SYN (dispatch and half-open insert), nat's SYN-ACK (a
//! reply found through the half-open entry), the client's ACK that promotes
//! the entry, a data packet (a hit), nat's reply (reverse NAT), nat's
//! server FIN (reverse NAT and the forward entry's close note), the client's
//! FIN, an RST, and dsr's reply, which passes the host's XDP on its way to
//! the client (no VIP, no reverse entry: to the kernel). A step's figure is the run's mean; rows report the median
//! over runs. The counters prove every step took its path.

use super::*;
use crate::bench::forward::PacketMix;
use weir_core::wire::{EthernetRepr, IpRepr, TcpFlags, TcpRepr, ETH_HLEN, IPPROTO_TCP, TCP_HLEN};

const TCP_FIN: u8 = 0x01;
const TCP_RST: u8 = 0x04;
const TCP_PSH: u8 = 0x08;

/// One step of a connection's life, in the order a connection takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// The client's SYN: a miss, dispatched by AWFD into the half-open table.
    Syn,
    /// The DIP's SYN-ACK (nat): no reverse entry yet; found through the
    /// half-open entry and rewritten back to the VIP.
    SynAck,
    /// The client's ACK: the half-open entry promoted to the connection
    /// table (and in nat its reverse entry written).
    Promote,
    /// A client data packet: a connection hit.
    Data,
    /// A DIP's data packet (nat): reverse NAT.
    Reply,
    /// The DIP's FIN (nat): reverse NAT, and the forward entry notes it.
    ServerFin,
    /// The client's FIN: a hit that notes the close.
    ClientFin,
    /// The client's RST: a hit that notes the reset.
    Rst,
    /// A DIP's packet to the client in dsr, routed back through the load
    /// balancer's host: no VIP, no reverse entry, no nat endpoint; passed
    /// to the kernel.
    Passed,
}

const STEPS: [Step; 9] = [
    Step::Syn,
    Step::SynAck,
    Step::Promote,
    Step::Data,
    Step::Reply,
    Step::ServerFin,
    Step::ClientFin,
    Step::Rst,
    Step::Passed,
];

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Syn => "SYN",
            Step::SynAck => "SYN-ACK",
            Step::Promote => "ACK (promote)",
            Step::Data => "data (hit)",
            Step::Reply => "reply",
            Step::ServerFin => "server FIN",
            Step::ClientFin => "client FIN",
            Step::Rst => "RST",
            Step::Passed => "reply (passed)",
        }
    }

    /// Whether the DIP sends it.
    fn is_reply(self) -> bool {
        matches!(
            self,
            Step::SynAck | Step::Reply | Step::ServerFin | Step::Passed
        )
    }

    /// Whether a connection of `mode` has this step: nat's replies are
    /// rewritten back, dsr's only pass by.
    fn in_mode(self, mode: Mode) -> bool {
        match self {
            Step::SynAck | Step::Reply | Step::ServerFin => mode == Mode::Nat,
            Step::Passed => mode != Mode::Nat,
            _ => true,
        }
    }

    fn tcp_flags(self) -> u8 {
        match self {
            Step::Syn => TCP_SYN,
            Step::SynAck => TCP_SYN | TCP_ACK,
            Step::Promote => TCP_ACK,
            Step::Data | Step::Reply | Step::Passed => TCP_PSH | TCP_ACK,
            Step::ServerFin | Step::ClientFin => TCP_FIN | TCP_ACK,
            Step::Rst => TCP_RST,
        }
    }

    /// A nat reply leaves by the interface the client's packets came in by
    /// (test_run's loopback): XDP_TX; the client's packets are redirected
    /// to the DIP's next hop; a dsr reply goes to the kernel.
    fn verdict(self) -> XdpAction {
        match self {
            Step::Passed => XdpAction::Pass,
            s if s.is_reply() => XdpAction::Tx,
            _ => XdpAction::Redirect,
        }
    }

    /// The counters each packet of this step must move by one in `mode`.
    fn counted(self, mode: Mode) -> &'static [(u32, &'static str)] {
        match (self, mode) {
            (Step::Syn, _) => &[
                (WEIR_STAT_CONN_MISS, "connection misses"),
                (WEIR_STAT_HALF_OPEN_NEW, "half-open entries installed"),
            ],
            (Step::SynAck | Step::Reply, _) => &[(WEIR_STAT_REV_NAT, "reverse NATs")],
            (Step::ServerFin, _) => &[
                (WEIR_STAT_REV_NAT, "reverse NATs"),
                (WEIR_STAT_CONN_CLOSING, "connections closing"),
            ],
            (Step::Promote, _) => &[(WEIR_STAT_CONN_NEW, "connections promoted")],
            (Step::Data | Step::Rst, _) => &[(WEIR_STAT_CONN_HIT, "connection hits")],
            (Step::Passed, _) => &[(WEIR_STAT_PASS_NOT_VIP, "packets passed (not a VIP's)")],
            // nat's server FIN has already put the connection in closing.
            (Step::ClientFin, Mode::Nat) => &[(WEIR_STAT_CONN_HIT, "connection hits")],
            (Step::ClientFin, _) => &[
                (WEIR_STAT_CONN_HIT, "connection hits"),
                (WEIR_STAT_CONN_CLOSING, "connections closing"),
            ],
        }
    }

    /// The frame of connection `i` at this step.
    fn packet(self, family: Family, i: u64) -> Vec<u8> {
        if self.is_reply() {
            reply(family, i, self.tcp_flags())
        } else {
            packet(family, i, self.tcp_flags())
        }
    }
}

/// One step in one mode and family, over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    pub family: Family,
    pub mode: Mode,
    pub step: Step,
    /// weir_lb, ns per packet (one repetition per call): median, min, max
    /// over runs of each run's mean.
    pub ns_median: f64,
    pub ns_min: f64,
    pub ns_max: f64,
    /// xdp_floor on the run's SYN frames, ns per packet, median over runs.
    pub floor_ns_median: f64,
    pub runs: u32,
    pub calls_per_run: u32,
}

/// The forward bench's HTTP `Connection: close` row of one weir mode,
/// priced with the steps' figures.
#[derive(Debug, Clone, Serialize)]
pub struct Reconciliation {
    pub mode: Mode,
    /// BPF run time per connection that `bench forward` measured.
    pub measured_bpf_ns: f64,
    /// Packets of each step per connection, from its data-plane counters
    /// (see `method`), and what they add up to at the steps' ns.
    pub packets: Vec<(Step, f64)>,
    pub predicted_bpf_ns: f64,
    /// XDP runs per connection the counters do not classify: in dsr the
    /// DIP's replies passing by (priced as such), in nat what else the
    /// host's interfaces carried (ARP, ...; not priced).
    pub unclassified_runs: f64,
    /// predicted / measured.
    pub predicted_over_measured: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LifecycleReport {
    pub bench: &'static str,
    pub kernel: String,
    pub method: Vec<&'static str>,
    pub runs: u32,
    pub spread: u32,
    pub conns: u32,
    pub conn_capacity: u32,
    pub half_open_capacity: u32,
    pub half_open_before: usize,
    pub program: ProgramSize,
    pub rows: Vec<StepRow>,
    /// With `--forward`: the report it reconciles with, and per mode.
    pub forward_report: Option<String>,
    pub reconciliation: Vec<Reconciliation>,
    pub total_seconds: f64,
}

const LIFECYCLE_METHOD: &[&str] = &[
    "BPF_PROG_TEST_RUN on weir_lb as in the main bench (its own namespace, loopback ingress, resolved next hop, `weir serve`'s defaults), one program per family",
    "the state a short-connection load leaves: the connection and reverse tables hold the largest --sizes connections, the half-open table is filled to its capacity (a quarter of the connection table's, `weir serve`'s default) before the first run, so every SYN inserts into a full LRU table",
    "per run and mode (nat, dsr; rotating order), --spread connections no packet has used go through their life step by step, one test_run call of one repetition per packet: SYN, SYN-ACK (nat), ACK that promotes, data, reply (nat), server FIN (nat), client FIN, RST, reply passed to the kernel (dsr: the DIP is no nat endpoint); a step's figure is the run's mean per packet, rows the median over runs; a step follows the previous one on the same connections, so their entries are as warm as a connection's own recent packets leave them",
    "replies come from the DIP (the VIP's own address and port here, as in the main bench) and leave by the client's ingress (XDP_TX); the client's packets are redirected to the DIP's next hop",
    "the counters are checked after every step: each SYN installed a half-open entry, each ACK promoted one, each hit, reverse NAT and close was counted",
    "reconciliation (--forward FILE): per new connection of the forward bench's HTTP Connection: close rows of weir, SYNs = half-open installs + SYN retransmits, promotions = connections installed, reverse NATs and hits from its data-plane counters; of the hits one client FIN per connection and of nat's reverse NATs one SYN-ACK per SYN and one server FIN per connection (a Connection: close exchange), the rest priced as data and replies; in dsr the XDP runs the counters do not classify are the DIP's replies routed through the host, priced as passed replies",
];

/// The reply frame of connection `i`: from the DIP (the VIP's address and
/// port in this bench) to the client.
fn reply(family: Family, i: u64, tcp_flags: u8) -> Vec<u8> {
    let f = flow(family, i);
    let mut ip = IpRepr::new(f.dst, f.src, IPPROTO_TCP, 0);
    ip.payload_len = family.frame_len() - ETH_HLEN - ip.header_len();
    ip.ident = i as u16;
    let payload: Vec<u8> = (0..ip.payload_len - TCP_HLEN)
        .map(|k| b'A' + (k % 26) as u8)
        .collect();
    let mut p = Vec::with_capacity(family.frame_len());
    EthernetRepr {
        src: DIP_MAC,
        dst: LB_MAC,
        ethertype: ip.ethertype(),
    }
    .emit(&mut p);
    ip.emit(&mut p);
    TcpRepr {
        sport: f.dport,
        dport: f.sport,
        seq: (i as u32).wrapping_mul(7),
        ack: (i as u32).wrapping_add(1),
        flags: TcpFlags::from_bits(tcp_flags),
        window: 64240,
    }
    .emit(&ip, &payload, &mut p);
    p
}

/// Runs the lifecycle bench, prints its table and writes its JSON if asked.
pub fn run(args: &XdpBenchArgs) -> Result<()> {
    let report = measure(args)?;
    print!("{}", render(&report));
    if let Some(path) = &args.json {
        crate::bench::write_json(path, &report)?;
    }
    Ok(())
}

fn measure(args: &XdpBenchArgs) -> Result<LifecycleReport> {
    let started = Instant::now();
    ensure!(args.runs >= 1, "--runs must be at least 1");
    ensure!(args.spread >= 1, "--spread must be at least 1");
    let conns = args
        .sizes
        .iter()
        .copied()
        .filter(|&n| n >= 1 && n <= args.max_conns)
        .max()
        .with_context(|| {
            format!(
                "no connection-table size between 1 and --max-conns {}",
                args.max_conns
            )
        })?;
    let modes: Vec<Mode> = [Mode::Nat, Mode::Dsr]
        .into_iter()
        .filter(|m| args.modes.contains(m))
        .collect();
    ensure!(
        !modes.is_empty(),
        "--lifecycle measures nat and dsr: name at least one of them in --modes"
    );
    let forward = args
        .forward
        .as_ref()
        .map(|p| ForwardClose::read(p))
        .transpose()?;
    // Room for the fill, every connection the runs open and LRU slack; the
    // half-open table as `weir serve` sizes it by default.
    let opened = u64::from(args.runs) * u64::from(args.spread) * modes.len() as u64;
    let capacity_conns = u64::from(conns) + u64::from(conns) / 4 + opened + 4096;
    let capacity = Capacity {
        conns: u32::try_from(capacity_conns).context("connection table too large")?,
        half_open: u32::try_from(capacity_conns / 4).context("half-open table too large")?,
    };
    let mut families = args.families.clone();
    families.sort();
    families.dedup();
    let progress = Progress::bar(
        "weir-lab bench xdp --lifecycle",
        u64::from(args.runs) * families.len() as u64,
    );
    let egress = net::enter()?;
    let lo = lo_ifindex()?;
    let floor = minimal::load()?;
    let floor = &floor.progs.xdp_floor;
    let mut rows = Vec::new();
    let mut program = None;
    let mut half_open_before = 0;
    // New connections' keys, far from the fill's and the flood's.
    let mut next = u64::from(conns) + 1_000_000;
    for &family in &families {
        let inst = Inst::new(
            family,
            u64::from(conns),
            capacity,
            lo,
            &egress,
            args.next_hop,
            args.lru,
            features_of(&modes),
        )?;
        inst.fill(&progress)?;
        let mut rng = SplitMix(args.seed);
        inst.verify_installed(&mut rng)?;
        progress.set_message(format!("{}: filling the half-open table", family.name()));
        half_open_before = inst.flood_half_open(capacity.half_open)?;
        program = Some(inst.program_size()?);
        // times[mode][step][run], and the floor's per run.
        let mut times = vec![vec![Vec::new(); STEPS.len()]; modes.len()];
        let mut floor_times = Vec::new();
        for r in 0..args.runs as usize {
            progress.set_message(format!("{}: run {}", family.name(), r + 1));
            for k in 0..modes.len() {
                let m = (k + r) % modes.len();
                let mode = modes[m];
                inst.set_mode(mode)?;
                serve_nat_replies(&inst, mode == Mode::Nat)?;
                let keys: Vec<u64> = (0..u64::from(args.spread)).map(|j| next + j).collect();
                next += u64::from(args.spread);
                if k == 0 {
                    let syns: Vec<Vec<u8>> =
                        keys.iter().map(|&i| packet(family, i, TCP_SYN)).collect();
                    floor_times.push(mean_ns(floor, &syns, XdpAction::Tx)?);
                }
                for (s, &step) in STEPS.iter().enumerate() {
                    if !step.in_mode(mode) {
                        continue;
                    }
                    let pkts: Vec<Vec<u8>> = keys.iter().map(|&i| step.packet(family, i)).collect();
                    let before = inst.maps.stats()?;
                    times[m][s].push(mean_ns(inst.prog(), &pkts, step.verdict())?);
                    let after = inst.maps.stats()?;
                    for &(stat, what) in step.counted(mode) {
                        check_delta(&before, &after, stat, pkts.len() as u64, what)
                            .with_context(|| format!("{} {} step", mode.name(), step.name()))?;
                    }
                }
            }
            progress.inc(1);
        }
        let floor_ns = stats(&floor_times).1;
        for (m, &mode) in modes.iter().enumerate() {
            for (s, &step) in STEPS.iter().enumerate() {
                if times[m][s].is_empty() {
                    continue;
                }
                let (lo, med, hi) = stats(&times[m][s]);
                rows.push(StepRow {
                    family,
                    mode,
                    step,
                    ns_median: med,
                    ns_min: lo,
                    ns_max: hi,
                    floor_ns_median: floor_ns,
                    runs: args.runs,
                    calls_per_run: args.spread,
                });
            }
        }
    }
    progress.finish(format!("{} rows", rows.len()));
    let reconciliation = match &forward {
        Some(f) => f.reconcile(&rows)?,
        None => Vec::new(),
    };
    Ok(LifecycleReport {
        bench: "xdp-lifecycle",
        kernel: kernel_release(),
        method: LIFECYCLE_METHOD.to_vec(),
        runs: args.runs,
        spread: args.spread,
        conns,
        conn_capacity: capacity.conns,
        half_open_capacity: capacity.half_open,
        half_open_before,
        program: program.context("no weir_lb was loaded")?,
        rows,
        forward_report: args.forward.as_ref().map(|p| p.display().to_string()),
        reconciliation,
        total_seconds: started.elapsed().as_secs_f64(),
    })
}

/// With `nat`, lets the DIP's replies that have no reverse entry yet (the
/// SYN-ACK) find their half-open connection: the DIP endpoint serves the
/// VIP, as `weir serve` writes it for a nat DIP; without, a dsr DIP is no
/// nat endpoint.
fn serve_nat_replies(inst: &Inst, nat: bool) -> Result<()> {
    let (addr, family) = addr_words(inst.family.vip());
    let endpoint = weir_endpoint {
        addr,
        port: VIP_PORT.to_be(),
        proto: Proto::Tcp.number(),
        family,
    };
    let mut vips = weir_nat_endpoint {
        count: 1,
        ..Default::default()
    };
    vips.vips[0].addr = addr;
    vips.vips[0].port = VIP_PORT.to_be();
    let wanted = if nat {
        [(endpoint, vips)].into_iter().collect()
    } else {
        Default::default()
    };
    inst.maps.sync_nat_endpoints(&wanted)
}

/// Mean ns per packet of one call per packet, each with verdict `want`.
fn mean_ns(prog: &ProgramMut<'_>, pkts: &[Vec<u8>], want: XdpAction) -> Result<f64> {
    let mut sum = 0.0;
    for p in pkts {
        sum += timed(prog, p, 1, want)?;
    }
    Ok(sum / pkts.len() as f64)
}

/// The HTTP `Connection: close` rows of weir nat and dsr in a `bench
/// forward` JSON report: BPF ns and packets of each kind per connection.
struct ForwardClose {
    rows: Vec<(Mode, f64, PacketMix)>,
}

impl ForwardClose {
    fn read(path: &std::path::Path) -> Result<ForwardClose> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the forward report {}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        let http = v["http_rows"].as_array().with_context(|| {
            format!(
                "{} has no http_rows: give the --json of `weir-lab bench forward --trials http`",
                path.display()
            )
        })?;
        let mut rows = Vec::new();
        for row in http {
            if row["mode"] != "close" {
                continue;
            }
            let mode = match row["balancer"].as_str() {
                Some("weir-nat") => Mode::Nat,
                Some("weir-dsr") => Mode::Dsr,
                _ => continue,
            };
            let bpf = row["bpf_ns_per_request"].as_f64().with_context(|| {
                format!(
                    "{}: weir's close row has no bpf_ns_per_request",
                    path.display()
                )
            })?;
            let mix: PacketMix = serde_json::from_value(row["packets_per_connection"].clone())
                .with_context(|| {
                    format!(
                        "{}: weir's close row has no packets_per_connection: rerun `weir-lab \
                             bench forward --trials http` with this build",
                        path.display()
                    )
                })?;
            rows.push((mode, bpf, mix));
        }
        ensure!(
            !rows.is_empty(),
            "{} has no HTTP Connection: close row of weir nat or dsr",
            path.display()
        );
        Ok(ForwardClose { rows })
    }

    /// Prices each mode's packets per connection with the IPv4 steps' ns.
    fn reconcile(&self, rows: &[StepRow]) -> Result<Vec<Reconciliation>> {
        let mut out = Vec::new();
        for (mode, measured, mix) in &self.rows {
            let ns = |step: Step| -> Option<f64> {
                rows.iter()
                    .find(|r| r.family == Family::V4 && r.mode == *mode && r.step == step)
                    .map(|r| r.ns_median)
            };
            if ns(Step::Syn).is_none() {
                continue;
            }
            let packets = steps_of(mix, *mode);
            let mut predicted = 0.0;
            for &(step, n) in &packets {
                predicted += n * ns(step).with_context(|| {
                    format!(
                        "no {} row in {} mode to price with",
                        step.name(),
                        mode.name()
                    )
                })?;
            }
            out.push(Reconciliation {
                mode: *mode,
                measured_bpf_ns: *measured,
                packets,
                predicted_bpf_ns: predicted,
                unclassified_runs: mix.unclassified(),
                predicted_over_measured: predicted / measured.max(1e-9),
            });
        }
        Ok(out)
    }
}

/// A connection's packets of each step, from the forward bench's counters
/// per connection: of the hits one client FIN, of nat's reverse NATs one
/// SYN-ACK per SYN and one server FIN (a `Connection: close` exchange); the
/// rest are data and replies. A retransmitted SYN is priced as a SYN. In
/// dsr the XDP runs the counters do not classify are the DIP's replies
/// routed through the host (passed to the kernel).
fn steps_of(mix: &PacketMix, mode: Mode) -> Vec<(Step, f64)> {
    let syns = mix.syns + mix.syn_retransmits;
    let client_fin = mix.hits.min(1.0);
    let mut out = vec![
        (Step::Syn, syns),
        (Step::Promote, mix.promotions),
        (Step::Data, mix.hits - client_fin),
        (Step::ClientFin, client_fin),
    ];
    if mode == Mode::Nat {
        let syn_ack = mix.syns.min(mix.reverse_nats);
        let server_fin = (mix.reverse_nats - syn_ack).min(1.0);
        out.extend([
            (Step::SynAck, syn_ack),
            (Step::Reply, mix.reverse_nats - syn_ack - server_fin),
            (Step::ServerFin, server_fin),
        ]);
    } else {
        out.push((Step::Passed, mix.unclassified()));
    }
    out
}

/// The text table.
pub fn render(r: &LifecycleReport) -> String {
    let mut out = format!(
        "weir_lb per packet of a connection's life (BPF_PROG_TEST_RUN, one call per packet, \
         {} connections per step and run, median of {} runs); tables: {} connections, \
         half-open full ({} of {})\n",
        r.spread, r.runs, r.conns, r.half_open_before, r.half_open_capacity
    );
    out += &format!(
        "{:<6} {:<5} {:<15} {:>8} {:>17} {:>8} {:>8}\n",
        "family", "mode", "step", "ns", "(min..max)", "floor", "x floor"
    );
    for row in &r.rows {
        out += &format!(
            "{:<6} {:<5} {:<15} {:>8.0} {:>17} {:>8.0} {:>7.2}x\n",
            row.family.name(),
            row.mode.name(),
            row.step.name(),
            row.ns_median,
            format!("({:.0}..{:.0})", row.ns_min, row.ns_max),
            row.floor_ns_median,
            row.ns_median / row.floor_ns_median.max(1e-9)
        );
    }
    for c in &r.reconciliation {
        let parts: Vec<String> = c
            .packets
            .iter()
            .map(|(step, n)| format!("{n:.2} {}", step.name()))
            .collect();
        out += &format!(
            "\nweir {} HTTP Connection: close, per connection: {}; {:.2} XDP runs not classified by the counters\n  \
             predicted {:.0} ns BPF, measured {:.0} ns: {:.2}x\n",
            c.mode.name(),
            parts.join(", "),
            c.unclassified_runs,
            c.predicted_bpf_ns,
            c.measured_bpf_ns,
            c.predicted_over_measured
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_mirror_the_clients_flow_with_valid_checksums() {
        use weir_core::csum::checksum;
        for family in [Family::V4, Family::V6] {
            let p = reply(family, 4242, TCP_SYN | TCP_ACK);
            let c = packet(family, 4242, TCP_SYN);
            assert_eq!(p.len(), c.len());
            let f = flow(family, 4242);
            let ip = IpRepr::new(f.dst, f.src, IPPROTO_TCP, 0);
            let l4 = ETH_HLEN + ip.header_len();
            let pseudo = ip.pseudo_header_sum(IPPROTO_TCP, p.len() - l4);
            assert_eq!(checksum(&p[l4..], pseudo), 0, "TCP checksum ({family:?})");
            // The reply's ports are the client's swapped.
            assert_eq!(&p[l4..l4 + 2], &c[l4 + 2..l4 + 4]);
            assert_eq!(&p[l4 + 2..l4 + 4], &c[l4..l4 + 2]);
        }
    }

    #[test]
    fn a_close_connections_counters_split_into_steps() {
        let mix = PacketMix {
            xdp_runs: 11.0,
            syns: 1.0,
            syn_retransmits: 0.0,
            promotions: 1.0,
            hits: 4.0,
            reverse_nats: 4.0,
            closing: 1.0,
        };
        let nat = steps_of(&mix, Mode::Nat);
        let of = |step| nat.iter().find(|(s, _)| *s == step).unwrap().1;
        assert_eq!(of(Step::Data), 3.0);
        assert_eq!(of(Step::ClientFin), 1.0);
        assert_eq!(of(Step::SynAck), 1.0);
        assert_eq!(of(Step::ServerFin), 1.0);
        assert_eq!(of(Step::Reply), 2.0);
        let total: f64 = nat.iter().map(|(_, n)| n).sum();
        assert_eq!(total, mix.xdp_runs - mix.unclassified());
        let dsr = steps_of(&mix, Mode::Dsr);
        assert!(dsr.iter().all(|(s, _)| s.in_mode(Mode::Dsr)));
        assert_eq!(dsr.last(), Some(&(Step::Passed, mix.unclassified())));
    }

    #[test]
    fn dsr_replies_pass_and_every_step_is_counted() {
        for step in STEPS {
            assert!(!step.counted(Mode::Dsr).is_empty());
            assert_eq!(step.verdict() == XdpAction::Redirect, !step.is_reply());
        }
        assert_eq!(
            STEPS.iter().filter(|s| s.in_mode(Mode::Dsr)).count(),
            6,
            "SYN, promote, data, client FIN, RST and the passed reply in dsr"
        );
        assert_eq!(STEPS.iter().filter(|s| s.in_mode(Mode::Nat)).count(), 8);
    }
}
