//! BIRD's control socket: one command, its reply lines (each `NNNN-text`,
//! the last `NNNN text`; continuation lines start with a space), and what
//! weir reads from them.

use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// A connection to BIRD's control socket.
pub struct Control {
    reader: BufReader<UnixStream>,
}

/// One reply line: its code (0 for a continuation) and text.
pub type Line = (u16, String);

impl Control {
    pub fn connect(socket: &Path) -> Result<Control> {
        let s = UnixStream::connect(socket)
            .with_context(|| format!("connecting to BIRD's control socket {}", socket.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.set_write_timeout(Some(Duration::from_secs(5)))?;
        let mut c = Control {
            reader: BufReader::new(s),
        };
        // The greeting: "0001 BIRD 2.x ready."
        let hello = c.reply()?;
        if hello.first().map(|l| l.0) != Some(1) {
            bail!("{} does not greet like BIRD: {hello:?}", socket.display());
        }
        Ok(c)
    }

    /// Sends `command`; returns its reply, or an error with BIRD's words
    /// when it refused (codes 8000 and up).
    pub fn run(&mut self, command: &str) -> Result<Vec<Line>> {
        let s = self.reader.get_mut();
        s.write_all(command.as_bytes())?;
        s.write_all(b"\n")?;
        let lines = self.reply()?;
        if let Some((code, text)) = lines.iter().find(|(c, _)| *c >= 8000) {
            bail!("BIRD refused `{command}`: {code} {text}");
        }
        Ok(lines)
    }

    fn reply(&mut self) -> Result<Vec<Line>> {
        let mut lines = Vec::new();
        let mut last = 0;
        loop {
            let mut buf = String::new();
            if self.reader.read_line(&mut buf)? == 0 {
                bail!("BIRD closed its control socket");
            }
            let line = buf.trim_end_matches('\n');
            if let Some(rest) = line.strip_prefix(' ') {
                lines.push((last, rest.to_string()));
                continue;
            }
            let code: u16 = line
                .get(..4)
                .and_then(|c| c.parse().ok())
                .with_context(|| format!("BIRD's reply line {line:?} has no code"))?;
            last = code;
            let sep = line.as_bytes().get(4).copied();
            lines.push((code, line.get(5..).unwrap_or("").to_string()));
            if sep != Some(b'-') {
                return Ok(lines);
            }
        }
    }
}

/// A BGP protocol as `show protocols` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    /// BIRD's protocol state: up, start, down.
    pub state: String,
    /// BGP's state and any last error, e.g. "Established" or "Active
    /// Socket: Connection refused".
    pub info: String,
}

/// The protocols of a `show protocols` reply (code 1002 lines).
pub fn protocols(lines: &[Line]) -> Vec<Protocol> {
    lines
        .iter()
        .filter(|(c, _)| *c == 1002)
        .filter_map(|(_, t)| {
            // name, proto, table, state, since (one word: the configuration
            // sets its format), info...
            let f: Vec<&str> = t.split_whitespace().collect();
            Some(Protocol {
                name: f.first()?.to_string(),
                state: f.get(3)?.to_string(),
                info: f.get(5..).unwrap_or_default().join(" "),
            })
        })
        .collect()
}

/// Each BFD session of a `show bfd sessions` reply: (address, state).
pub fn bfd_sessions(lines: &[Line]) -> Vec<(IpAddr, String)> {
    lines
        .iter()
        .filter_map(|(_, t)| {
            let mut f = t.split_whitespace();
            let addr: IpAddr = f.next()?.parse().ok()?;
            let _iface = f.next()?;
            Some((addr, f.next()?.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<Line> {
        text.lines()
            .map(|l| match l.strip_prefix(' ') {
                Some(r) => (0, r.to_string()),
                None => (l[..4].parse().unwrap(), l[5..].to_string()),
            })
            .collect()
    }

    #[test]
    fn protocols_and_bfd_sessions_are_read_from_birds_replies() {
        let p = protocols(&lines(
            "2002-Name       Proto      Table      State  Since         Info\n\
             1002-device1    Device     ---        up     17:52:42.773  \n\
             1002-weir_n0    BGP        ---        up     17:52:43.001  Established   \n\
             1002-weir_n1    BGP        ---        start  17:52:42.773  Active        Socket: Connection refused\n\
             0000 ",
        ));
        assert_eq!(p.len(), 3);
        assert_eq!(
            (p[1].name.as_str(), p[1].state.as_str(), p[1].info.as_str()),
            ("weir_n0", "up", "Established")
        );
        assert_eq!(p[2].info, "Active Socket: Connection refused");
        let b = bfd_sessions(&lines(
            "1020-bfd1:\n IP address                Interface  State      Since         Interval  Timeout\n \
             10.0.0.1                  veth1      Up         17:52:43.001    0.300    0.900\n0000 ",
        ));
        assert_eq!(b, vec![("10.0.0.1".parse().unwrap(), "Up".to_string())]);
    }
}
