//! Configuration texts the unit tests of every section start from.

use crate::error::ConfigError;
use crate::load::Config;

pub const GOOD: &str = r#"
[dataplane]
interfaces = ["veth0"]

[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
protocol = "tcp"
mode = "nat"

  [[vip.dip]]
  address = "10.1.0.1"
  port = 8080

  [[vip.dip]]
  address = "10.1.0.2"
  weight = 2
"#;

pub fn err_of(src: &str) -> ConfigError {
    Config::parse("t.toml", src).unwrap_err()
}

/// GOOD with its VIP and DIPs in IPv6.
pub fn good6() -> String {
    GOOD.replace("10.0.0.100", "2001:db8::100")
        .replace("10.1.0.", "2001:db8:1::")
}

/// GOOD with `keys` added to its [dataplane] (from line 4 on).
pub fn dataplane_with(keys: &str) -> String {
    GOOD.replace(
        "interfaces = [\"veth0\"]\n",
        &format!("interfaces = [\"veth0\"]\n{keys}\n"),
    )
}
