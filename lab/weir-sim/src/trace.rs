//! Flow traces: the synthetic trace of Spotlight V-A and CSV replay.
//!
//! A flow is (start, duration, rate, chain, hash): it asks for `rate` bytes
//! per second from `start` to `start + duration` at one DIP of every VIP in
//! its service chain. The hash stands in for the flow hash of its 5-tuple.

use std::fmt;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Pareto};
use serde::Serialize;

/// Longest service chain a flow may have.
pub const MAX_CHAIN: usize = 8;

/// The VIPs a flow traverses, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    len: u8,
    vips: [u8; MAX_CHAIN],
}

impl Chain {
    /// A chain from VIP indices (at most [`MAX_CHAIN`], each < 256).
    pub fn new(vips: &[usize]) -> Option<Chain> {
        if vips.is_empty() || vips.len() > MAX_CHAIN || vips.iter().any(|&v| v > 255) {
            return None;
        }
        let mut c = Chain {
            len: vips.len() as u8,
            vips: [0; MAX_CHAIN],
        };
        for (slot, &v) in c.vips.iter_mut().zip(vips) {
            *slot = v as u8;
        }
        Some(c)
    }

    pub fn vips(&self) -> impl Iterator<Item = usize> + '_ {
        self.vips[..self.len as usize]
            .iter()
            .map(|&v| usize::from(v))
    }

    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One flow of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flow {
    /// Arrival time, seconds.
    pub start: f64,
    /// Seconds.
    pub duration: f64,
    /// Requested rate, bytes per second.
    pub rate: f64,
    pub chain: Chain,
    /// Stand-in for the flow hash of the 5-tuple.
    pub hash: u32,
}

impl Flow {
    pub fn end(&self) -> f64 {
        self.start + self.duration
    }
}

/// Flows sorted by start time, over `vips` VIPs.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub flows: Vec<Flow>,
    pub vips: usize,
}

/// Summary statistics of a trace (Table I of the paper).
#[derive(Debug, Clone, Serialize)]
pub struct TraceStats {
    pub flows: usize,
    pub span_s: f64,
    pub mean_duration_s: f64,
    pub mean_interarrival_ms: f64,
    pub mean_rate_bps: f64,
    pub mean_chain: f64,
}

impl Trace {
    pub fn stats(&self) -> TraceStats {
        let n = self.flows.len().max(1) as f64;
        let span = self.span();
        TraceStats {
            flows: self.flows.len(),
            span_s: span,
            mean_duration_s: self.flows.iter().map(|f| f.duration).sum::<f64>() / n,
            mean_interarrival_ms: if self.flows.len() > 1 {
                1e3 * span / (self.flows.len() - 1) as f64
            } else {
                0.0
            },
            mean_rate_bps: self.flows.iter().map(|f| f.rate).sum::<f64>() / n,
            mean_chain: self.flows.iter().map(|f| f.chain.len() as f64).sum::<f64>() / n,
        }
    }

    /// Time from the first to the last arrival.
    pub fn span(&self) -> f64 {
        match (self.flows.first(), self.flows.last()) {
            (Some(a), Some(b)) => b.start - a.start,
            _ => 0.0,
        }
    }
}

/// Parameters of the synthetic trace; defaults are Spotlight V-A.
#[derive(Debug, Clone, Serialize)]
pub struct SyntheticParams {
    pub flows: usize,
    /// Mean of the exponential inter-arrival time (Poisson arrivals), s.
    pub mean_interarrival: f64,
    /// Mean of the exponential flow duration, s.
    pub mean_duration: f64,
    /// Mean of the Pareto flow rate, bytes/s.
    pub mean_rate: f64,
    /// Pareto shape alpha (> 1 for a finite mean).
    pub pareto_shape: f64,
    pub vips: usize,
    /// Chains have a uniform length in 1..=max_chain (capped at `vips`).
    pub max_chain: usize,
    pub seed: u64,
}

impl Default for SyntheticParams {
    fn default() -> Self {
        SyntheticParams {
            flows: 100_000,
            mean_interarrival: 0.001,
            mean_duration: 10.0,
            mean_rate: 2000.0,
            pareto_shape: 2.0,
            vips: 4,
            max_chain: 4,
            seed: 1,
        }
    }
}

/// A parameter that makes no sense.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid parameter `{name}`: {message}")]
pub struct ParamError {
    pub name: &'static str,
    pub message: String,
}

pub(crate) fn positive(name: &'static str, v: f64) -> Result<(), ParamError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(ParamError {
            name,
            message: format!("must be a finite number > 0, got {v}"),
        })
    }
}

impl SyntheticParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.flows == 0 {
            return Err(ParamError {
                name: "flows",
                message: "must be at least 1".into(),
            });
        }
        positive("mean_interarrival", self.mean_interarrival)?;
        positive("mean_duration", self.mean_duration)?;
        positive("mean_rate", self.mean_rate)?;
        if !(self.pareto_shape.is_finite() && self.pareto_shape > 1.0) {
            return Err(ParamError {
                name: "pareto_shape",
                message: format!(
                    "must be > 1 (the mean is infinite otherwise), got {}",
                    self.pareto_shape
                ),
            });
        }
        check_vips(self.vips, self.max_chain)
    }

    /// The trace, deterministic for a given parameter set and seed.
    pub fn generate(&self) -> Result<Trace, ParamError> {
        self.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let ia = Exp::new(1.0 / self.mean_interarrival).expect("validated");
        let dur = Exp::new(1.0 / self.mean_duration).expect("validated");
        let a = self.pareto_shape;
        let rate = Pareto::new(self.mean_rate * (a - 1.0) / a, a).expect("validated");
        let mut flows = Vec::with_capacity(self.flows);
        let mut t = 0.0;
        for _ in 0..self.flows {
            t += ia.sample(&mut rng);
            let duration = dur.sample(&mut rng);
            let r = rate.sample(&mut rng);
            let chain = random_chain(&mut rng, self.vips, self.max_chain);
            flows.push(Flow {
                start: t,
                duration,
                rate: r,
                chain,
                hash: rng.gen(),
            });
        }
        Ok(Trace {
            flows,
            vips: self.vips,
        })
    }
}

fn check_vips(vips: usize, max_chain: usize) -> Result<(), ParamError> {
    if vips == 0 || vips > 256 {
        return Err(ParamError {
            name: "vips",
            message: format!("must be in 1..=256, got {vips}"),
        });
    }
    if max_chain == 0 || max_chain > MAX_CHAIN {
        return Err(ParamError {
            name: "max_chain",
            message: format!("must be in 1..={MAX_CHAIN}, got {max_chain}"),
        });
    }
    Ok(())
}

/// A chain of 1..=min(max_chain, vips) distinct VIPs in random order.
pub fn random_chain(rng: &mut impl Rng, vips: usize, max_chain: usize) -> Chain {
    let len = rng.gen_range(1..=max_chain.min(vips));
    let mut pick = [0usize; MAX_CHAIN];
    let mut n = 0;
    while n < len {
        let v = rng.gen_range(0..vips);
        if !pick[..n].contains(&v) {
            pick[n] = v;
            n += 1;
        }
    }
    Chain::new(&pick[..len]).expect("1..=MAX_CHAIN VIPs below 256")
}

/// A CSV trace error, naming the line (1-based) and the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct TraceError {
    pub source_name: String,
    pub line: usize,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.source_name, self.line)?;
        if let Some(field) = &self.field {
            write!(f, "field `{field}`: ")?;
        }
        f.write_str(&self.message)
    }
}

/// How flows without a `chain` column get one, and how many VIPs exist.
#[derive(Debug, Clone)]
pub struct ReplayParams {
    pub vips: usize,
    pub max_chain: usize,
    pub seed: u64,
}

impl Default for ReplayParams {
    fn default() -> Self {
        ReplayParams {
            vips: 4,
            max_chain: 4,
            seed: 1,
        }
    }
}

/// The CSV trace format, for docs and `--help`.
pub const CSV_FORMAT: &str = "\
CSV trace: a header line naming the columns, then one flow per line. Blank lines and lines
starting with '#' are skipped. Columns (any order):
  start     arrival time in seconds (>= 0; need not be sorted)
  duration  seconds (>= 0; > 0 when size is given)
  rate      requested rate in bytes/s (>= 0)        -- exactly one of rate and size
  size      bytes; rate = size / duration
  chain     optional: VIP indices the flow traverses, separated by ';' (e.g. 0;2;3),
            each < --vips; missing chains are drawn at random (1..=max-chain VIPs, seeded)";

/// Reads a CSV trace file.
pub fn read_csv_file(path: &Path, params: &ReplayParams) -> Result<Trace, anyhow::Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read trace {}: {e}", path.display()))?;
    Ok(parse_csv(&text, &path.display().to_string(), params)?)
}

/// Parses a CSV trace (see [`CSV_FORMAT`]); `name` appears in errors.
pub fn parse_csv(text: &str, name: &str, params: &ReplayParams) -> Result<Trace, TraceError> {
    let err = |line: usize, field: Option<&str>, message: String| TraceError {
        source_name: name.to_string(),
        line,
        field: field.map(str::to_string),
        message,
    };
    check_vips(params.vips, params.max_chain).map_err(|e| err(0, Some(e.name), e.message))?;
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let (hline, header) = lines.next().ok_or_else(|| {
        err(
            1,
            None,
            "empty trace: expected a header line such as `start,duration,rate`".into(),
        )
    })?;
    let cols: Vec<String> = header
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    let find = |c: &str| cols.iter().position(|x| x == c);
    for (i, c) in cols.iter().enumerate() {
        if !["start", "duration", "rate", "size", "chain"].contains(&c.as_str()) {
            return Err(err(
                hline,
                Some(c),
                format!("unknown column {} in header; expected start, duration, rate or size, and optionally chain", i + 1),
            ));
        }
        if cols[..i].contains(c) {
            return Err(err(
                hline,
                Some(c),
                "column appears twice in the header".into(),
            ));
        }
    }
    let start_i = find("start")
        .ok_or_else(|| err(hline, Some("start"), "header has no `start` column".into()))?;
    let dur_i = find("duration").ok_or_else(|| {
        err(
            hline,
            Some("duration"),
            "header has no `duration` column".into(),
        )
    })?;
    let rate_i = find("rate");
    let size_i = find("size");
    let chain_i = find("chain");
    if rate_i.is_some() == size_i.is_some() {
        return Err(err(
            hline,
            Some("rate"),
            "header needs exactly one of `rate` (bytes/s) and `size` (bytes)".into(),
        ));
    }
    let mut flows = Vec::new();
    for (ln, line) in lines {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != cols.len() {
            return Err(err(
                ln,
                None,
                format!(
                    "expected {} fields ({}), found {}",
                    cols.len(),
                    cols.join(","),
                    fields.len()
                ),
            ));
        }
        let num = |i: usize, what: &str| -> Result<f64, TraceError> {
            let raw = fields[i];
            let v: f64 = raw
                .parse()
                .map_err(|_| err(ln, Some(&cols[i]), format!("expected {what}, got `{raw}`")))?;
            if !v.is_finite() || v < 0.0 {
                return Err(err(
                    ln,
                    Some(&cols[i]),
                    format!("expected {what}, got `{raw}` (negative or not finite)"),
                ));
            }
            Ok(v)
        };
        let start = num(start_i, "a start time in seconds >= 0")?;
        let duration = num(dur_i, "a duration in seconds >= 0")?;
        let rate = match (rate_i, size_i) {
            (Some(i), _) => num(i, "a rate in bytes/s >= 0")?,
            (None, Some(i)) => {
                let size = num(i, "a size in bytes >= 0")?;
                if duration <= 0.0 {
                    return Err(err(
                        ln,
                        Some("duration"),
                        "must be > 0 when the flow is given by its size".into(),
                    ));
                }
                size / duration
            }
            (None, None) => unreachable!("checked with the header"),
        };
        let chain = match chain_i {
            Some(i) if !fields[i].is_empty() => {
                let mut vips = Vec::new();
                for part in fields[i].split([';', ' ', '|']).filter(|p| !p.is_empty()) {
                    let v: usize = part.parse().map_err(|_| {
                        err(
                            ln,
                            Some("chain"),
                            format!("expected VIP indices separated by ';', got `{}`", fields[i]),
                        )
                    })?;
                    if v >= params.vips {
                        return Err(err(
                            ln,
                            Some("chain"),
                            format!(
                                "VIP {v} does not exist (there are {} VIPs, 0..{})",
                                params.vips, params.vips
                            ),
                        ));
                    }
                    if vips.contains(&v) {
                        return Err(err(
                            ln,
                            Some("chain"),
                            format!("VIP {v} appears twice in the chain"),
                        ));
                    }
                    vips.push(v);
                }
                Chain::new(&vips).ok_or_else(|| {
                    err(
                        ln,
                        Some("chain"),
                        format!("a chain has 1 to {MAX_CHAIN} VIPs, got {}", vips.len()),
                    )
                })?
            }
            _ => random_chain(&mut rng, params.vips, params.max_chain),
        };
        flows.push(Flow {
            start,
            duration,
            rate,
            chain,
            hash: rng.gen(),
        });
    }
    if flows.is_empty() {
        return Err(err(
            hline,
            None,
            "the trace has a header but no flows".into(),
        ));
    }
    flows.sort_by(|a, b| a.start.total_cmp(&b.start));
    Ok(Trace {
        flows,
        vips: params.vips,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_trace_has_the_requested_statistics() {
        let p = SyntheticParams {
            flows: 50_000,
            ..Default::default()
        };
        let t = p.generate().unwrap();
        let s = t.stats();
        assert!((s.mean_interarrival_ms - 1.0).abs() < 0.03, "{s:?}");
        assert!((s.mean_duration_s - 10.0).abs() < 0.3, "{s:?}");
        // Pareto with shape 2 has infinite variance: a loose bound.
        assert!((s.mean_rate_bps - 2000.0).abs() < 150.0, "{s:?}");
        assert!((s.mean_chain - 2.5).abs() < 0.05, "{s:?}");
        assert!(t.flows.iter().all(|f| f.rate >= 1000.0));
        assert!(t.flows.windows(2).all(|w| w[0].start <= w[1].start));
        for f in &t.flows {
            let v: Vec<_> = f.chain.vips().collect();
            assert!((1..=4).contains(&v.len()) && v.iter().all(|&x| x < 4));
            let mut d = v.clone();
            d.dedup();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), v.len());
        }
    }

    #[test]
    fn same_seed_same_trace() {
        let p = SyntheticParams {
            flows: 1000,
            ..Default::default()
        };
        assert_eq!(p.generate().unwrap(), p.generate().unwrap());
        let q = SyntheticParams {
            seed: 2,
            ..p.clone()
        };
        assert_ne!(p.generate().unwrap(), q.generate().unwrap());
    }

    #[test]
    fn nonsense_parameters_are_refused() {
        for (p, name) in [
            (
                SyntheticParams {
                    mean_rate: -1.0,
                    ..Default::default()
                },
                "mean_rate",
            ),
            (
                SyntheticParams {
                    mean_duration: 0.0,
                    ..Default::default()
                },
                "mean_duration",
            ),
            (
                SyntheticParams {
                    mean_interarrival: f64::NAN,
                    ..Default::default()
                },
                "mean_interarrival",
            ),
            (
                SyntheticParams {
                    pareto_shape: 1.0,
                    ..Default::default()
                },
                "pareto_shape",
            ),
            (
                SyntheticParams {
                    vips: 0,
                    ..Default::default()
                },
                "vips",
            ),
            (
                SyntheticParams {
                    max_chain: 9,
                    ..Default::default()
                },
                "max_chain",
            ),
            (
                SyntheticParams {
                    flows: 0,
                    ..Default::default()
                },
                "flows",
            ),
        ] {
            assert_eq!(p.generate().unwrap_err().name, name);
        }
    }

    #[test]
    fn csv_parses_rate_size_and_chain() {
        let text = "# example\nstart,duration,size,chain\n1.5,2,4000,0;3\n\n0.5,4,1000,\n";
        let t = parse_csv(text, "t.csv", &ReplayParams::default()).unwrap();
        assert_eq!(t.flows.len(), 2);
        assert_eq!(t.flows[0].start, 0.5);
        assert_eq!(t.flows[0].rate, 250.0);
        assert_eq!(t.flows[1].rate, 2000.0);
        assert_eq!(t.flows[1].chain.vips().collect::<Vec<_>>(), vec![0, 3]);
        let t = parse_csv(
            "rate,start,duration\n10,0,1\n",
            "x",
            &ReplayParams::default(),
        )
        .unwrap();
        assert_eq!(t.flows[0].rate, 10.0);
    }

    #[test]
    fn csv_errors_name_line_and_field() {
        let p = ReplayParams::default();
        let cases = [
            (
                "start,duration,rate\n0,1,10\n0,-1,10\n",
                3,
                Some("duration"),
            ),
            ("start,duration,rate\n0,1,ten\n", 2, Some("rate")),
            ("start,duration,rate\n0,1\n", 2, None),
            ("start,duration,size\n0,0,100\n", 2, Some("duration")),
            ("start,duration,rate,chain\n0,1,1,7\n", 2, Some("chain")),
            ("start,duration,rate,chain\n0,1,1,1;1\n", 2, Some("chain")),
            ("start,duration,rate,chain\n0,1,1,x\n", 2, Some("chain")),
            ("# c\nstart,duration,rate,colour\n", 2, Some("colour")),
            ("start,duration\n0,1\n", 1, Some("rate")),
            ("start,duration,rate,size\n", 1, Some("rate")),
            ("duration,rate\n", 1, Some("start")),
            ("start,duration,rate\nnan,1,1\n", 2, Some("start")),
            ("", 1, None),
            ("start,duration,rate\n", 1, None),
        ];
        for (text, line, field) in cases {
            let e = parse_csv(text, "t.csv", &p).unwrap_err();
            assert_eq!((e.line, e.field.as_deref()), (line, field), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("t.csv:{line}: ")), "{e}");
        }
    }

    #[test]
    fn shipped_example_trace_parses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/sim/trace.csv");
        let t = read_csv_file(Path::new(path), &ReplayParams::default()).unwrap();
        assert!(t.flows.len() >= 100);
    }
}
