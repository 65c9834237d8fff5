//! Configuration text for weir_lab's topology: the client's interface
//! `wc0`, backend `b`'s interface `wb{b}` and address `10.77.{b}.2`.

/// `[dataplane]` over `wc0` and `wb1`..`wb{backends}`, then the `extra`
/// keys (lines of the same table).
pub fn dataplane(backends: usize, extra: &str) -> String {
    let interfaces: Vec<String> = std::iter::once("\"wc0\"".to_string())
        .chain((1..=backends).map(|b| format!("\"wb{b}\"")))
        .collect();
    format!(
        "[dataplane]\ninterfaces = [{}]\n{extra}\n",
        interfaces.join(", ")
    )
}

/// A `[[vip]]` table; its DIPs follow ([`dip`]).
pub fn vip(name: &str, address: &str, port: u16, protocol: &str, mode: &str) -> String {
    format!(
        "\n[[vip]]\nname = \"{name}\"\naddress = \"{address}\"\nport = {port}\n\
         protocol = \"{protocol}\"\nmode = \"{mode}\"\n"
    )
}

/// A `[[vip.dip]]` table for backend `b`, with `keys` (lines, may be empty).
pub fn dip(b: usize, keys: &str) -> String {
    let keys = if keys.is_empty() {
        String::new()
    } else {
        format!("{keys}\n")
    };
    format!("[[vip.dip]]\naddress = \"10.77.{b}.2\"\n{keys}")
}

/// The lab's three services over the given (backend, weight) DIPs: `web`
/// (nat, TCP 10.77.100.1:80 to the backends' port 8080), `web-dsr` (dsr,
/// TCP 10.77.100.2:80) and `dns` (nat, UDP 10.77.100.1:5353).
pub fn lab_services(dips: &[(usize, u32)]) -> String {
    let mut s = String::new();
    for (name, address, port, protocol, mode) in [
        ("web", "10.77.100.1", 80, "tcp", "nat"),
        ("web-dsr", "10.77.100.2", 80, "tcp", "dsr"),
        ("dns", "10.77.100.1", 5353, "udp", "nat"),
    ] {
        s += &vip(name, address, port, protocol, mode);
        for (b, w) in dips {
            let dip_port = if name == "web" { "port = 8080\n" } else { "" };
            s += &dip(*b, &format!("{dip_port}weight = {w}"));
        }
    }
    s
}
