//! One loaded `weir_lb` with its tables filled, and timing a program on
//! packets.

use super::*;

/// One loaded `weir_lb` with its connection table filled to `size`
/// connections of `family`.
pub(in crate::bench) struct Inst {
    pub(in crate::bench) family: Family,
    pub(in crate::bench) size: u64,
    pub(in crate::bench) lb: LoadedLb,
    pub(in crate::bench) maps: Maps,
    pub(in crate::bench) lo: u32,
    /// Installed connections no packet has used yet, in random order: idle
    /// since the fill, which dated them IDLE_AGE back (`draw`).
    untouched: std::sync::Mutex<Vec<u32>>,
}

/// How far back the fill dates its connections' last use: past every
/// interval at which the data plane refreshes an entry (conntrack.h
/// ATIME_REFRESH, one second), so the first packet of a connection takes
/// the path of one that has been idle, as most of a large table's are.
pub(in crate::bench) const IDLE_AGE: std::time::Duration = std::time::Duration::from_secs(2);

/// Where the keys of the connections that fill the half-open table start:
/// far from every measured connection's (packet.rs `flow`).
const FLOOD_BASE: u64 = 500_000_000_000;

/// The table sizes every instance of a run gets.
#[derive(Debug, Clone, Copy)]
pub(in crate::bench) struct Capacity {
    /// The measured family's connection and reverse-NAT tables.
    pub(in crate::bench) conns: u32,
    /// The half-open table, which the miss path finds full (`flood_half_open`).
    pub(in crate::bench) half_open: u32,
}

/// The LRU layout of the connection tables (`[dataplane] conn_lru`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lru {
    /// One list for all CPUs (`weir serve`'s default).
    Shared,
    /// One list per CPU (BPF_F_NO_COMMON_LRU).
    PerCpu,
}

impl Lru {
    pub(in crate::bench) fn name(self) -> &'static str {
        match self {
            Lru::Shared => "shared",
            Lru::PerCpu => "per-cpu",
        }
    }

    fn conn_lru(self) -> weir_dataplane::loader::ConnLru {
        match self {
            Lru::Shared => weir_dataplane::loader::ConnLru::Shared,
            Lru::PerCpu => weir_dataplane::loader::ConnLru::PerCpu,
        }
    }
}

/// Where the bench's DIP's next hop comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NextHopSource {
    /// Resolved into the DIP's slot, as `weir serve` keeps it: no lookup.
    Resolved,
    /// Not resolved: the kernel's FIB per packet (bpf_fib_lookup), what
    /// weir did before it resolved next hops, and still does for a DIP
    /// whose neighbour is unknown.
    Fib,
}

impl Inst {
    #[allow(clippy::too_many_arguments)]
    pub(in crate::bench) fn new(
        family: Family,
        size: u64,
        capacity: Capacity,
        lo: u32,
        egress: &weir_dataplane::iface::Iface,
        source: NextHopSource,
        lru: Lru,
        features: Features,
    ) -> Result<Inst> {
        // The defaults of `weir serve`: the FIB on.
        // Only the measured family's tables get the capacity.
        let (v4, v6) = match family {
            Family::V4 => (capacity.conns, 1024),
            Family::V6 => (1024, capacity.conns),
        };
        let opts = LoadOptions {
            conn_capacity: v4,
            conn_capacity_v6: v6,
            half_open_capacity: capacity.half_open,
            conn_lru: lru.conn_lru(),
            pin_dir: None,
            features,
            ..LoadOptions::default()
        };
        let lb = loader::load(&opts).context("loading weir_lb (the bench needs root)")?;
        let maps = Maps::of(&lb.skel)?;
        let (vip_addr, raw_family) = addr_words(family.vip());
        let dip = weir_dip {
            // The VIP's own address and port: see the module documentation.
            addr: vip_addr,
            port: VIP_PORT.to_be(),
            family: raw_family,
            mac_set: 1,
            mac: DIP_MAC,
            pad: [0; 2],
            flags: WEIR_DIP_F_LIVE,
            gen: DIP_GEN,
            vip_id: 0,
            weight: 1,
            // As `weir serve`'s resolver writes it: the route's interface
            // and gateway (net.rs), which the FIB names too.
            nh: match source {
                NextHopSource::Resolved => weir_next_hop {
                    ifindex: egress.ifindex,
                    dmac: super::net::GW_MAC,
                    smac: egress.mac,
                },
                NextHopSource::Fib => weir_next_hop::default(),
            },
        };
        maps.put_dip(0, &dip)?;
        let table = AwfdTable::from_weights(&[(0, 1)]).map_err(anyhow::Error::msg)?;
        maps.publish_table(0, TABLE_VERSION, &table)?;
        maps.put_iface(lo, LB_MAC)?;
        maps.put_iface_in_slot(egress.ifindex, egress.mac, 1)?;
        let inst = Inst {
            family,
            size,
            lb,
            maps,
            lo,
            untouched: std::sync::Mutex::new(Vec::new()),
        };
        // A mode the program carries.
        inst.set_mode(if features.contains(Features::NAT) {
            Mode::Nat
        } else {
            Mode::Dsr
        })?;
        Ok(inst)
    }

    /// Its size as the kernel holds it, and the features it carries.
    pub(in crate::bench) fn program_size(&self) -> Result<ProgramSize> {
        Ok(ProgramSize {
            features: Some(self.lb.features.to_string()),
            ..report::program_size(self.prog())?
        })
    }

    /// Deals the installed connections out in a random order (after `fill`).
    pub(in crate::bench) fn shuffle_untouched(&self, rng: &mut SplitMix) {
        let mut keys: Vec<u32> = (0..self.size as u32).collect();
        for i in (1..keys.len()).rev() {
            keys.swap(i, rng.below(i as u64 + 1) as usize);
        }
        *self.untouched.lock().unwrap() = keys;
    }

    /// An installed connection to send a packet of, and whether it is idle:
    /// one no packet has used since the fill while there are any, else a
    /// random one (a small table runs out; its connections were used
    /// moments before and are fresh).
    pub(in crate::bench) fn draw(&self, rng: &mut SplitMix) -> (u64, bool) {
        match self.untouched.lock().unwrap().pop() {
            Some(k) => (u64::from(k), true),
            None => (rng.below(self.size), false),
        }
    }

    /// Fills the half-open table to its capacity with SYNs that got no
    /// answer, as a SYN flood leaves it: every SYN the miss path then sends
    /// inserts into a full LRU table and evicts. Returns the entries it
    /// holds afterwards.
    pub(in crate::bench) fn flood_half_open(&self, capacity: u32) -> Result<usize> {
        let half = weir_half_open {
            conn: weir_conn {
                dip_id: 0,
                dip_gen: DIP_GEN,
                table_version: TABLE_VERSION,
                atime: weir_dataplane::conntrack::now_ticks(),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut i = 0u64;
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        while i < u64::from(capacity) {
            let n = (u64::from(capacity) - i).min(FILL_BATCH as u64);
            keys.clear();
            values.clear();
            for j in i..i + n {
                keys.extend_from_slice(flow(self.family, FLOOD_BASE + j).key().as_bytes());
                values.extend_from_slice(half.as_bytes());
            }
            self.maps
                .half_open
                .update_batch(
                    &keys,
                    &values,
                    n as u32,
                    libbpf_rs::MapFlags::ANY,
                    libbpf_rs::MapFlags::ANY,
                )
                .context("batch update of the half-open table")?;
            i += n;
        }
        Ok(self.maps.half_open_count())
    }

    /// The frame of connection `i` of this instance's family.
    pub(in crate::bench) fn packet(&self, i: u64, tcp_flags: u8) -> Vec<u8> {
        packet(self.family, i, tcp_flags)
    }

    pub(in crate::bench) fn prog(&self) -> &ProgramMut<'static> {
        &self.lb.skel.progs.weir_lb
    }

    pub(in crate::bench) fn set_mode(&self, mode: Mode) -> Result<()> {
        let (addr, family) = addr_words(self.family.vip());
        let key = weir_vip_key {
            addr,
            port: VIP_PORT.to_be(),
            proto: Proto::Tcp.number(),
            family,
        };
        let vip = weir_vip {
            vip_id: 0,
            mode: mode.raw(),
            ..Default::default()
        };
        self.maps.put_vip(&key, &vip)
    }

    /// Sends one NAT SYN of a new connection and reads the ingress ifindex
    /// the program saw from the half-open reverse entry it installed;
    /// removes both half-open entries again.
    pub(in crate::bench) fn probe_ingress(&self) -> Result<u32> {
        self.set_mode(Mode::Nat)?;
        let idx = self.size + 500_000;
        let out = testrun::run(self.prog(), &self.packet(idx, TCP_SYN), 1)?;
        ensure!(
            out.action() == Some(XdpAction::Redirect),
            "probe: weir_lb returned {} instead of XDP_REDIRECT",
            out.raw
        );
        let key = flow(self.family, idx).key();
        let half = self
            .maps
            .half_open_entry(&key)?
            .context("probe: no half-open entry installed")?;
        self.maps.half_open.delete(key.as_bytes())?;
        Ok(half.rev.ifindex)
    }

    /// Installs connections 0..size in the connection and reverse tables,
    /// saying how far on `progress`. Each online CPU installs its share from
    /// a thread pinned to it: with per-CPU LRU lists an entry written from
    /// user space lands in the share of the CPU that wrote it, so a fill
    /// from one CPU would need that CPU's share to hold the whole fill.
    pub(in crate::bench) fn fill(&self, progress: &Progress) -> Result<()> {
        let cpus = crate::cpus::online()?;
        let per_cpu = self.size.div_ceil(cpus.len() as u64);
        let done = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            let handles: Vec<_> = cpus
                .iter()
                .enumerate()
                .map(|(i, &cpu)| {
                    let from = (i as u64 * per_cpu).min(self.size);
                    let to = (from + per_cpu).min(self.size);
                    let done = &done;
                    s.spawn(move || -> Result<()> {
                        crate::cpus::pin_current(cpu)?;
                        self.fill_range(from, to, &|n| {
                            let i = done.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
                            progress.set_message(format!(
                                "filling a connection table: {i} / {}",
                                self.size
                            ));
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        })
    }

    /// Installs connections from..to, calling `filled` after each batch.
    fn fill_range(&self, from: u64, to: u64, filled: &dyn Fn(u64)) -> Result<()> {
        let conn = weir_conn {
            dip_id: 0,
            dip_gen: DIP_GEN,
            table_version: TABLE_VERSION,
            created_ns: 0,
            // Idle past every refresh interval, well within the idle
            // timeout (the data plane ignores entries past it).
            atime: weir_dataplane::conntrack::now_ticks()
                .wrapping_sub(weir_dataplane::conntrack::ticks(IDLE_AGE)),
            ..Default::default()
        };
        let (vip, family) = addr_words(self.family.vip());
        let rev = weir_rev_nat {
            vip,
            vport: VIP_PORT.to_be(),
            family,
            pad: 0,
            vip_id: 0,
            ifindex: self.lo,
            client_mac: CLIENT_MAC,
            lb_mac: LB_MAC,
        };
        let mut i = from;
        let (mut conns, mut revs) = (Vec::new(), Vec::new());
        while i < to {
            let n = (to - i).min(FILL_BATCH as u64);
            conns.clear();
            revs.clear();
            for j in i..i + n {
                let key = flow(self.family, j).key();
                conns.push((key, conn));
                revs.push((reverse_key(&key), rev));
            }
            self.maps
                .conns
                .insert_batch(&conns)
                .context("batch update of the connection table")?;
            self.maps
                .rev_nat
                .insert_batch(&revs)
                .context("batch update of the reverse-NAT table")?;
            i += n;
            filled(n);
        }
        Ok(())
    }

    /// Checks that the first, the last and a random sample of the installed
    /// connections are in both tables (an LRU may have evicted some).
    pub(in crate::bench) fn verify_installed(&self, rng: &mut SplitMix) -> Result<()> {
        let n = self.size;
        let mut sample: Vec<u64> = vec![0, n - 1];
        sample.extend((0..1000.min(n)).map(|_| rng.below(n)));
        for i in sample {
            let key = flow(self.family, i).key();
            if self.maps.conn(&key)?.is_none() {
                bail!("connection {i} of {n} is missing from the table (evicted?)");
            }
            if self.maps.rev_nat(&reverse_key(&key))?.is_none() {
                bail!("reverse entry of connection {i} of {n} is missing (evicted?)");
            }
        }
        Ok(())
    }
}

pub(in crate::bench) fn check_delta(
    before: &[u64],
    after: &[u64],
    stat: u32,
    want: u64,
    what: &str,
) -> Result<()> {
    let got = after[stat as usize] - before[stat as usize];
    ensure!(
        got == want,
        "the counters disagree with the benchmark: {got} {what}, expected {want}; the measurement is not what it claims"
    );
    Ok(())
}

/// Mean ns per repetition of `repeat` runs of `prog` on `pkt`, as the
/// kernel timed them (whole ns, truncated); the verdict must be `want`.
pub(in crate::bench) fn timed(
    prog: &ProgramMut<'_>,
    pkt: &[u8],
    repeat: u32,
    want: XdpAction,
) -> Result<f64> {
    let out = testrun::run(prog, pkt, repeat)?;
    ensure!(
        out.action() == Some(want),
        "{} returned {} instead of {want:?}",
        prog.name().to_string_lossy(),
        out.raw
    );
    Ok(out.duration.as_nanos() as f64)
}
