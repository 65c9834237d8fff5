//! weir_lb's load-time feature set (bpf/lib/features.h): a program without
//! a feature carries none of its code, and a program with more features
//! loaded into a running one's maps takes over its connections and serves
//! the new features; a swap that fails leaves the running program attached.
mod common;

use common::*;
use libbpf_rs::MapCore;
use weir_abi::*;
use weir_dataplane::attach::{attach_all, attached_prog_id, XdpMode};
use weir_dataplane::features::Features;
use weir_dataplane::loader::{self, LoadOptions, LoadedLb};
use weir_dataplane::runstats::RunStats;
use weir_dataplane::testrun::{self, XdpAction};
use weir_testkit::cases;

fn with_features(features: Features) -> LoadOptions {
    LoadOptions {
        features,
        ..test_options()
    }
}

fn prog_id(lb: &LoadedLb) -> u32 {
    RunStats::of(lb.prog_fd()).unwrap().id
}

/// `bpftool prog dump xlated` of a loaded program.
fn xlated(lb: &LoadedLb) -> String {
    let id = prog_id(lb).to_string();
    let out = std::process::Command::new("bpftool")
        .args(["prog", "dump", "xlated", "id", &id])
        .output()
        .expect("running bpftool (scripts/deps.sh installs it)");
    assert!(
        out.status.success(),
        "bpftool prog dump xlated id {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The maps of each feature, whose references (`map[id:N]`) the xlated
/// dump of a program that carries it shows, and of one that does not, not.
const FEATURE_MAPS: &[(&str, &[&str])] = &[
    ("nat", &["rev_nat4", "rev_nat", "nat_endpoints"]),
    ("quic", &["quic_server_ids", "quic_sid_owners", "dip_quic"]),
    ("telemetry", &["dip_telemetry"]),
];

/// Which of `names` the program's translated code references.
fn referenced(lb: &LoadedLb, names: &[&str]) -> Vec<String> {
    use libbpf_rs::skel::Skel;
    let text = xlated(lb);
    lb.skel
        .object()
        .maps()
        .filter(|m| names.iter().any(|n| m.name().to_string_lossy() == *n))
        .filter(|m| {
            let id = m.info().unwrap().info.id;
            text.contains(&format!("map[id:{id}]"))
        })
        .map(|m| m.name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_program_carries_only_the_code_of_its_features() {
    let all = loader::load(&with_features(Features::ALL)).unwrap();
    let dsr = loader::load(&with_features(Features::DSR_ONLY)).unwrap();
    let nat = loader::load(&with_features(Features::NAT)).unwrap();
    for (feature, maps) in FEATURE_MAPS {
        let mut found = referenced(&all, maps);
        found.sort();
        let mut want: Vec<String> = maps.iter().map(|m| m.to_string()).collect();
        want.sort();
        assert_eq!(found, want, "the whole program must reach {feature}'s maps");
        assert_eq!(
            referenced(&dsr, maps),
            Vec::<String>::new(),
            "the dsr-only program reaches {feature}'s maps"
        );
    }
    assert!(!referenced(&nat, &["rev_nat4", "rev_nat"]).is_empty());
    assert_eq!(
        referenced(
            &nat,
            &[
                "quic_server_ids",
                "quic_sid_owners",
                "dip_quic",
                "dip_telemetry"
            ]
        ),
        Vec::<String>::new(),
        "the nat program reaches QUIC's or telemetry's maps"
    );
    let insns = |lb: &LoadedLb| {
        xlated(lb)
            .lines()
            .filter(|l| {
                l.trim_start()
                    .split(':')
                    .next()
                    .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .count()
    };
    let (all_n, nat_n, dsr_n) = (insns(&all), insns(&nat), insns(&dsr));
    assert!(
        dsr_n < nat_n && nat_n < all_n,
        "instructions: dsr only {dsr_n}, nat {nat_n}, all {all_n}"
    );
}

#[test]
fn a_wider_program_in_the_same_maps_keeps_connections_and_serves_what_it_adds() {
    let h = Harness::new(&with_features(Features::DSR_ONLY));
    let fx = &h.fx;
    // A dsr connection (VIP 2), established on the dsr-only program.
    let syn = tcp("192.0.2.90", 41000, "10.0.0.101", 80, TcpFlags::SYN);
    let dip = fx.predict(2, &syn.tuple()).unwrap().clone();
    let ack = Frame {
        l4: L4::Tcp(TcpFlags::ACK),
        ..syn.clone()
    };
    let data = Frame {
        l4: L4::Tcp(TcpFlags::PSH_ACK),
        ..syn.clone()
    }
    .payload(cases::PAYLOAD);
    for f in [&syn, &ack] {
        let r = h.run(&f.bytes());
        assert_eq!(r.action(), Some(XdpAction::Tx));
        assert_eq!(r.packet, cases::forwarded(f, &dip, DSR).bytes());
    }
    assert!(h.maps.conn(&syn.tuple().key()).unwrap().is_some());
    // A nat VIP's packet is not the dsr-only program's to handle: without
    // nat it would leave with the VIP's address, which is why weir serve
    // widens the program before it writes such a VIP.
    let nat_syn = tcp("192.0.2.91", 41001, "10.0.0.100", 80, TcpFlags::SYN);
    let nat_dip = fx.predict(0, &nat_syn.tuple()).unwrap().clone();
    let nat_out = cases::forwarded(&nat_syn, &nat_dip, NAT).bytes();
    assert_ne!(h.run(&nat_syn.bytes()).packet, nat_out);

    let wider = loader::load_into(&with_features(Features::ALL), &h.lb).unwrap();
    assert_eq!(wider.features, Features::ALL);
    assert_ne!(prog_id(&wider), prog_id(&h.lb));
    let hits = h.stats()[WEIR_STAT_CONN_HIT as usize];
    // The connection made before is a hit of the wider program, to its DIP.
    let r = testrun::run(&wider.skel.progs.weir_lb, &data.bytes(), 1).unwrap();
    assert_eq!(r.action(), Some(XdpAction::Tx));
    assert_eq!(r.packet, cases::forwarded(&data, &dip, DSR).bytes());
    assert_eq!(
        h.stats()[WEIR_STAT_CONN_HIT as usize],
        hits + 1,
        "the wider program counts in the same stats map"
    );
    // And nat works, its half-open entry in the same table.
    let nat_syn2 = tcp("192.0.2.92", 41002, "10.0.0.100", 80, TcpFlags::SYN);
    let nat_dip2 = fx.predict(0, &nat_syn2.tuple()).unwrap().clone();
    let r = testrun::run(&wider.skel.progs.weir_lb, &nat_syn2.bytes(), 1).unwrap();
    assert_eq!(r.action(), Some(XdpAction::Tx));
    assert_eq!(
        r.packet,
        cases::forwarded(&nat_syn2, &nat_dip2, NAT).bytes()
    );
    assert!(h.maps.half_open(&nat_syn2.tuple().key()).unwrap().is_some());
}

#[test]
fn a_wider_program_that_cannot_load_or_swap_leaves_the_running_one() {
    let opts = with_features(Features::DSR_ONLY);
    in_new_netns(
        &[
            "ip link add wfa0 type veth peer name wfa1",
            "ip link set wfa0 up",
            "ip link set wfa1 up",
        ],
        || {
            let h = Harness::new(&opts);
            let lo = weir_dataplane::iface::Iface::by_name("lo").unwrap();
            let dummy = weir_dataplane::iface::Iface::by_name("wfa0").unwrap();
            let ifaces = [
                ("lo".to_string(), lo.ifindex),
                ("wfa0".to_string(), dummy.ifindex),
            ];
            let mut att = attach_all(h.lb.prog_fd(), &ifaces, XdpMode::Generic).unwrap();
            let running = prog_id(&h.lb);

            // Options the loader refuses: no program, nothing swapped.
            let bad = LoadOptions {
                workers: loader::Workers {
                    count: 0,
                    ..Default::default()
                },
                ..with_features(Features::ALL)
            };
            assert!(loader::load_into(&bad, &h.lb).is_err());
            assert_eq!(attached_prog_id(lo.ifindex), Some(running));

            // Another program took weir's place on the second interface: the
            // swap fails there and the first interface gets the running
            // program back.
            let other = loader::load(&opts).unwrap();
            sh("ip link set dev wfa0 xdpgeneric off");
            let _other = attach_all(
                other.prog_fd(),
                &[("wfa0".to_string(), dummy.ifindex)],
                XdpMode::Generic,
            )
            .unwrap();
            let wider = loader::load_into(&with_features(Features::ALL), &h.lb).unwrap();
            let e = att.swap(wider.prog_fd()).unwrap_err();
            assert!(format!("{e:#}").contains("wfa0"), "{e:#}");
            assert_eq!(attached_prog_id(lo.ifindex), Some(running));
            assert_eq!(attached_prog_id(dummy.ifindex), Some(prog_id(&other)));

            // Where nothing interferes, the swap puts the wider program on
            // every interface.
            drop(att);
            let mut att = attach_all(h.lb.prog_fd(), &ifaces[..1], XdpMode::Generic).unwrap();
            att.swap(wider.prog_fd()).unwrap();
            assert_eq!(attached_prog_id(lo.ifindex), Some(prog_id(&wider)));
        },
    );
}
