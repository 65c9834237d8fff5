//! The cluster agent against a real etcd (started by the test, in a private
//! network namespace) and real data planes: election, shared table
//! versions on nodes that number their DIPs differently, a graceful leave,
//! a name used twice, etcd going away, and a join's bulk that only a
//! registered node gets.

mod common;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use weir_cluster::agent::{Agent, AgentOptions};
use weir_cluster::apply::{dip_ref as identity_of, live_slots};
use weir_cluster::record::DipRef;
use weir_cluster::sync::node::{SyncNode, SyncOptions};
use weir_cluster::sync::wire::Key;
use weir_core::dispatch::awfd::AwfdTable;
use weir_dataplane::loader::ConnTimeouts;
use weir_dataplane::maps::Maps;

fn options(name: &str, etcd: SocketAddr) -> AgentOptions {
    AgentOptions {
        node: name.into(),
        prefix: "/weir/test".into(),
        endpoints: vec![etcd],
        lease_ttl: Duration::from_secs(1),
        realtime: false,
        sync: None,
        run_dir: None,
    }
}

/// Proposes a table with `weights` by DIP index from node `n`'s slots.
fn propose(agent: &Agent, node: &Node, weights: &[(u8, u32)]) -> bool {
    let slots = live_slots(&node.maps, 0).unwrap();
    let pairs: Vec<(u32, u32)> = weights
        .iter()
        .map(|&(i, w)| (slots[&dip_ref(i)], w))
        .collect();
    let by_slot: HashMap<u32, DipRef> = slots.iter().map(|(d, s)| (*s, *d)).collect();
    agent
        .cluster()
        .propose(
            "web",
            vip_ref(),
            &AwfdTable::from_weights(&pairs).unwrap(),
            |s| by_slot.get(&s).copied(),
        )
        .unwrap()
}

fn versions(nodes: &[Node]) -> Vec<u32> {
    nodes
        .iter()
        .map(|n| n.maps.table_version(0).unwrap())
        .collect()
}

#[test]
fn the_leader_publishes_every_node_applies_and_another_takes_over() {
    in_private_netns(|| {
        let etcd = Etcd::start(23790);
        let layouts: [[(u8, u32); 3]; 3] = [
            [(1, 0), (2, 1), (3, 2)],
            [(1, 5), (2, 3), (3, 9)],
            [(1, 7), (2, 8), (3, 1)],
        ];
        let nodes: Vec<Node> = layouts
            .iter()
            .map(|l| {
                let n = Node::load(false, 4096);
                n.setup(l);
                n
            })
            .collect();
        let mut agents: Vec<Option<Agent>> = ["a", "b", "c"]
            .iter()
            .map(|n| Some(Agent::join(options(n, etcd.client)).unwrap()))
            .collect();
        for (a, n) in agents.iter().zip(&nodes) {
            let maps = Maps::pinned(&n.pin_dir).unwrap();
            a.as_ref()
                .unwrap()
                .cluster()
                .attach_tables(maps, Arc::new(Mutex::new(())), Duration::from_secs(5))
                .unwrap();
        }
        let leader = |agents: &[Option<Agent>]| -> Vec<usize> {
            (0..agents.len())
                .filter(|&i| agents[i].as_ref().is_some_and(|a| a.cluster().is_leader()))
                .collect()
        };
        assert!(wait_for(Duration::from_secs(5), || leader(&agents).len() == 1));
        let l = leader(&agents)[0];
        // A follower proposes nothing.
        let f = (l + 1) % 3;
        assert!(!propose(agents[f].as_ref().unwrap(), &nodes[f], &[(1, 1)]));

        // Two publications: every node ends at the cluster's version 2.
        assert!(propose(
            agents[l].as_ref().unwrap(),
            &nodes[l],
            &[(1, 1), (2, 1), (3, 1)]
        ));
        assert!(wait_for(Duration::from_secs(5), || versions(&nodes)
            == [1, 1, 1]
            && agents.iter().all(|a| a
                .as_ref()
                .unwrap()
                .cluster()
                .view()
                .this
                .tables
                .get("web")
                .and_then(|t| t.version)
                == Some(1))));
        assert!(propose(
            agents[l].as_ref().unwrap(),
            &nodes[l],
            &[(1, 4), (2, 1), (3, 2)]
        ));
        assert!(
            wait_for(Duration::from_secs(5), || versions(&nodes) == [2, 2, 2]),
            "{:?}",
            versions(&nodes)
        );
        // The same version means the same DIP for every new connection.
        for i in 0..500u32 {
            let (c, p) = (Ipv4Addr::new(10, 9, (i >> 8) as u8, i as u8), 41_000);
            let mut seen = Vec::new();
            for n in &nodes {
                n.connect(c, p);
                seen.push(n.dip_of(&flow_key(c, p)).unwrap());
            }
            assert!(seen.windows(2).all(|w| w[0] == w[1]), "flow {i}: {seen:?}");
        }
        let v = agents[f].as_ref().unwrap().cluster().view();
        assert_eq!(v.leader.as_deref(), Some(["a", "b", "c"][l]));
        assert_eq!(v.nodes.len(), 3);
        assert_eq!(v.tables[0].version, 2);
        assert!(v.etcd_ok);
        // Each node's weights follow the table, whatever its slots.
        for n in &nodes {
            let s = live_slots(&n.maps, 0).unwrap();
            let d = n.maps.dip(s[&dip_ref(1)]).unwrap().unwrap();
            assert_eq!((identity_of(&d), d.weight), (Some(dip_ref(1)), 4));
        }

        // A name in use by a live node is refused (after one TTL's wait).
        let twice = Agent::join(options("b", etcd.client)).unwrap_err();
        assert!(
            format!("{twice:#}").contains("in use by a live node"),
            "{twice:#}"
        );

        // The leader leaves: another node leads, and versions go on.
        agents[l] = None;
        assert!(wait_for(Duration::from_secs(5), || leader(&agents).len() == 1));
        let l2 = leader(&agents)[0];
        assert_ne!(l2, l);
        assert!(propose(
            agents[l2].as_ref().unwrap(),
            &nodes[l2],
            &[(1, 1), (2, 1), (3, 1)]
        ));
        let alive: Vec<usize> = (0..3).filter(|&i| i != l).collect();
        assert!(wait_for(Duration::from_secs(5), || alive
            .iter()
            .all(|&i| nodes[i].maps.table_version(0).unwrap() == 3)));
        assert_eq!(
            nodes[l].maps.table_version(0).unwrap(),
            2,
            "the node that left keeps its table"
        );

        // etcd goes away: the tables stay, and the view says so.
        drop(etcd);
        let a = agents[l2].as_ref().unwrap().cluster();
        assert!(wait_for(Duration::from_secs(5), || !a.view().etcd_ok));
        let v = a.view();
        assert!(
            v.etcd_down_since_unix_ms.is_some() && v.etcd_error.is_some(),
            "{v:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
        assert!(alive
            .iter()
            .all(|&i| nodes[i].maps.table_version(0).unwrap() == 3));
    });
}

#[test]
fn an_unreachable_etcd_at_start_is_a_clear_error() {
    in_private_netns(|| {
        // Nothing listens in this fresh namespace.
        let e = Agent::join(options("a", SocketAddr::from(([127, 0, 0, 1], 1)))).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("does not answer") && msg.contains("remove [cluster]"),
            "{msg}"
        );
    });
}

fn sync_node(node: &Node, name: &str, bind: SocketAddr) -> Arc<SyncNode> {
    Arc::new(
        SyncNode::start(
            SyncOptions {
                name: name.into(),
                key: Key::new((0..32).collect()).unwrap(),
                bind,
                pin_dir: node.pin_dir.clone(),
                budget: 4096,
                timeouts: ConnTimeouts::default(),
                realtime: false,
            },
            None,
        )
        .unwrap(),
    )
}

/// `weir serve`'s order on a node: register (the agent), take the
/// cluster's tables (the first read of etcd), start sync, then join.
fn member(node: &Node, name: &str, port: u16, etcd: SocketAddr) -> (Agent, Arc<SyncNode>) {
    let bind = SocketAddr::from(([127, 0, 0, 1], port));
    let agent = Agent::join(AgentOptions {
        sync: Some(bind),
        ..options(name, etcd)
    })
    .unwrap();
    let maps = Maps::pinned(&node.pin_dir).unwrap();
    agent
        .cluster()
        .attach_tables(maps, Arc::new(Mutex::new(())), Duration::from_secs(5))
        .unwrap();
    let sync = sync_node(node, name, bind);
    agent.cluster().attach_sync(sync.clone());
    (agent, sync)
}

#[test]
fn a_registered_node_gets_its_bulk_and_an_unregistered_one_does_not() {
    in_private_netns(|| {
        const N: u32 = 100;
        let etcd = Etcd::start(23800);
        let a = Node::load(false, 4096);
        a.setup(&[(1, 0), (2, 1), (3, 2)]);
        let b = Node::load(false, 4096);
        b.setup(&[(1, 5), (2, 3), (3, 9)]);
        for i in 0..N {
            a.connect(Ipv4Addr::new(10, 9, 0, i as u8), 42_000);
        }
        let (_agent_a, sync_a) = member(&a, "a", 7061, etcd.client);
        // B registers and joins at once: A may see B's registration a
        // little after B's first request, and B asks again until it does.
        let (_agent_b, sync_b) = member(&b, "b", 7062, etcd.client);
        let r = sync_b.join(Duration::from_secs(3));
        assert_eq!(r.from.as_deref(), Some("a"), "{r:?}");
        assert_eq!((r.total, r.received), (u64::from(N), u64::from(N)), "{r:?}");
        for i in 0..N {
            let k = flow_key(Ipv4Addr::new(10, 9, 0, i as u8), 42_000);
            assert!(a.dip_of(&k).is_some(), "flow {i} on a");
            assert_eq!(b.dip_of(&k), a.dip_of(&k), "flow {i}");
        }

        // A node with the cluster's key that never registered: A refuses
        // it, whatever it asks.
        let c = Node::load(false, 4096);
        c.setup(&[(1, 0), (2, 1), (3, 2)]);
        let sync_c = sync_node(&c, "c", SocketAddr::from(([127, 0, 0, 1], 7063)));
        sync_c
            .peers()
            .set(vec![("a".into(), sync_a.local_addr().unwrap())]);
        let r = sync_c.join(Duration::from_millis(500));
        assert_eq!((r.from, r.total, r.received), (None, 0, 0));
        assert_eq!(c.maps.conn_count(), 0);
        assert!(wait_for(Duration::from_secs(1), || sync_a
            .counters()
            .bulks_served
            == 1));
        let ca = sync_a.counters();
        assert!(ca.bulk_refused_unknown_member >= 3, "c asked again: {ca:?}");
        assert_eq!(
            (
                ca.bulks_served,
                ca.bulk_records_sent,
                ca.bulk_refused_stale_challenge
            ),
            (1, u64::from(N), 0),
            "{ca:?}"
        );
        assert!(ca.bulk_challenges >= 1, "{ca:?}");
    });
}
