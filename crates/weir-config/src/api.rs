//! `[api]` and `[metrics]`: the management API and the Prometheus
//! endpoint of `weir serve`.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Checker, ConfigError, ConfigWarning};

fn metrics_listen() -> Spanned<std::net::SocketAddr> {
    Spanned::new(0..0, std::net::SocketAddr::from(([127, 0, 0, 1], 9100)))
}

/// `[metrics]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsCfg {
    /// Address of the Prometheus text endpoint (`GET /metrics`).
    #[serde(default = "metrics_listen")]
    pub listen: Spanned<std::net::SocketAddr>,
}

/// Where the management API answers unless `[api] listen` says otherwise.
pub const DEFAULT_API_LISTEN: &str = "127.0.0.1:9190";
/// Tokens shorter than this load with a warning.
const SHORT_TOKEN: usize = 16;

fn api_listen() -> Spanned<String> {
    Spanned::new(0..0, DEFAULT_API_LISTEN.to_string())
}

/// `[api]`: the management API of `weir serve`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiCfg {
    /// `IP:port`, or `"off"`. A non-loopback address needs a token.
    #[serde(default = "api_listen")]
    pub listen: Spanned<String>,
    /// Writes need `Authorization: Bearer <token>`.
    pub token: Option<Spanned<String>>,
    /// A file holding the token (surrounding whitespace is ignored); read
    /// when the API starts, so the token stays out of the configuration.
    pub token_file: Option<Spanned<PathBuf>>,
}

impl Default for ApiCfg {
    fn default() -> ApiCfg {
        ApiCfg {
            listen: api_listen(),
            token: None,
            token_file: None,
        }
    }
}

/// Why `[api] listen` is not an address: what it may be instead.
fn api_listen_of(v: &str) -> Result<Option<std::net::SocketAddr>, String> {
    match v {
        "off" => Ok(None),
        _ => v.parse().map(Some).map_err(|_| {
            format!("`{v}` is not an IP:port (like \"{DEFAULT_API_LISTEN}\") or \"off\"")
        }),
    }
}

impl ApiCfg {
    /// The address to listen on; None when the API is off.
    pub fn addr(&self) -> Option<std::net::SocketAddr> {
        api_listen_of(self.listen.get_ref()).unwrap_or(None)
    }

    /// The token writes need, from `token` or `token_file`; None without.
    pub fn token(&self) -> Result<Option<String>, String> {
        if let Some(t) = &self.token {
            return Ok(Some(t.get_ref().clone()));
        }
        let Some(f) = &self.token_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(f.get_ref())
            .map_err(|e| format!("api.token_file {}: {e}", f.get_ref().display()))?;
        match text.trim() {
            "" => Err(format!(
                "api.token_file {} is empty; put the token in it",
                f.get_ref().display()
            )),
            t => Ok(Some(t.to_string())),
        }
    }

    /// Refuses what can never work (an API open to the network without a
    /// token, above all); returns warnings.
    pub(crate) fn validate(&self, ck: &Checker<'_>) -> Result<Vec<ConfigWarning>, ConfigError> {
        let addr = api_listen_of(self.listen.get_ref())
            .map_err(|m| ck.err(Some(self.listen.span()), "api.listen", m))?;
        if let (Some(t), Some(_)) = (&self.token, &self.token_file) {
            return Err(ck.err(
                Some(t.span()),
                "api.token",
                "give token or token_file, not both",
            ));
        }
        if let Some(t) = &self.token {
            let t = t.get_ref();
            if t.trim().is_empty() || t.trim() != t {
                return Err(ck.err(
                    Some(self.token.as_ref().map_or(0..0, |t| t.span())),
                    "api.token",
                    "the token must be non-empty, without surrounding spaces",
                ));
            }
        }
        if let Some(f) = &self.token_file {
            if !f.get_ref().is_absolute() {
                return Err(ck.err(
                    Some(f.span()),
                    "api.token_file",
                    "give an absolute path (weir serve and weir dip read it from anywhere)",
                ));
            }
        }
        let has_token = self.token.is_some() || self.token_file.is_some();
        if let Some(a) = addr {
            if !a.ip().is_loopback() && !has_token {
                return Err(ck.err(
                    Some(self.listen.span()),
                    "api.listen",
                    format!(
                        "{a} is reachable from other hosts, and the API changes the load \
                         balancer: set api.token or api.token_file (writes then need \
                         `Authorization: Bearer <token>`), or listen on 127.0.0.1"
                    ),
                ));
            }
        }
        let mut warnings = Vec::new();
        if let Some(t) = self
            .token
            .as_ref()
            .filter(|t| t.get_ref().len() < SHORT_TOKEN)
        {
            warnings.push(ck.err(
                Some(t.span()),
                "api.token",
                format!(
                    "a token of {} characters is easy to guess; use {SHORT_TOKEN} or more \
                     (e.g. `openssl rand -hex 32`)",
                    t.get_ref().len()
                ),
            ));
        }
        Ok(warnings)
    }
}

#[cfg(test)]
mod tests {
    use crate::load::Config;
    use crate::test_files::*;

    #[test]
    fn the_api_is_on_loopback_by_default_and_needs_a_token_elsewhere() {
        let c = Config::parse("t.toml", GOOD).unwrap();
        assert_eq!(c.api.addr(), Some("127.0.0.1:9190".parse().unwrap()));
        assert_eq!(c.api.token(), Ok(None));
        let with = |api: &str| format!("{GOOD}\n[api]\n{api}\n");
        let off = Config::parse("t.toml", &with("listen = \"off\"")).unwrap();
        assert_eq!(off.api.addr(), None);
        for open in ["0.0.0.0:9190", "10.0.0.1:9190", "[::]:9190"] {
            let e = err_of(&with(&format!("listen = \"{open}\"")));
            assert_eq!((e.field.as_str(), e.line), ("api.listen", Some(21)), "{e}");
            assert!(e.message.contains("api.token"), "{e}");
        }
        let c = Config::parse(
            "t.toml",
            &with("listen = \"10.0.0.1:9190\"\ntoken = \"0123456789abcdef0123\""),
        )
        .unwrap();
        assert_eq!(c.api.token(), Ok(Some("0123456789abcdef0123".into())));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let short = Config::parse("t.toml", &with("token = \"abc\"")).unwrap();
        assert_eq!(short.warnings.len(), 1);
        assert!(short.warnings[0].message.contains("easy to guess"));
        let e = err_of(&with("listen = \"localhost:1\""));
        assert!(e.message.contains("\"off\""), "{e}");
        let e = err_of(&with("token = \"\""));
        assert_eq!(e.field, "api.token");
        let e = err_of(&with("token = \"a\"\ntoken_file = \"/x\""));
        assert!(e.message.contains("not both"), "{e}");
        let e = err_of(&with("token_file = \"rel/tok\""));
        assert_eq!(e.field, "api.token_file");
        let e = err_of(&with("tokn = \"a\""));
        assert!(e.message.contains("tokn"), "{e}");
        // The token file is read when asked for, trimmed.
        let dir = std::env::temp_dir().join(format!("weir-cfg-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("tok");
        std::fs::write(&f, "  s3cret-token-value\n").unwrap();
        let c = Config::parse(
            "t.toml",
            &with(&format!(
                "listen = \"[::]:1\"\ntoken_file = \"{}\"",
                f.display()
            )),
        )
        .unwrap();
        assert_eq!(c.api.token(), Ok(Some("s3cret-token-value".into())));
        std::fs::write(&f, "\n").unwrap();
        assert!(c.api.token().unwrap_err().contains("is empty"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(c.api.token().unwrap_err().contains("No such file"));
    }
}
