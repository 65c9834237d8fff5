//! The management API's changes to the configuration file, made on its
//! TOML document (toml_edit) so that comments, order and layout survive:
//! add a DIP, remove one, set a weight. VIPs and DIPs are found in the
//! configuration the file holds ([`Config`], parsed from the same text, so
//! its `vips[i].dips[j]` is the document's `[[vip]]` i, `[[vip.dip]]` j).
//! What the change makes is validated afterwards as a whole
//! ([`crate::live::Live::edit`]); here only what the file's validation
//! cannot say: which VIP and DIP a request means.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, TableLike, Value};
use weir_config::{Config, Mode, Vip};

use crate::live::ChangeError;

/// A DIP as a request names it: `ADDR`, `ADDR:PORT` or `[ADDR6]:PORT`. The
/// port is the one the DIP serves on (its own in nat, the VIP's in dsr);
/// without it the address alone must pick the DIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DipRef {
    pub address: IpAddr,
    pub port: Option<u16>,
}

impl FromStr for DipRef {
    type Err = String;

    fn from_str(s: &str) -> Result<DipRef, String> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(DipRef {
                address: a.ip(),
                port: Some(a.port()),
            });
        }
        if let Ok(address) = s.trim_start_matches('[').trim_end_matches(']').parse() {
            return Ok(DipRef {
                address,
                port: None,
            });
        }
        Err(format!(
            "`{s}` is not a DIP: give ADDRESS, ADDRESS:PORT or [IPv6]:PORT"
        ))
    }
}

impl fmt::Display for DipRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(p) => write!(f, "{}", SocketAddr::new(self.address, p)),
            None => write!(f, "{}", self.address),
        }
    }
}

/// `POST /api/v1/vips/{vip}/dips`: the `[[vip.dip]]` keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewDip {
    pub address: IpAddr,
    /// nat only; default the VIP's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Default 1; 0 adds it drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<SocketAddr>,
    /// QUIC VIP: the server ID (hex) the DIP's connection IDs carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<String>,
}

/// `PUT /api/v1/vips/{vip}/dips/{dip}/weight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetWeight {
    pub weight: u32,
}

/// The index of the VIP named `name`.
pub fn find_vip(cfg: &Config, name: &str) -> Result<usize, ChangeError> {
    cfg.vips
        .iter()
        .position(|v| v.name.get_ref() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = cfg.vips.iter().map(|v| v.name.get_ref().as_str()).collect();
            ChangeError::NotFound(format!(
                "no VIP named `{name}`; the VIPs are: {}",
                if names.is_empty() {
                    "(none)".to_string()
                } else {
                    names.join(", ")
                }
            ))
        })
}

/// The index of the DIP `dip` names in `vip`.
pub fn find_dip(vip: &Vip, dip: DipRef) -> Result<usize, ChangeError> {
    let hits: Vec<usize> = (0..vip.dips.len())
        .filter(|&j| {
            let d = &vip.dips[j];
            *d.address.get_ref() == dip.address && dip.port.is_none_or(|p| d.service_port(vip) == p)
        })
        .collect();
    match hits[..] {
        [j] => Ok(j),
        [] => Err(ChangeError::NotFound(format!(
            "VIP `{}` has no DIP {dip}; its DIPs are: {}",
            vip.name.get_ref(),
            dip_list(vip)
        ))),
        _ => Err(ChangeError::Conflict(format!(
            "VIP `{}` has {} DIPs at {}: name one with its port ({})",
            vip.name.get_ref(),
            hits.len(),
            dip.address,
            dip_list(vip)
        ))),
    }
}

/// `ADDR:PORT` of every DIP of `vip`.
fn dip_list(vip: &Vip) -> String {
    if vip.dips.is_empty() {
        return "(none)".into();
    }
    vip.dips
        .iter()
        .map(|d| SocketAddr::new(*d.address.get_ref(), d.service_port(vip)).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `i`-th table of an array of tables or of inline tables.
fn nth(item: &mut Item, i: usize) -> Option<&mut dyn TableLike> {
    match item {
        Item::ArrayOfTables(a) => a.get_mut(i).map(|t| t as &mut dyn TableLike),
        Item::Value(Value::Array(a)) => a
            .get_mut(i)?
            .as_inline_table_mut()
            .map(|t| t as &mut dyn TableLike),
        _ => None,
    }
}

/// The document's `[[vip]]` i; the caller found i in the same file.
fn vip_table(doc: &mut DocumentMut, i: usize) -> Result<&mut dyn TableLike, ChangeError> {
    doc.get_mut("vip")
        .and_then(|v| nth(v, i))
        .ok_or_else(|| ChangeError::Conflict(format!("vip[{i}] is not a table in the file")))
}

/// The document's `[[vip.dip]]` j of `[[vip]]` i, and whether it is an
/// inline table.
fn dip_table(
    doc: &mut DocumentMut,
    i: usize,
    j: usize,
) -> Result<(&mut dyn TableLike, bool), ChangeError> {
    let dips = vip_table(doc, i)?.get_mut("dip");
    let inline = matches!(dips, Some(Item::Value(_)));
    dips.and_then(|d| nth(d, j))
        .map(|t| (t, inline))
        .ok_or_else(|| {
            ChangeError::Conflict(format!("vip[{i}].dip[{j}] is not a table in the file"))
        })
}

/// The indentation after the last line break of a decor prefix.
fn indent_of(prefix: Option<&str>) -> String {
    let p = prefix.unwrap_or("");
    p.rsplit('\n').next().unwrap_or("").to_string()
}

/// Sets `key` to `v`, keeping the old value's spacing and trailing comment.
/// A new key is indented like the table's first key; in an inline table it
/// goes before the space that closes the table.
fn set((t, inline): (&mut dyn TableLike, bool), key: &str, v: impl Into<Value>) {
    let mut v: Value = v.into();
    if let Some(old) = t.get_mut(key).and_then(Item::as_value_mut) {
        *v.decor_mut() = old.decor().clone();
        *old = v;
        return;
    }
    if inline {
        let last = t.iter().last().map(|(k, _)| k.to_string());
        if let Some(lv) = last
            .and_then(|k| t.get_mut(&k))
            .and_then(Item::as_value_mut)
        {
            if let Some(closing) = lv.decor().suffix().cloned() {
                lv.decor_mut().set_suffix("");
                v.decor_mut().set_suffix(closing);
            }
        }
        t.insert(key, Item::Value(v));
        return;
    }
    let indent = t
        .iter()
        .next()
        .and_then(|(k, _)| t.key(k))
        .map(|k| indent_of(k.leaf_decor().prefix().and_then(|p| p.as_str())))
        .unwrap_or_default();
    t.insert(key, Item::Value(v));
    if let Some(mut k) = t.key_mut(key) {
        k.leaf_decor_mut().set_prefix(indent);
    }
}

/// Adds `new` to VIP `vip_name`; says what it did.
pub fn add_dip(
    cfg: &Config,
    doc: &mut DocumentMut,
    vip_name: &str,
    new: &NewDip,
) -> Result<String, ChangeError> {
    let i = find_vip(cfg, vip_name)?;
    let vip = &cfg.vips[i];
    let port = new.port.unwrap_or(*vip.port.get_ref());
    let name = SocketAddr::new(new.address, port);
    if vip
        .dips
        .iter()
        .any(|d| *d.address.get_ref() == new.address && d.service_port(vip) == port)
    {
        return Err(ChangeError::Conflict(format!(
            "VIP `{vip_name}` already has DIP {name}; set its weight instead"
        )));
    }
    let mut keys: Vec<(&str, Value)> = vec![("address", new.address.to_string().into())];
    if let Some(p) = new.port {
        keys.push(("port", i64::from(p).into()));
    }
    if let Some(w) = new.weight {
        keys.push(("weight", i64::from(w).into()));
    }
    if let Some(m) = &new.mac {
        keys.push(("mac", m.as_str().into()));
    }
    if let Some(a) = new.agent {
        keys.push(("agent", a.to_string().into()));
    }
    if let Some(id) = &new.server_id {
        keys.push(("server_id", id.as_str().into()));
    }
    // VIPs written inline (`vip = [{ ... }]`) can only hold inline DIPs.
    let inline_vips = matches!(doc.get("vip"), Some(Item::Value(_)));
    let inline = || {
        let mut t = InlineTable::new();
        for (k, v) in keys.clone() {
            t.insert(k, v);
        }
        t
    };
    let vt = vip_table(doc, i)?;
    match vt.get_mut("dip") {
        Some(Item::Value(Value::Array(a))) => a.push(inline()),
        Some(Item::ArrayOfTables(a)) => push_like_siblings(a, keys),
        Some(_) => {
            return Err(ChangeError::Conflict(format!(
                "vip[{i}].dip in the file is neither [[vip.dip]] tables nor an array of tables"
            )))
        }
        None if inline_vips => {
            let mut a = Array::new();
            a.push(inline());
            vt.insert("dip", Item::Value(Value::Array(a)));
        }
        None => {
            let mut a = ArrayOfTables::new();
            push_like_siblings(&mut a, keys);
            vt.insert("dip", Item::ArrayOfTables(a));
        }
    }
    let weight = new.weight.unwrap_or(1);
    // A nat DIP serves on a port of its own; none given means the VIP's,
    // which the backend may not listen on: say so.
    let port_note = match (vip.mode, new.port) {
        (Mode::Nat, None) => " (the VIP's port; give a port to change it)",
        _ => "",
    };
    let health_note = match (&vip.health, weight) {
        (Some(_), 1..) => "; it gets new connections once its first health check passes",
        _ => "",
    };
    Ok(format!(
        "VIP {vip_name}: added DIP {name}{port_note} with weight {weight}{health_note}"
    ))
}

/// Appends a `[[vip.dip]]` table with `keys`, indented like the last one.
fn push_like_siblings(a: &mut ArrayOfTables, keys: Vec<(&str, Value)>) {
    let (header, key_indent) = match a.iter().last() {
        Some(last) => (
            indent_of(last.decor().prefix().and_then(|p| p.as_str())),
            last.iter()
                .next()
                .and_then(|(k, _)| last.key(k))
                .map(|k| indent_of(k.leaf_decor().prefix().and_then(|p| p.as_str())))
                .unwrap_or_default(),
        ),
        None => (String::new(), String::new()),
    };
    let mut t = Table::new();
    t.decor_mut().set_prefix(format!("\n{header}"));
    for (k, v) in keys {
        t.insert(k, Item::Value(v));
        if let Some(mut key) = t.key_mut(k) {
            key.leaf_decor_mut().set_prefix(key_indent.clone());
        }
    }
    a.push(t);
}

/// Removes DIP `dip` from VIP `vip_name`.
pub fn remove_dip(
    cfg: &Config,
    doc: &mut DocumentMut,
    vip_name: &str,
    dip: DipRef,
) -> Result<String, ChangeError> {
    let i = find_vip(cfg, vip_name)?;
    let vip = &cfg.vips[i];
    let j = find_dip(vip, dip)?;
    let d = &vip.dips[j];
    let name = SocketAddr::new(*d.address.get_ref(), d.service_port(vip));
    match vip_table(doc, i)?.get_mut("dip") {
        Some(Item::ArrayOfTables(a)) if j < a.len() => a.remove(j),
        Some(Item::Value(Value::Array(a))) if j < a.len() => {
            a.remove(j);
        }
        _ => {
            return Err(ChangeError::Conflict(format!(
                "vip[{i}].dip[{j}] is not a table in the file"
            )))
        }
    }
    Ok(format!("VIP {vip_name}: removed DIP {name}"))
}

/// Sets the weight of DIP `dip` of VIP `vip_name` (0 drains it).
pub fn set_weight(
    cfg: &Config,
    doc: &mut DocumentMut,
    vip_name: &str,
    dip: DipRef,
    weight: u32,
) -> Result<String, ChangeError> {
    let i = find_vip(cfg, vip_name)?;
    let vip = &cfg.vips[i];
    let j = find_dip(vip, dip)?;
    let d = &vip.dips[j];
    let name = SocketAddr::new(*d.address.get_ref(), d.service_port(vip));
    let before = *d.weight.get_ref();
    if before == weight {
        return Ok(match weight {
            0 => format!("VIP {vip_name}: DIP {name} is drained already (weight 0): unchanged"),
            w => format!("VIP {vip_name}: DIP {name} has weight {w} already: unchanged"),
        });
    }
    set(dip_table(doc, i, j)?, "weight", i64::from(weight));
    Ok(match weight {
        0 => format!("VIP {vip_name}: drained DIP {name} (weight {before} -> 0)"),
        w => format!("VIP {vip_name}: DIP {name} weight {before} -> {w}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"# the demo's configuration
[dataplane]
interfaces = ["wc0"]  # towards the client

# HTTP over NAT
[[vip]]
name = "web"
address = "10.77.100.1"
port = 80
protocol = "tcp"
mode = "nat"

  # backend one
  [[vip.dip]]
  address = "10.77.1.2"
  port = 8080
  weight = 1   # primary

  [[vip.dip]]
  address = "10.77.2.2"
  port = 8080

# DNS, direct return
[[vip]]
name = "dns"
address = "10.77.100.2"
port = 53
protocol = "udp"
mode = "dsr"
dip = [{ address = "10.77.1.2" }]
"#;

    fn run(
        f: impl FnOnce(&Config, &mut DocumentMut) -> Result<String, ChangeError>,
    ) -> Result<(String, String, Config), ChangeError> {
        let cfg = Config::parse("t.toml", FILE).unwrap();
        let mut doc: DocumentMut = FILE.parse().unwrap();
        let said = f(&cfg, &mut doc)?;
        let text = doc.to_string();
        let next = Config::parse("t.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        Ok((said, text, next))
    }

    fn dip(s: &str) -> DipRef {
        s.parse().unwrap()
    }

    #[test]
    fn dips_are_named_by_address_and_port() {
        assert_eq!(
            dip("10.0.0.1"),
            DipRef {
                address: "10.0.0.1".parse().unwrap(),
                port: None
            }
        );
        assert_eq!(dip("10.0.0.1:80").port, Some(80));
        assert_eq!(dip("fd00::1").port, None);
        assert_eq!(dip("[fd00::1]").port, None);
        assert_eq!(dip("[fd00::1]:8080").port, Some(8080));
        assert_eq!(dip("[fd00::1]:8080").to_string(), "[fd00::1]:8080");
        for bad in ["", "web", "10.0.0.1:", "10.0.0.1:99999", "10.0.0"] {
            let e = bad.parse::<DipRef>().unwrap_err();
            assert!(e.contains("is not a DIP"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_weight_change_keeps_comments_and_layout() {
        let (said, text, next) =
            run(|c, d| set_weight(c, d, "web", dip("10.77.1.2:8080"), 3)).unwrap();
        assert_eq!(said, "VIP web: DIP 10.77.1.2:8080 weight 1 -> 3");
        assert_eq!(
            text,
            FILE.replace("weight = 1   # primary", "weight = 3   # primary")
        );
        assert_eq!(*next.vips[0].dips[0].weight.get_ref(), 3);
        // A DIP without the key gets one, indented like its neighbours.
        let (said, text, _) = run(|c, d| set_weight(c, d, "web", dip("10.77.2.2"), 0)).unwrap();
        assert_eq!(said, "VIP web: drained DIP 10.77.2.2:8080 (weight 1 -> 0)");
        assert_eq!(
            text,
            FILE.replace(
                "  address = \"10.77.2.2\"\n  port = 8080\n",
                "  address = \"10.77.2.2\"\n  port = 8080\n  weight = 0\n"
            )
        );
        // Inline tables too.
        let (_, text, next) = run(|c, d| set_weight(c, d, "dns", dip("10.77.1.2"), 2)).unwrap();
        assert!(
            text.contains("dip = [{ address = \"10.77.1.2\", weight = 2 }]"),
            "{text}"
        );
        assert_eq!(*next.vips[1].dips[0].weight.get_ref(), 2);
    }

    #[test]
    fn an_added_dip_goes_after_its_siblings_and_the_rest_stays() {
        let new = NewDip {
            address: "10.77.3.2".parse().unwrap(),
            port: Some(8080),
            weight: Some(2),
            mac: None,
            agent: Some("10.77.3.2:9300".parse().unwrap()),
            server_id: None,
        };
        let (said, text, next) = run(|c, d| add_dip(c, d, "web", &new)).unwrap();
        assert_eq!(said, "VIP web: added DIP 10.77.3.2:8080 with weight 2");
        let added = "  port = 8080\n\n  [[vip.dip]]\n  address = \"10.77.3.2\"\n  port = 8080\n  \
                     weight = 2\n  agent = \"10.77.3.2:9300\"\n\n# DNS, direct return";
        assert_eq!(
            text,
            FILE.replacen("  port = 8080\n\n# DNS, direct return", added, 1),
            "{text}"
        );
        assert_eq!(next.vips[0].dips.len(), 3);
        assert_eq!(next.vips[1].dips.len(), 1);
        // An inline array stays inline.
        let new = NewDip {
            address: "10.77.2.2".parse().unwrap(),
            port: None,
            weight: None,
            mac: None,
            agent: None,
            server_id: None,
        };
        let (_, text, next) = run(|c, d| add_dip(c, d, "dns", &new)).unwrap();
        assert!(
            text.contains("dip = [{ address = \"10.77.1.2\" }, { address = \"10.77.2.2\" }]"),
            "{text}"
        );
        assert_eq!(next.vips[1].dips.len(), 2);
    }

    #[test]
    fn a_quic_dip_is_added_with_its_server_id_and_a_taken_one_fails_validation() {
        let file = "[dataplane]\ninterfaces = [\"veth0\"]\n\n[[vip]]\nname = \"h3\"\n\
                    address = \"10.77.100.3\"\nport = 443\nprotocol = \"udp\"\nmode = \"dsr\"\n\
                    quic = { server_id_len = 2 }\n\n  [[vip.dip]]\n  address = \"10.77.1.2\"\n  \
                    server_id = \"0001\"\n";
        let cfg = Config::parse("t.toml", file).unwrap();
        let add = |id: &str| {
            let mut doc: DocumentMut = file.parse().unwrap();
            let new = NewDip {
                address: "10.77.2.2".parse().unwrap(),
                port: None,
                weight: None,
                mac: None,
                agent: None,
                server_id: Some(id.into()),
            };
            add_dip(&cfg, &mut doc, "h3", &new).unwrap();
            doc.to_string()
        };
        let text = add("0002");
        assert!(
            text.ends_with("  [[vip.dip]]\n  address = \"10.77.2.2\"\n  server_id = \"0002\"\n"),
            "{text}"
        );
        let next = Config::parse("t.toml", &text).unwrap();
        let v = &next.vips[0];
        assert_eq!(v.dips[1].server_id_octets(v), Some(vec![0, 2]));
        // The daemon re-validates the edited file: a taken ID is refused.
        let e = Config::parse("t.toml", &add("0001")).unwrap_err();
        assert_eq!(e.field, "vip[0].dip[1].server_id", "{e}");
    }

    #[test]
    fn a_nat_dip_without_a_port_is_told_it_got_the_vips() {
        let new = NewDip {
            address: "10.77.3.2".parse().unwrap(),
            port: None,
            weight: None,
            mac: None,
            agent: None,
            server_id: None,
        };
        let (said, _, next) = run(|c, d| add_dip(c, d, "web", &new)).unwrap();
        assert_eq!(
            said,
            "VIP web: added DIP 10.77.3.2:80 (the VIP's port; give a port to change it) with \
             weight 1"
        );
        assert_eq!(next.vips[0].dips[2].service_port(&next.vips[0]), 80);
        // dsr: a DIP serves on the VIP's port by definition; nothing to say.
        let (said, _, _) = run(|c, d| {
            add_dip(
                c,
                d,
                "dns",
                &NewDip {
                    address: "10.77.2.2".parse().unwrap(),
                    ..new.clone()
                },
            )
        })
        .unwrap();
        assert_eq!(said, "VIP dns: added DIP 10.77.2.2:53 with weight 1");
    }

    #[test]
    fn a_weight_that_is_already_so_changes_nothing() {
        let (said, text, _) =
            run(|c, d| set_weight(c, d, "web", dip("10.77.1.2:8080"), 1)).unwrap();
        assert_eq!(
            said,
            "VIP web: DIP 10.77.1.2:8080 has weight 1 already: unchanged"
        );
        assert_eq!(text, FILE);
        // A DIP without the key has weight 1: no key is added either.
        let (said, text, _) = run(|c, d| set_weight(c, d, "web", dip("10.77.2.2"), 1)).unwrap();
        assert!(said.ends_with("unchanged"), "{said}");
        assert_eq!(text, FILE);
    }

    #[test]
    fn the_first_dip_of_a_vip_without_any() {
        let empty = FILE.replace("dip = [{ address = \"10.77.1.2\" }]\n", "");
        let cfg = Config::parse("t.toml", &empty).unwrap();
        let mut doc: DocumentMut = empty.parse().unwrap();
        let new = NewDip {
            address: "10.77.1.2".parse().unwrap(),
            port: None,
            weight: None,
            mac: None,
            agent: None,
            server_id: None,
        };
        add_dip(&cfg, &mut doc, "dns", &new).unwrap();
        let text = doc.to_string();
        assert!(
            text.ends_with("mode = \"dsr\"\n\n[[vip.dip]]\naddress = \"10.77.1.2\"\n"),
            "{text}"
        );
        let next = Config::parse("t.toml", &text).unwrap();
        assert_eq!(next.vips[1].dips.len(), 1);
    }

    #[test]
    fn a_removed_dip_takes_only_its_own_lines() {
        let (said, text, next) = run(|c, d| remove_dip(c, d, "web", dip("10.77.1.2"))).unwrap();
        assert_eq!(said, "VIP web: removed DIP 10.77.1.2:8080");
        let gone = "  # backend one\n  [[vip.dip]]\n  address = \"10.77.1.2\"\n  port = 8080\n  \
                    weight = 1   # primary\n\n";
        assert_eq!(text, FILE.replacen(gone, "", 1), "{text}");
        assert_eq!(next.vips[0].dips.len(), 1);
        let (_, text, _) = run(|c, d| remove_dip(c, d, "dns", dip("10.77.1.2:53"))).unwrap();
        assert!(text.contains("dip = []"), "{text}");
    }

    #[test]
    fn requests_that_name_nothing_or_too_much_are_refused() {
        let e = run(|c, d| set_weight(c, d, "api", dip("10.77.1.2"), 1)).unwrap_err();
        assert_eq!(
            e,
            ChangeError::NotFound("no VIP named `api`; the VIPs are: web, dns".into())
        );
        let e = run(|c, d| remove_dip(c, d, "web", dip("10.77.9.2"))).unwrap_err();
        assert_eq!(
            e,
            ChangeError::NotFound(
                "VIP `web` has no DIP 10.77.9.2; its DIPs are: 10.77.1.2:8080, 10.77.2.2:8080"
                    .into()
            )
        );
        let e = run(|c, d| remove_dip(c, d, "web", dip("10.77.1.2:80"))).unwrap_err();
        assert!(matches!(e, ChangeError::NotFound(_)), "{e}");
        let twice = FILE.replace(
            "  address = \"10.77.2.2\"\n  port = 8080",
            "  address = \"10.77.1.2\"\n  port = 8081",
        );
        let cfg = Config::parse("t.toml", &twice).unwrap();
        let mut doc: DocumentMut = twice.parse().unwrap();
        let e = set_weight(&cfg, &mut doc, "web", dip("10.77.1.2"), 2).unwrap_err();
        assert!(
            matches!(&e, ChangeError::Conflict(m) if m.contains("2 DIPs at 10.77.1.2: name one with its port")),
            "{e}"
        );
        let dup = NewDip {
            address: "10.77.2.2".parse().unwrap(),
            port: Some(8080),
            weight: None,
            mac: None,
            agent: None,
            server_id: None,
        };
        let e = run(|c, d| add_dip(c, d, "web", &dup)).unwrap_err();
        assert!(
            matches!(&e, ChangeError::Conflict(m) if m.contains("already has DIP 10.77.2.2:8080")),
            "{e}"
        );
    }

    #[test]
    fn request_bodies_are_strict() {
        let ok: NewDip = serde_json::from_str(r#"{"address": "10.0.0.1", "weight": 0}"#).unwrap();
        assert_eq!(ok.weight, Some(0));
        for bad in [
            r#"{"address": "10.0.0"}"#,
            r#"{"address": "10.0.0.1", "wieght": 1}"#,
            r#"{"address": "10.0.0.1", "weight": -1}"#,
            r#"{"address": "10.0.0.1", "port": 70000}"#,
            r#"{"address": "10.0.0.1", "agent": "10.0.0.1"}"#,
            r#"{"port": 80}"#,
            r#""10.0.0.1""#,
        ] {
            assert!(serde_json::from_str::<NewDip>(bad).is_err(), "{bad}");
        }
        for bad in [
            r#"{"weight": "3"}"#,
            r#"{"weight": 1.5}"#,
            r#"{}"#,
            r#"{"weight": 1, "x": 2}"#,
        ] {
            assert!(serde_json::from_str::<SetWeight>(bad).is_err(), "{bad}");
        }
    }
}
