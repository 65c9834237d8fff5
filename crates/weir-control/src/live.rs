//! What `weir serve` runs (the applied configuration, the controller) and
//! the one way to change it: a reload of the file (SIGHUP, `weir reload`,
//! `POST /api/v1/reload`) or an edit of it (the management API).
//!
//! Both hold one lock from reading the file until the configuration is in
//! force, and [`Shared::table_lock`] while they write the maps, the lock
//! the controller publishes under. So reloads, edits and the controller's
//! tables never interleave, and an edit always starts from what the last
//! change left in the file: no update is lost.
//!
//! An edit is checked before anything changes: the file as it is must load,
//! the edited text must pass the same validation as any configuration, and
//! its new version must be written and synced next to the file. Only then
//! is it applied (PCC-safe, [`apply`]) and renamed over the file, so a
//! restart keeps it. If applying or the rename fails, the configuration
//! that was in force is applied again and the file stays as it was.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use toml_edit::DocumentMut;
use weir_config::Config;
use weir_dataplane::maps::Maps;

use crate::apply::{apply, prime_neighbours, ApplyReport};
use crate::controller::{Controller, Params, Shared};
use crate::program::Program;
use crate::reload_outcome::ReloadOutcome;
use crate::reload_scope::{controller_changes, refusal, restart_only_changes};

/// Why a change was refused (nothing changed) or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeError {
    /// It names a VIP or DIP that is not there.
    NotFound(String),
    /// It conflicts with what is there (a DIP that exists already, an
    /// ambiguous name, a file that does not load as it is).
    Conflict(String),
    /// The request, or the configuration it would make, is invalid.
    Invalid(String),
    /// The file could not be read or written, or the maps not updated.
    Failed(String),
}

impl std::fmt::Display for ChangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChangeError::NotFound(m)
            | ChangeError::Conflict(m)
            | ChangeError::Invalid(m)
            | ChangeError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ChangeError {}

struct State {
    maps: Maps,
    running: Config,
    controller: Option<Controller>,
    /// The attached program, widened before a change that needs more.
    program: Option<Program>,
}

/// The running configuration of `weir serve` and its controller.
pub struct Live {
    config_path: PathBuf,
    run_dir: PathBuf,
    shared: Arc<Shared>,
    state: Mutex<State>,
    /// Reloads so far, for [`ReloadOutcome::seq`].
    reloads: AtomicU64,
}

impl Live {
    /// Takes over the maps `cfg` was applied to, and starts the controller
    /// if `cfg` wants one.
    pub fn start(
        maps: Maps,
        config_path: &Path,
        cfg: Config,
        shared: Arc<Shared>,
        run_dir: &Path,
    ) -> Live {
        let live = Live {
            config_path: config_path.to_path_buf(),
            run_dir: run_dir.to_path_buf(),
            shared,
            state: Mutex::new(State {
                maps,
                running: cfg,
                controller: None,
                program: None,
            }),
            reloads: AtomicU64::new(0),
        };
        live.sync_controller(&mut live.lock());
        live
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Where `weir serve` records itself and its workers' reports.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The configuration in force.
    pub fn running(&self) -> Config {
        self.lock().running.clone()
    }

    /// Takes over the attached program: changes that need a feature it
    /// lacks widen it first.
    pub fn adopt_program(&self, program: Program) {
        self.lock().program = Some(program);
    }

    /// The kernel id of the attached program.
    pub fn program_id(&self) -> Option<u32> {
        self.lock().program.as_ref().and_then(Program::id)
    }

    /// Gives the attached program back (at exit).
    pub fn take_program(&self) -> Option<Program> {
        self.lock().program.take()
    }

    /// Makes the attached program carry what `next` needs (program.rs),
    /// before anything of `next` is written.
    fn widen_for(st: &mut State, next: &Config) -> Result<(), ChangeError> {
        let Some(program) = &mut st.program else {
            return Ok(());
        };
        program.widen_for(next).map(|_| ()).map_err(|e| {
            ChangeError::Failed(format!(
                "the configuration needs weir_lb to carry {}, and the program that does could \
                 not be swapped in ({e:#}); the running program and configuration stay",
                crate::program::wanted_features(next)
            ))
        })
    }

    /// Stops the controller (at exit).
    pub fn stop(&self) {
        self.lock().controller = None;
    }

    /// Re-reads the file and applies it. A file that does not load, or that
    /// changes a setting only a restart applies, is refused, and the
    /// running configuration stays. Every outcome is published in the run
    /// directory for whoever asked for the reload ([`ReloadOutcome`]).
    pub fn reload(&self) -> Result<ApplyReport, ChangeError> {
        // Before the lock: a reload started no earlier than its request.
        let started_ns = weir_sys::monotonic_ns();
        let mut st = self.lock();
        let result = self.reload_locked(&mut st);
        let seq = self.reloads.fetch_add(1, Ordering::SeqCst) + 1;
        let outcome = ReloadOutcome {
            pid: std::process::id(),
            seq,
            started_ns,
            applied: result.is_ok(),
            message: match &result {
                Ok((_, said)) => said.clone(),
                Err(e) => e.to_string(),
            },
        };
        if let Err(e) = outcome.publish(&self.run_dir) {
            log::warn!(
                "reload {seq}: publishing its outcome in {} failed ({e}); `weir reload` will not \
                 see it",
                self.run_dir.display()
            );
        }
        result.map(|(report, _)| report)
    }

    fn reload_locked(&self, st: &mut State) -> Result<(ApplyReport, String), ChangeError> {
        let next = Config::load(&self.config_path).map_err(|e| {
            log::info!("reload refused, keeping the running configuration: {e}");
            ChangeError::Invalid(e.to_string())
        })?;
        log_warnings(&next);
        let restart_only = restart_only_changes(&st.running, &next);
        if !restart_only.is_empty() {
            let why = refusal(&restart_only);
            log::info!("reload refused: {why}");
            return Err(ChangeError::Invalid(why));
        }
        Self::widen_for(st, &next).inspect_err(|e| log::warn!("reload refused: {e}"))?;
        let report = match self.apply(&st.maps, &next) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("reload failed while applying ({e}); the tables may be partly updated, fix the file and reload again");
                // The controller goes on with the configuration in force.
                self.sync_controller(st);
                return Err(ChangeError::Failed(format!(
                    "applying the configuration: {e}"
                )));
            }
        };
        let mut said = format!(
            "reloaded: +{} -{} VIPs, +{} -{} DIPs",
            report.vips_added, report.vips_removed, report.dips_added, report.dips_removed
        );
        let controller = controller_changes(&st.running, &next);
        if !controller.is_empty() {
            said.push_str(&format!("; changed {}", controller.join(", ")));
        }
        log::info!("{said}");
        self.take(st, next);
        Ok((report, said))
    }

    /// Changes the file with `edit` (given the file's configuration as it
    /// is, and its document), then validates, applies and writes it back.
    /// `edit` returns what it did, for the log and the caller.
    pub fn edit<T: std::fmt::Display>(
        &self,
        edit: impl FnOnce(&Config, &mut DocumentMut) -> Result<T, ChangeError>,
    ) -> Result<(T, ApplyReport), ChangeError> {
        let mut st = self.lock();
        // The real file, not a symlink to it: the rename replaces the file.
        let target = fs::canonicalize(&self.config_path)
            .map_err(|e| ChangeError::Failed(format!("{}: {e}", self.config_path.display())))?;
        let name = target.display().to_string();
        let text = fs::read_to_string(&target)
            .map_err(|e| ChangeError::Failed(format!("reading {name}: {e}")))?;
        let current = Config::parse(&name, &text).map_err(|e| {
            ChangeError::Conflict(format!(
                "the configuration file does not load as it is ({e}); fix it and reload, then \
                 try again"
            ))
        })?;
        let mut doc: DocumentMut = text
            .parse()
            .map_err(|e| ChangeError::Conflict(format!("{name}: {e}")))?;
        let done = edit(&current, &mut doc)?;
        let new_text = doc.to_string();
        if new_text == text {
            // Nothing to apply: no table version, no rewrite.
            log::info!("api: {done}");
            return Ok((done, ApplyReport::default()));
        }
        let next = Config::parse(&name, &new_text).map_err(|e| {
            ChangeError::Invalid(format!(
                "the change would make the configuration invalid: {}: {}",
                e.field, e.message
            ))
        })?;
        let restart_only = restart_only_changes(&st.running, &next);
        if !restart_only.is_empty() {
            return Err(ChangeError::Conflict(format!(
                "the configuration file was changed since weir serve started: {}",
                refusal(&restart_only)
            )));
        }
        let staged = Staged::write(&target, &new_text).map_err(|e| {
            ChangeError::Failed(format!(
                "cannot write the configuration next to {name} ({e}), so the change was not \
                 applied: make its directory writable for weir serve, or change the file by hand \
                 and reload"
            ))
        })?;
        Self::widen_for(&mut st, &next).inspect_err(|e| log::warn!("api: change refused: {e}"))?;
        let report = match self.apply(&st.maps, &next) {
            Ok(r) => r,
            Err(e) => return Err(self.restore(&mut st, format!("applying the change failed: {e}"))),
        };
        if let Err(e) = staged.commit() {
            return Err(self.restore(&mut st, format!("replacing {name} failed: {e}")));
        }
        log::info!("api: {done}; {name} rewritten");
        log_warnings(&next);
        self.take(&mut st, next);
        Ok((done, report))
    }

    /// Applies `cfg` under the table lock, and counts it, which keeps the
    /// controller from publishing until its reconfigure (every caller ends
    /// with `sync_controller`).
    fn apply(&self, maps: &Maps, cfg: &Config) -> Result<ApplyReport, String> {
        let _tables = self
            .shared
            .table_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.shared.applied.fetch_add(1, Ordering::SeqCst);
        let report = apply(maps, cfg).map_err(|e| format!("{e:#}"))?;
        // In a cluster the leader's tables stand, not the configured weights
        // `apply` just wrote.
        if let Some(c) = self.shared.cluster.get() {
            c.reapply(maps);
        }
        Ok(report)
    }

    /// After a failed edit: the configuration in force goes back into the
    /// maps (the file was not touched).
    fn restore(&self, st: &mut State, why: String) -> ChangeError {
        let back = match self.apply(&st.maps, &st.running) {
            Ok(_) => "the previous configuration is in force again".to_string(),
            Err(e) => format!("restoring the previous configuration failed too ({e}); reload"),
        };
        self.sync_controller(st);
        log::info!("api: {why}; {back}");
        ChangeError::Failed(format!("{why}; the file is unchanged and {back}"))
    }

    /// Makes `next` the running configuration.
    fn take(&self, st: &mut State, next: Config) {
        prime_neighbours(&next);
        let passive = wants_passive_telemetry(&next);
        if passive != wants_passive_telemetry(&st.running) {
            match st.maps.set_passive_telemetry(passive) {
                Ok(()) => log::info!(
                    "passive telemetry {} in the data plane",
                    if passive { "on" } else { "off" }
                ),
                Err(e) => log::warn!("switching passive telemetry: {e:#}"),
            }
        }
        st.running = next;
        self.sync_controller(st);
    }

    /// Starts, reconfigures or stops the controller as the running
    /// configuration wants.
    fn sync_controller(&self, st: &mut State) {
        match (&st.controller, st.running.wants_controller()) {
            (Some(c), true) => c.reconfigure(&st.running),
            (Some(_), false) => st.controller = None,
            (None, true) => {
                st.controller = start_controller(&st.running, &self.shared, &self.run_dir)
            }
            (None, false) => {}
        }
    }
}

/// Whether the data plane should time nat requests (`[controller]
/// telemetry = "passive"`).
pub(crate) fn wants_passive_telemetry(cfg: &Config) -> bool {
    cfg.controller
        .as_ref()
        .is_some_and(|c| c.telemetry == weir_config::TelemetryKind::Passive)
}

/// Starts the controller thread when the configuration wants one.
fn start_controller(cfg: &Config, shared: &Arc<Shared>, run_dir: &Path) -> Option<Controller> {
    if !cfg.wants_controller() {
        return None;
    }
    match Controller::start(cfg, shared.clone(), Some(run_dir.to_path_buf())) {
        Ok(c) => {
            let p = Params::of(cfg);
            log::info!(
                "controller: policy {:?} (m = {}), every {} ms",
                p.policy,
                p.effective_m(),
                p.interval.as_millis()
            );
            Some(c)
        }
        Err(e) => {
            log::warn!("controller not started, static weights stay: {e:#}");
            None
        }
    }
}

/// A new version of a file, written and synced in the file's directory but
/// not yet in its place; removed unless committed.
pub struct Staged {
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

/// Distinguishes the temporary files of one process.
static STAGED: AtomicU64 = AtomicU64::new(0);

impl Staged {
    /// Writes `text` to a new file next to `target`, with `target`'s mode
    /// and owner, and syncs it.
    pub fn write(target: &Path, text: &str) -> io::Result<Staged> {
        let dir = target.parent().unwrap_or(Path::new("."));
        let name = target.file_name().unwrap_or_default().to_string_lossy();
        let tmp = dir.join(format!(
            ".{name}.weir-{}-{}",
            std::process::id(),
            STAGED.fetch_add(1, Ordering::Relaxed)
        ));
        let meta = fs::metadata(target)?;
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(meta.mode() & 0o7777)
            .open(&tmp)?;
        let staged = Staged {
            tmp,
            target: target.to_path_buf(),
            committed: false,
        };
        f.write_all(text.as_bytes())?;
        // Keep the owner: a file an operator owns stays theirs. Root may do
        // this; anyone else keeps their own file, which is the same owner.
        if meta.uid() != weir_sys::process::euid() {
            std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid()))?;
        }
        f.sync_all()?;
        Ok(staged)
    }

    /// Renames the new version over the file, and syncs the directory so
    /// the rename survives a crash.
    pub fn commit(mut self) -> io::Result<()> {
        fs::rename(&self.tmp, &self.target)?;
        self.committed = true;
        if let Some(dir) = self.target.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// What the file has that is legal but odd (a VIP with no DIPs, ...).
pub(crate) fn log_warnings(cfg: &Config) {
    for w in &cfg.warnings {
        log::warn!("warning: {w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A private directory, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let d = std::env::temp_dir().join(format!("weir-live-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&d);
            fs::create_dir_all(&d).unwrap();
            Dir(d)
        }

        fn names(&self) -> Vec<String> {
            let mut v: Vec<String> = fs::read_dir(&self.0)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::set_permissions(&self.0, fs::Permissions::from_mode(0o755));
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_staged_file_replaces_the_old_one_only_when_committed() {
        let d = Dir::new("staged");
        let f = d.0.join("weir.toml");
        fs::write(&f, "old\n").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
        let s = Staged::write(&f, "new\n").unwrap();
        // Until the rename the file is the old one, and the new text sits
        // next to it, synced.
        assert_eq!(fs::read_to_string(&f).unwrap(), "old\n");
        assert_eq!(d.names().len(), 2, "{:?}", d.names());
        s.commit().unwrap();
        assert_eq!(fs::read_to_string(&f).unwrap(), "new\n");
        assert_eq!(d.names(), vec!["weir.toml".to_string()]);
        let mode = fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640, "the mode was not kept");
        // Dropped without a commit: no trace.
        drop(Staged::write(&f, "newer\n").unwrap());
        assert_eq!(fs::read_to_string(&f).unwrap(), "new\n");
        assert_eq!(d.names(), vec!["weir.toml".to_string()]);
    }

    /// Capability numbers from linux/capability.h that let root write
    /// where the mode says no.
    const CAP_DAC_OVERRIDE: u32 = 1;
    const CAP_DAC_READ_SEARCH: u32 = 2;
    const CAP_FOWNER: u32 = 3;

    /// Drops the capabilities that override file permissions from the
    /// calling thread's effective set (capabilities are per thread).
    fn drop_dac_override() -> io::Result<()> {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Default, Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let header = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let mut data = [Data::default(); 2];
        // SAFETY: capget/capset with a v3 header and two data structs.
        unsafe {
            if libc::syscall(libc::SYS_capget, &header, data.as_mut_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
            for cap in [CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER] {
                data[0].effective &= !(1 << cap);
            }
            if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    #[test]
    fn a_read_only_directory_refuses_the_new_version_and_keeps_the_file() {
        let d = Dir::new("readonly");
        let f = d.0.join("weir.toml");
        fs::write(&f, "old\n").unwrap();
        fs::set_permissions(&d.0, fs::Permissions::from_mode(0o555)).unwrap();
        let f2 = f.clone();
        let e = std::thread::spawn(move || {
            drop_dac_override().unwrap();
            Staged::write(&f2, "new\n").map(|_| ()).unwrap_err()
        })
        .join()
        .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert_eq!(fs::read_to_string(&f).unwrap(), "old\n");
        assert_eq!(d.names(), vec!["weir.toml".to_string()]);
    }
}
