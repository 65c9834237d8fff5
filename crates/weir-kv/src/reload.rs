//! `weir kv reload`: asks a running switch (on its metrics address) to
//! re-read its configuration file and waits for the answer, so that a
//! refused file fails the command (and `systemctl reload`) instead of hiding
//! in the switch's log.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Result};
use weir_http::client::{Call, Method};

/// What the switch changed; an error with its reason when it refused the
/// file or did not answer within `timeout_s` seconds.
pub fn request(metrics: SocketAddr, timeout_s: f64) -> Result<String> {
    if !(timeout_s.is_finite() && timeout_s > 0.0 && timeout_s <= 3600.0) {
        bail!(
            "--timeout {timeout_s}: give the seconds to wait for weir kv, more than 0 and at most 3600"
        );
    }
    let mut call = Call::new(Method::POST, "/api/v1/reload");
    call.deadline = Duration::from_secs_f64(timeout_s);
    let reply = call.send(metrics).map_err(|e| {
        anyhow::anyhow!("no weir kv answers on {metrics} (is it running? --metrics ADDR): {e:#}")
    })?;
    let json = reply.json()?;
    match (reply.status, json["changes"].as_str(), json["error"].as_str()) {
        (200, Some(changes), _) => Ok(format!("weir kv on {metrics} reloaded: {changes}")),
        (_, _, Some(why)) => bail!("weir kv on {metrics} refused the reload: {why}"),
        (status, _, _) => bail!(
            "{metrics}/api/v1/reload answered {status}: is this the metrics address of a weir kv? {:.200}",
            reply.body
        ),
    }
}
