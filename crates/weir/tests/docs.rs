//! The documents against the product: every `weir` command line in the README's
//! and the operator guide's code blocks names commands and options the real CLI
//! has, every example configuration loads, and the README stays a front door
//! whose links resolve inside the tree.

use std::path::PathBuf;

mod common;
use common::{repo, text, weir};

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
