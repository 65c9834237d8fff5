//! The documents against the product: every `weir` command line in the README's
//! and the operator guide's code blocks names commands and options the real CLI
//! has, every example configuration loads, the README's first service runs as
//! written in a namespace lab, and the README stays a front door whose links
//! resolve inside the tree.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{repo, text, weir, WEIR};

/// The README's length limit: a front door, not a manual.
const README_MAX_LINES: usize = 260;

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The lines inside fenced code blocks (```), with their line numbers; fences
/// may be indented, as they are inside list items.
fn code_lines(doc: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if fenced {
            out.push((i + 1, line.trim().to_string()));
        }
    }
    out
}

/// A shell line's words up to its comment, with single and double quotes
/// removed; enough for the documents' command lines, which use no
/// substitutions.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#') if !in_word => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// The arguments of every `weir` command line (`weir ...`, or a path ending
/// in `/weir`) in `rel`'s code blocks, with where each one is.
fn weir_commands(rel: &str) -> Vec<(String, Vec<String>)> {
    code_lines(&read(rel))
        .into_iter()
        .filter_map(|(n, line)| {
            let w = words(&line);
            let first = w.first()?;
            (first == "weir" || first.ends_with("/weir"))
                .then(|| (format!("{rel}:{n}: {line}"), w[1..].to_vec()))
        })
        .collect()
}

/// The subcommands a `--help` text lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Checks one documented command line against the CLI: its subcommand path
/// exists (`weir PATH --help` succeeds) and every option it passes is one
/// that subcommand's help lists. Returns what is wrong, if anything.
fn check_command(args: &[String]) -> Result<(), String> {
    let mut path: Vec<&str> = Vec::new();
    let mut help = help_of(&path)?;
    for a in args {
        if a.starts_with('-') {
            continue;
        }
        if subcommands(&help).iter().any(|c| c == a) {
            path.push(a);
            help = help_of(&path)?;
        }
    }
    if path.is_empty() {
        return Err("names no subcommand".into());
    }
    for a in args.iter().filter(|a| a.starts_with("--")) {
        let flag = a.split('=').next().unwrap();
        let listed = help
            .split(|c: char| c.is_whitespace() || c == ',')
            .any(|w| w == flag);
        if !listed {
            return Err(format!(
                "`weir {}` has no option {flag}:\n{help}",
                path.join(" ")
            ));
        }
    }
    Ok(())
}

fn help_of(path: &[&str]) -> Result<String, String> {
    let mut args = path.to_vec();
    args.push("--help");
    let out = weir(&args);
    if !out.status.success() {
        return Err(format!(
            "`weir {}` does not exist: {}",
            args.join(" "),
            text(&out.stderr)
        ));
    }
    Ok(text(&out.stdout))
}

#[test]
fn documented_weir_commands_parse_with_the_real_cli() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for doc in ["README.md", "docs/src/operator-guide.md"] {
        let cmds = weir_commands(doc);
        assert!(!cmds.is_empty(), "{doc} shows no weir command");
        for (at, args) in cmds {
            checked += 1;
            if let Err(e) = check_command(&args) {
                wrong.push(format!("{at}\n  {e}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked >= 10, "only {checked} commands found");
}

#[test]
fn the_command_check_catches_what_does_not_exist() {
    let args = |s: &str| words(s).into_iter().skip(1).collect::<Vec<_>>();
    assert!(check_command(&args("weir dip drain web 10.0.1.11")).is_ok());
    assert!(check_command(&args("weir serve --config f.toml --takeover")).is_ok());
    assert!(check_command(&args("weir decap status --interface eth0")).is_ok());
    assert!(check_command(&args("weir frobnicate")).is_err());
    assert!(check_command(&args("weir serve --frobnicate")).is_err());
    assert!(check_command(&args("weir status --config x")).is_err());
    assert_eq!(
        words(r#"weir kv --config "a b.toml" --check   # comment"#),
        ["weir", "kv", "--config", "a b.toml", "--check"]
    );
}

#[test]
fn every_example_configuration_checks() {
    let mut examples: Vec<PathBuf> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    examples.sort();
    assert!(
        examples.iter().any(|p| p.ends_with("first-service.toml")),
        "examples/first-service.toml is missing"
    );
    for f in &examples {
        let path = f.to_str().unwrap();
        // The memcached switch's files have pools, not VIPs.
        let kv = std::fs::read_to_string(f)
            .unwrap()
            .lines()
            .any(|l| l.trim_start().starts_with("[pool"));
        let out = if kv {
            weir(&["kv", "--config", path, "--check"])
        } else {
            weir(&["check", "--config", path])
        };
        assert!(
            out.status.success(),
            "{path}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

/// The targets of the markdown links `[text](target)` in `doc`, outside code.
fn links(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let tail = &rest[i + 2..];
            let Some(end) = tail.find(')') else { break };
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    out
}

/// What is wrong with the relative links of `rel`: each must point to a
/// file or folder of the tree, and none may climb out of the document's
/// folder with `../` where `no_parent` says so.
fn broken_links(rel: &str, no_parent: bool) -> Vec<String> {
    let dir = repo().join(rel).parent().unwrap().to_path_buf();
    links(&read(rel))
        .into_iter()
        .filter(|l| !l.contains("://") && !l.starts_with('#') && !l.starts_with("mailto:"))
        .filter_map(|l| {
            let file = l.split('#').next().unwrap();
            if no_parent && file.contains("../") {
                Some(format!("{rel}: {l} leaves the tree's front door (../)"))
            } else if !dir.join(file).exists() {
                Some(format!("{rel}: {l} points to no file"))
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn readme_is_a_short_front_door_with_working_links() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; at most {README_MAX_LINES}: move detail into docs/src"
    );
    let mut wrong = broken_links("README.md", true);
    wrong.extend(broken_links("docs/src/SUMMARY.md", false));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(links(&readme).len() >= 5, "README.md links to too little");
}

#[test]
fn every_book_chapter_exists_and_links_inside_the_tree() {
    let summary = read("docs/src/SUMMARY.md");
    let chapters: Vec<String> = links(&summary);
    assert!(chapters.len() >= 10, "SUMMARY.md lists {chapters:?}");
    let mut wrong = Vec::new();
    for c in &chapters {
        wrong.extend(broken_links(&format!("docs/src/{c}"), false));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The README's first-service section: its `sh` blocks' lines, in order.
fn first_service_commands() -> Vec<String> {
    let readme = read("README.md");
    let start = readme
        .find("## A first service on a real host")
        .expect("the README's first-service section");
    let section = &readme[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    let mut in_sh = false;
    let mut lines = Vec::new();
    for line in section[..end].lines() {
        let t = line.trim();
        if let Some(lang) = t.strip_prefix("```") {
            in_sh = !in_sh && lang == "sh";
        } else if in_sh && !t.is_empty() {
            lines.push(t.to_string());
        }
    }
    lines
}

/// The first service, followed literally in a lab: its configuration is
/// examples/first-service.toml with the lab's interfaces and addresses, and
/// every command line of the README's section runs, in its order, where it
/// belongs (the load balancer's namespace or the backends'), with the same
/// substitutions. Installing (apt-get, make install) and systemctl are the
/// only lines not run; a line this test does not know fails it.
#[test]
fn the_first_service_runs_as_the_readme_says() {
    use weir_lab::backend::Backend;
    use weir_lab::client::http_once;
    use weir_lab::daemon::Daemon;
    use weir_lab::topology::Lab;

    let lab = Lab::build(3).expect("building the lab");
    let _backends: Vec<Backend> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Backend::start(ns, &format!("backend-{}", i + 1)).unwrap())
        .collect();
    let lab_addr = |text: &str| {
        text.replace("203.0.113.10", "10.77.100.1")
            .replace("10.0.1.11", "10.77.1.2")
            .replace("10.0.1.12", "10.77.2.2")
            .replace("10.0.1.13", "10.77.3.2")
    };
    let config = lab_addr(&read("examples/first-service.toml")).replace(
        "interfaces = [\"eth0\"]",
        "interfaces = [\"wc0\", \"wb1\", \"wb2\", \"wb3\"]",
    );
    let mut d = Daemon::new(Path::new(WEIR), &lab.lb).unwrap();
    d.write_config(&config).unwrap();
    let config_path = d.config_path().display().to_string();
    let run_dir = d.run_dir().display().to_string();
    let net = format!("--net=/run/netns/{}", lab.lb);
    let in_lb = |program: &str, args: &[String]| {
        let out = Command::new("nsenter")
            .arg(&net)
            .arg(program)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    };

    let mut ran = Vec::new();
    for line in first_service_commands() {
        let w: Vec<String> = words(&lab_addr(&line))
            .into_iter()
            .map(|a| a.replace("/etc/weir/weir.toml", &config_path))
            .collect();
        match w[0].as_str() {
            "apt-get" | "make" | "systemctl" => continue,
            "weir" if w[1] == "serve" => {
                assert_eq!(w[2..], ["--config", config_path.as_str()], "{line}");
                d.start().unwrap();
            }
            "weir" if matches!(w[1].as_str(), "status" | "dip") => {
                let mut args = w[1..].to_vec();
                args.extend(["--run-dir".to_string(), run_dir.clone()]);
                in_lb(WEIR, &args);
            }
            "weir" => {
                let out = in_lb(WEIR, &w[1..]);
                if w[1] == "doctor" {
                    assert!(out.contains("0 failed"), "{out}");
                }
            }
            "sysctl" => {
                in_lb("sysctl", &w[1..]);
            }
            "ethtool" => {
                for dev in lab.lb_interfaces() {
                    let args: Vec<String> =
                        w[1..].iter().map(|a| a.replace("eth0", &dev)).collect();
                    in_lb("ethtool", &args);
                }
            }
            "ip" if w[1..5] == ["route", "replace", "default", "via"] => {
                for (i, b) in lab.backends.iter().enumerate() {
                    let gw = format!("10.77.{}.1", i + 1);
                    weir_lab::netns::ip_in(b, &["route", "replace", "default", "via", &gw])
                        .unwrap();
                }
            }
            _ => panic!("README.md's first service has a line this test does not run: {line}"),
        }
        ran.push(w[..2].join(" "));
    }
    for must in [
        "weir check",
        "weir doctor",
        "weir serve",
        "weir status",
        "weir dip",
    ] {
        assert!(ran.iter().any(|r| r == must), "{must} not run: {ran:?}");
    }
    // The VIP serves; the drained backend gets no new connections.
    let vip: std::net::SocketAddr = "10.77.100.1:80".parse().unwrap();
    let seen: std::collections::BTreeSet<String> = (0..20)
        .filter_map(|_| http_once(&lab.client, vip).ok())
        .collect();
    assert!(
        seen.contains("backend-2") && seen.contains("backend-3") && !seen.contains("backend-1"),
        "{seen:?}"
    );
    d.stop().unwrap();
}
