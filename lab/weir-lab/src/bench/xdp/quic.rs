//! A QUIC short-header packet routed by the server ID in its connection ID
//! against a UDP datagram that hits its 5-tuple connection entry, on one
//! instance, interleaved in the same runs (the target: within
//! 1.2x). The instance's DIP serves a UDP VIP on the TCP VIP's address and
//! port, written before each half as plain UDP or as QUIC; both packets are
//! the same size, and the counters prove which path every repetition took.

use super::*;
use weir_core::quic_lb::CidLayout;
use weir_core::wire::Frame;

/// The VIP's id in this part of the bench (the TCP VIP has 0).
const QUIC_VIP_ID: u32 = 1;
const LAYOUT: CidLayout = CidLayout {
    config_id: 0,
    server_id_len: 2,
};
const SERVER_ID: [u8; 2] = [0x0b, 0x01];

/// The datagram both halves send: from connection `i`'s client, a 1-RTT
/// packet whose DCID carries the DIP's server ID, padded to the frame size
/// of the TCP rows.
fn datagram(family: Family, i: u64) -> Vec<u8> {
    let f = flow(family, i);
    let mut payload = vec![0x41];
    payload.extend(LAYOUT.encode(&SERVER_ID, &[0x5a; 5]));
    let room = family.frame_len() - Frame::udp(f.src, f.sport, f.dst, f.dport).bytes().len();
    payload.resize(room.max(payload.len()), 0xa5);
    Frame::udp(f.src, f.sport, f.dst, f.dport)
        .macs(CLIENT_MAC, LB_MAC)
        .payload(&payload)
        .bytes()
}

/// Makes the instance's UDP VIP plain (`quic` false) or QUIC.
fn set_vip(inst: &Inst, mode: Mode, quic: bool) -> Result<()> {
    let (addr, family) = addr_words(inst.family.vip());
    let key = weir_vip_key {
        addr,
        port: VIP_PORT.to_be(),
        proto: Proto::Udp.number(),
        family,
    };
    let vip = weir_vip {
        vip_id: QUIC_VIP_ID,
        mode: mode.raw(),
        quic_sid_len: if quic { LAYOUT.server_id_len } else { 0 },
        quic_config_id: LAYOUT.config_id,
        pad: 0,
    };
    inst.maps.put_vip(&key, &vip)
}

/// One verdict per non-encapsulating mode: the CID-routed packet's ns over
/// the 5-tuple hit's.
pub(super) fn quic_against_udp(
    inst: &Inst,
    modes: &[Mode],
    args: &XdpBenchArgs,
    progress: &Progress,
) -> Result<Vec<QuicVerdict>> {
    let table = AwfdTable::from_weights(&[(0, 1)]).map_err(anyhow::Error::msg)?;
    inst.maps
        .publish_table(QUIC_VIP_ID, TABLE_VERSION, &table)?;
    let mut key = weir_quic_sid_key {
        vip_id: QUIC_VIP_ID,
        ..Default::default()
    };
    key.sid[..SERVER_ID.len()].copy_from_slice(&SERVER_ID);
    let route = weir_quic_route {
        dip_id: 0,
        dip_gen: DIP_GEN,
    };
    inst.maps
        .sync_quic_server_ids(&[(key, route)].into_iter().collect())?;
    let pkt = datagram(inst.family, inst.size + 900_000);
    let mut out = Vec::new();
    for &mode in modes.iter().filter(|m| !m.encapsulates()) {
        progress.set_message(format!(
            "{} QUIC CID-routed against UDP 5-tuple hit, {} mode",
            inst.family.name(),
            mode.name()
        ));
        // The first datagram installs the 5-tuple entry the UDP half hits.
        set_vip(inst, mode, false)?;
        timed(inst.prog(), &pkt, 1, XdpAction::Redirect)?;
        let before = inst.maps.stats()?;
        let routed_before = inst.maps.vip_quic(QUIC_VIP_ID)?.cid_routed;
        // times[run] = (udp hit, quic routed), ns per packet.
        let mut times = Vec::new();
        for r in 0..args.runs {
            let mut t = [0.0; 2];
            for k in 0..2 {
                let quic = (k + r) % 2 == 1;
                set_vip(inst, mode, quic)?;
                t[usize::from(quic)] = timed(inst.prog(), &pkt, args.repeat, XdpAction::Redirect)?;
            }
            times.push(t);
        }
        let reps = u64::from(args.runs) * u64::from(args.repeat);
        let after = inst.maps.stats()?;
        check_delta(
            &before,
            &after,
            WEIR_STAT_REDIRECT,
            2 * reps,
            "XDP_REDIRECT",
        )?;
        check_delta(&before, &after, WEIR_STAT_CONN_HIT, reps, "connection hits")?;
        let routed = inst.maps.vip_quic(QUIC_VIP_ID)?.cid_routed - routed_before;
        ensure!(
            routed == reps,
            "the counters disagree with the benchmark: {routed} packets routed by connection ID, expected {reps}"
        );
        let median = |v: Vec<f64>| stats(&v).1;
        let over = median(times.iter().map(|t| t[1] / t[0].max(1e-9)).collect());
        out.push(QuicVerdict {
            family: inst.family,
            mode,
            measure: "hot",
            udp_hit_ns: median(times.iter().map(|t| t[0]).collect()),
            cid_routed_ns: median(times.iter().map(|t| t[1]).collect()),
            over_udp_hit: over,
            over_udp_hit_ok: over <= TARGET_QUIC_OVER_UDP_HIT,
        });
    }
    Ok(out)
}
