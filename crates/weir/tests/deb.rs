//! The Debian package (`make deb`), built from the binary under test: what it
//! holds and declares (and lintian's verdict); then installed with apt-get in a
//! clean Debian 12 root made by debootstrap, used (`weir --version`, `weir
//! check` on every shipped example, the man pages, `systemd-analyze verify`
//! on the installed units) and purged, leaving none of its files; and
//! installed and purged with `dpkg --root` in an empty root, which needs no
//! mirror. Needs root. The Debian root is cached under target/debian-root/
//! for the day; making it (the first run of a day) needs Debian's mirror.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const VERSION: &str = env!("CARGO_PKG_VERSION");
const MIRROR_HOST: &str = "deb.debian.org";
const MIRROR: &str = "http://deb.debian.org/debian";
const SUITE: &str = "bookworm";
/// A Debian system as an operator has one, beyond minbase: man-db for the
/// man pages, systemd for `systemd-analyze verify`. weir's own dependencies
/// are left for apt to bring from the package's Depends.
const EXTRA_PACKAGES: &str = "man-db,systemd";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// The package, built once per test process by `make deb` from the binary
/// under test.
fn deb() -> &'static Path {
    static DEB: OnceLock<PathBuf> = OnceLock::new();
    DEB.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deb");
        let _ = std::fs::remove_dir_all(&dir);
        let out = run(Command::new("make")
            .arg("-C")
            .arg(repo())
            .arg("--no-print-directory")
            .arg("deb")
            .arg(format!("WEIR={WEIR}"))
            .arg(format!("DEB_DIR={}", dir.display())));
        let arch = text(&run(Command::new("dpkg").arg("--print-architecture")).stdout);
        let deb = dir.join(format!("weir_{VERSION}_{}.deb", arch.trim()));
        assert!(
            deb.is_file(),
            "make deb did not write {}: {}",
            deb.display(),
            text(&out.stdout)
        );
        deb
    })
}

/// The package's paths (`/usr/bin/weir`, `/usr/share/doc/weir`, ...).
fn contents(deb: &Path) -> BTreeSet<String> {
    let out = run(Command::new("dpkg-deb").arg("--contents").arg(deb));
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').trim_end_matches('/').to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn field(deb: &Path, name: &str) -> String {
    let out = run(Command::new("dpkg-deb").arg("--field").arg(deb).arg(name));
    text(&out.stdout).trim().to_string()
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("weir-deb-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn deb_holds_what_make_install_ships_and_declares_its_dependencies() {
    let deb = deb();
    assert_eq!(field(deb, "Package"), "weir");
    assert_eq!(field(deb, "Version"), VERSION);
    assert_eq!(field(deb, "Section"), "net");
    let depends = field(deb, "Depends");
    // libbpf and libxdp are linked in; libelf and zlib, which they use, are not.
    for lib in ["libc6", "libelf1", "zlib1g", "procps"] {
        assert!(depends.contains(lib), "Depends lacks {lib}: {depends}");
    }
    assert!(!depends.contains("libbpf"), "Depends: {depends}");
    assert!(field(deb, "Description").lines().count() > 5);

    let files = contents(deb);
    let mut want: Vec<String> = [
        "/usr/bin/weir",
        "/lib/systemd/system/weir.service",
        "/lib/systemd/system/weir-kv.service",
        "/lib/systemd/system/weir-agent.service",
        "/usr/share/man/man8/weir.8.gz",
        "/usr/share/man/man5/weir.toml.5.gz",
        "/usr/share/man/man1/weir-serve.1.gz",
        "/usr/share/man/man1/weir-dip-add.1.gz",
        "/usr/share/man/man1/weir-kv-status.1.gz",
        "/usr/share/bash-completion/completions/weir",
        "/usr/share/zsh/vendor-completions/_weir",
        "/usr/share/fish/vendor_completions.d/weir.fish",
        "/usr/share/weir/grafana/weir.json",
        "/usr/share/weir/prometheus/weir-alerts.yml",
        "/usr/share/doc/weir/copyright",
        "/usr/share/doc/weir/changelog.gz",
    ]
    .map(String::from)
    .to_vec();
    for e in std::fs::read_dir(repo().join("examples")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".toml") {
            want.push(format!("/usr/share/doc/weir/examples/{name}"));
        }
    }
    for path in &want {
        assert!(files.contains(path), "the package lacks {path}: {files:?}");
    }
    for path in &files {
        // Only the product: the labs are weir-lab's; weir(8) is `man weir`.
        assert!(!path.contains("weir-lab"), "{path}");
        assert_ne!(path, "/usr/share/man/man1/weir.1.gz");
        assert!(!path.starts_with("/usr/local"), "{path}");
        // Nothing in /etc, so no conffile to keep after removal.
        assert!(
            path == "/etc" || path == "/etc/weir" || !path.starts_with("/etc"),
            "{path}"
        );
    }

    let tmp = TempDir::new("contents");
    run(Command::new("dpkg-deb")
        .arg("--extract")
        .arg(deb)
        .arg(&tmp.0));
    for unit in ["weir.service", "weir-kv.service", "weir-agent.service"] {
        let body = std::fs::read_to_string(tmp.0.join("lib/systemd/system").join(unit)).unwrap();
        assert!(body.contains("ExecStart=/usr/bin/weir "), "{unit}");
        assert!(!body.contains("/usr/local"), "{unit}");
    }
    let sections = run(Command::new("readelf")
        .args(["--section-headers", "--wide"])
        .arg(tmp.0.join("usr/bin/weir")));
    let sections = text(&sections.stdout);
    for unwanted in [".symtab", ".debug_info", ".comment"] {
        assert!(!sections.contains(unwanted), "usr/bin/weir has {unwanted}");
    }

    let lintian = run(Command::new("lintian")
        .args(["--fail-on", "error,warning", "--no-tag-display-limit"])
        .arg(deb));
    let report = text(&lintian.stdout);
    assert!(
        !report
            .lines()
            .any(|l| l.starts_with("E:") || l.starts_with("W:")),
        "{report}"
    );
}

/// A copy-on-write view of `lower` (overlayfs) with the host's /proc and
/// /dev bound into it, in a mount namespace of its own: the mounts are never
/// seen by the host, and vanish with the namespace, which ends when the
/// holder process sees its standard input close, on drop or when this
/// process dies.
struct Chroot {
    holder: Child,
    merged: PathBuf,
    /// Taken on drop, and kept (leaked) if a mount is still under it: its
    /// removal would reach into /dev.
    dir: Option<TempDir>,
}

impl Chroot {
    fn new(lower: &Path, archives: &Path) -> Chroot {
        let dir = TempDir::new("chroot");
        let merged = dir.0.join("merged");
        for d in ["upper", "work", "merged"] {
            std::fs::create_dir(dir.0.join(d)).unwrap();
        }
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            dir.0.join("upper").display(),
            dir.0.join("work").display()
        );
        // The holder says "ready" once it is in its own namespace: until
        // then /proc/PID/ns/mnt is still the host's.
        let holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg("echo ready && exec cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux)");
        let mut c = Chroot {
            holder,
            merged,
            dir: Some(dir),
        };
        let mut ready = String::new();
        BufReader::new(c.holder.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready", "unshare --mount failed");
        let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap();
        assert_ne!(ns(&c.holder.id().to_string()), ns("self"));

        c.host(&[
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            &options,
            c.root(),
        ]);
        c.host(&["mount", "--bind", "/proc", &format!("{}/proc", c.root())]);
        c.host(&["mount", "--bind", "/dev", &format!("{}/dev", c.root())]);
        // Downloaded packages outlive the root, so later runs need no mirror.
        c.host(&[
            "mount",
            "--bind",
            archives.to_str().unwrap(),
            &format!("{}/var/cache/apt/archives", c.root()),
        ]);
        c.host(&["cp", "/etc/resolv.conf", &format!("{}/etc/", c.root())]);
        c
    }

    fn root(&self) -> &str {
        self.merged.to_str().unwrap()
    }

    /// A host command, in the namespace that sees the root's mounts.
    fn host(&self, args: &[&str]) -> Output {
        run(Command::new("nsenter")
            .arg(format!("--mount=/proc/{}/ns/mnt", self.holder.id()))
            .arg("--")
            .args(args))
    }

    /// A command inside the root; its output, whether it succeeded or not.
    fn try_run(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new("nsenter")
            .arg(format!("--mount=/proc/{}/ns/mnt", self.holder.id()))
            .args(["--", "chroot", self.root(), "env", "-i"])
            .args([
                "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                "LC_ALL=C.UTF-8",
                "DEBIAN_FRONTEND=noninteractive",
                "MANWIDTH=80",
            ])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// A command inside the root that must succeed; its standard output.
    fn run(&self, args: &[&str]) -> String {
        let out = self.try_run(args, "");
        assert!(
            out.status.success(),
            "{args:?} in the Debian root failed ({}): {}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Which of `paths` exist in the root.
    fn existing(&self, paths: &BTreeSet<String>) -> BTreeSet<String> {
        let list: String = paths.iter().map(|p| format!("{p}\n")).collect();
        let out = self.try_run(
            &[
                "sh",
                "-c",
                "while read -r p; do if [ -e \"$p\" ] || [ -L \"$p\" ]; then echo \"$p\"; fi; done",
            ],
            &list,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).lines().map(String::from).collect()
    }
}

impl Drop for Chroot {
    fn drop(&mut self) {
        drop(self.holder.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.holder.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        let dir = self.dir.take().unwrap();
        let under = format!(" {}/", dir.0.display());
        let mounted = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.contains(&under));
        if mounted {
            eprintln!(
                "{} still has mounts in this namespace; left in place (umount -R it, then \
                 remove it)",
                dir.0.display()
            );
            std::mem::forget(dir);
        }
    }
}

/// Why Debian's mirror cannot be used, if it cannot.
fn mirror_unreachable() -> Option<String> {
    let addrs = match (MIRROR_HOST, 80).to_socket_addrs() {
        Ok(a) => a.collect::<Vec<_>>(),
        Err(e) => return Some(format!("cannot resolve {MIRROR_HOST}: {e}")),
    };
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(_) => return None,
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Some(format!("cannot connect to {MIRROR_HOST}:80 ({last})"))
}

/// A clean Debian 12 root (minbase, plus EXTRA_PACKAGES), made by
/// debootstrap once a day and kept under target/debian-root/SUITE-DATE;
/// with the directory that keeps apt's downloads for it. Err: why the
/// mirror cannot be reached, when there is no root for today yet.
fn debian_root() -> Result<(PathBuf, PathBuf), String> {
    let cache = repo().join("target/debian-root");
    let date = text(&run(Command::new("date").args(["-u", "+%F"])).stdout);
    let name = format!("{SUITE}-{}", date.trim());
    let root = cache.join(&name);
    let archives = cache.join(format!("{name}-archives"));
    std::fs::create_dir_all(archives.join("partial")).unwrap();
    if root.join("etc/debian_version").is_file() {
        return Ok((root, archives));
    }
    if let Some(why) = mirror_unreachable() {
        return Err(why);
    }
    // Yesterday's roots go; today's is made aside and renamed into place, so
    // a run that stops half-way leaves no root that looks finished.
    for e in std::fs::read_dir(&cache).unwrap() {
        let path = e.unwrap().path();
        let n = path.file_name().unwrap().to_string_lossy().into_owned();
        if n.starts_with(&format!("{SUITE}-")) && !n.starts_with(&name) {
            std::fs::remove_dir_all(&path).unwrap();
        }
    }
    let making = cache.join(format!("{name}.making-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&making);
    let started = Instant::now();
    let out = Command::new("debootstrap")
        .args([
            "--variant=minbase",
            &format!("--include={EXTRA_PACKAGES}"),
            SUITE,
        ])
        .arg(&making)
        .arg(MIRROR)
        .output()
        .expect("debootstrap (scripts/deps.sh installs it)");
    assert!(
        out.status.success(),
        "debootstrap of {SUITE} into {} failed: {}{}",
        making.display(),
        text(&out.stdout),
        text(&out.stderr)
    );
    println!(
        "debootstrap: {SUITE} root made in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if std::fs::rename(&making, &root).is_err() {
        // Another test process made it first.
        std::fs::remove_dir_all(&making).unwrap();
    }
    Ok((root, archives))
}

/// Of the package's paths, those `left` after the purge must have been
/// there `before` the install (/usr, /usr/share/man, ...).
fn assert_nothing_left(left: &BTreeSet<String>, before: &BTreeSet<String>) {
    let stray: Vec<&String> = left.difference(before).collect();
    assert!(stray.is_empty(), "left after purge: {stray:?}");
}

#[test]
fn deb_installs_works_and_purges_in_a_clean_debian_12_root() {
    let started = Instant::now();
    let deb = deb();
    let files = contents(deb);
    let (lower, archives) = match debian_root() {
        Ok(r) => r,
        Err(why) => {
            println!(
                "SKIPPED: no Debian {SUITE} root: {why}; deb_installs_and_purges_with_dpkg_root \
                 still checks the package's installation"
            );
            return;
        }
    };
    let root = Chroot::new(&lower, &archives);
    let before = root.existing(&files);
    assert!(
        before.contains("/usr/bin") && !before.contains("/usr/bin/weir"),
        "{before:?}"
    );
    root.host(&[
        "cp",
        deb.to_str().unwrap(),
        &format!("{}/tmp/", root.root()),
    ]);
    let in_root = format!("/tmp/{}", deb.file_name().unwrap().to_str().unwrap());
    let t = Instant::now();
    root.run(&[
        "apt-get",
        "install",
        "-y",
        "-q",
        "--no-install-recommends",
        &in_root,
    ]);
    println!("apt-get install: {:.1} s", t.elapsed().as_secs_f64());

    let listed: BTreeSet<String> = root
        .run(&["dpkg", "-L", "weir"])
        .lines()
        .map(String::from)
        .collect();
    let missing: Vec<&String> = files.difference(&listed).collect();
    assert!(missing.is_empty(), "dpkg -L weir lacks {missing:?}");
    assert_eq!(root.existing(&files), files, "not every file was installed");

    assert_eq!(
        root.run(&["weir", "--version"]).trim(),
        format!("weir {VERSION}")
    );
    for path in files
        .iter()
        .filter(|p| p.starts_with("/usr/share/doc/weir/examples/") && p.ends_with(".toml"))
    {
        let check = if path.ends_with("/kv.toml") {
            root.run(&["weir", "kv", "--config", path, "--check"])
        } else {
            root.run(&["weir", "check", "--config", path])
        };
        assert!(check.contains(": ok ("), "{path}: {check}");
    }

    for (page, want) in [
        ("weir", "/usr/share/man/man8/weir.8.gz"),
        ("weir.toml", "/usr/share/man/man5/weir.toml.5.gz"),
        ("weir-serve", "/usr/share/man/man1/weir-serve.1.gz"),
    ] {
        assert_eq!(root.run(&["man", "-w", page]).trim(), want);
    }
    let weir8 = root.try_run(&["man", "--warnings", "8", "weir"], "");
    assert!(weir8.status.success(), "{}", text(&weir8.stderr));
    assert!(
        weir8.stderr.is_empty(),
        "weir(8) renders with warnings: {}",
        text(&weir8.stderr)
    );
    let weir8 = text(&weir8.stdout);
    for section in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "COMMANDS",
        "EXAMPLES",
        "FILES",
        "EXIT STATUS",
        "SEE ALSO",
    ] {
        assert!(
            weir8.lines().any(|l| l == section),
            "weir(8) has no {section} section"
        );
    }
    let weir_toml5 = root.run(&["man", "5", "weir.toml"]);
    assert!(weir_toml5.contains("[dataplane]"), "{weir_toml5}");

    // systemd is in the root, so the units are checked where they are
    // installed: /usr/bin/weir, /bin/kill (procps, a Depends) and the man
    // pages their Documentation= names must all be there.
    let t = Instant::now();
    let verify = root.try_run(
        &[
            "systemd-analyze",
            "verify",
            "/lib/systemd/system/weir.service",
            "/lib/systemd/system/weir-kv.service",
            "/lib/systemd/system/weir-agent.service",
        ],
        "",
    );
    let report = text(&verify.stdout) + &text(&verify.stderr);
    assert!(
        verify.status.success() && report.trim().is_empty(),
        "systemd-analyze verify in the root: {report}"
    );
    println!("systemd-analyze verify: {:.1} s", t.elapsed().as_secs_f64());

    root.run(&["apt-get", "remove", "--purge", "-y", "-q", "weir"]);
    let status = root.try_run(&["dpkg", "-s", "weir"], "");
    assert!(
        !status.status.success(),
        "weir is still known to dpkg: {}",
        text(&status.stdout)
    );
    assert_nothing_left(&root.existing(&files), &before);
    let dir = root.dir.as_ref().unwrap().0.clone();
    drop(root);
    // The root's mounts were in its own namespace only.
    assert!(!dir.exists(), "{} was left", dir.display());
    println!(
        "deb in a clean {SUITE} root: {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn deb_installs_and_purges_with_dpkg_root() {
    let deb = deb();
    let files = contents(deb);
    let root = TempDir::new("dpkg-root");
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "var/log"] {
        std::fs::create_dir_all(root.0.join(d)).unwrap();
    }
    std::fs::write(root.0.join("var/lib/dpkg/status"), "").unwrap();
    let dpkg = |args: &[&str]| {
        // The maintainer scripts run on the host with DPKG_ROOT set, which
        // they honour by leaving the host's systemd alone; the libraries of
        // Depends are not in this empty root.
        run(Command::new("dpkg")
            .arg(format!("--root={}", root.0.display()))
            .args(["--force-script-chrootless", "--force-depends"])
            .args(args))
    };
    dpkg(&["--install", deb.to_str().unwrap()]);
    let listed = text(&dpkg(&["--listfiles", "weir"]).stdout);
    for path in &files {
        assert!(
            listed.lines().any(|l| l == path),
            "dpkg -L weir lacks {path}"
        );
        assert!(
            root.0.join(path.trim_start_matches('/')).exists(),
            "{path} was not installed"
        );
    }
    let weir = root.0.join("usr/bin/weir");
    let version = run(Command::new(&weir).arg("--version"));
    assert_eq!(text(&version.stdout).trim(), format!("weir {VERSION}"));

    dpkg(&["--purge", "weir"]);
    let left: BTreeSet<String> = files
        .iter()
        .filter(|p| root.0.join(p.trim_start_matches('/')).exists())
        .cloned()
        .collect();
    assert_nothing_left(&left, &BTreeSet::new());
}
