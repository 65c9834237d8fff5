//! Configuration errors that say where: file, line, field and what to do.
//! Shared by every weir configuration (`weir serve`'s and `weir kv`'s).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

/// A configuration error located in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}: {}", self.file, l, self.field, self.message),
            None => write!(f, "{}: {}: {}", self.file, self.field, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A located remark about a configuration that loads but is probably not
/// what the operator meant; same shape and `file:line: field: message`
/// format as an error.
pub type ConfigWarning = ConfigError;

/// Turns the byte spans the parser reports into located errors for one
/// file.
pub(crate) struct Checker<'a> {
    pub(crate) file: String,
    pub(crate) src: &'a str,
}

impl Checker<'_> {
    pub(crate) fn err(
        &self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        msg: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line: span
                .filter(|s| s.end > 0)
                .map(|s| line_of(self.src, s.start)),
            field: field.into(),
            message: msg.into(),
        }
    }
}

/// Where a parsed file came from and the line of each key it gives, for
/// the checks that run after parsing (the host's limits).
#[derive(Debug, Clone, Default)]
pub(crate) struct Origin {
    pub(crate) file: String,
    /// Dotted key (as [`key_at`] names it) to its first line.
    keys: BTreeMap<String, usize>,
}

impl Origin {
    pub(crate) fn of(file: &str, src: &str) -> Origin {
        let mut keys = BTreeMap::new();
        for (i, text) in src.lines().enumerate() {
            if text.contains('=') && !text.trim_start().starts_with('#') {
                keys.entry(key_at(src, i + 1)).or_insert(i + 1);
            }
        }
        Origin {
            file: file.to_string(),
            keys,
        }
    }

    /// The line of `key`; None when the file does not give it (a default).
    pub(crate) fn line_of_key(&self, key: &str) -> Option<usize> {
        self.keys.get(key).copied()
    }
}

/// 1-based line of a byte offset.
pub fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The dotted name of the TOML key on `line` (1-based), with its table
/// header: what a parse error is about when the parser itself does not say.
/// A line without a key names its table; with neither, "(syntax)".
pub fn key_at(src: &str, line: usize) -> String {
    let lines: Vec<&str> = src.lines().collect();
    let Some(text) = lines.get(line.saturating_sub(1)) else {
        return "(syntax)".into();
    };
    let key = text.split_once('=').map(|(k, _)| k.trim()).unwrap_or("");
    let table = lines[..line.saturating_sub(1)]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    match (table, key.is_empty() || key.starts_with('[')) {
        (Some(t), true) => t,
        (None, true) => "(syntax)".into(),
        (Some(t), false) => format!("{t}.{key}"),
        (None, false) => key.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "top = 1\n[pool]\nhash = \"x\"\n\n[[pool.server]]\naddress = 7\n";

    #[test]
    fn lines_and_keys_are_located() {
        assert_eq!(line_of(SRC, 0), 1);
        assert_eq!(line_of(SRC, SRC.find("address").unwrap()), 6);
        assert_eq!(key_at(SRC, 1), "top");
        assert_eq!(key_at(SRC, 3), "pool.hash");
        assert_eq!(key_at(SRC, 6), "pool.server.address");
        assert_eq!(key_at(SRC, 4), "pool");
        assert_eq!(key_at(SRC, 99), "(syntax)");
        let e = ConfigError {
            file: "f".into(),
            line: Some(6),
            field: "x".into(),
            message: "bad".into(),
        };
        assert_eq!(e.to_string(), "f:6: x: bad");
    }
}
