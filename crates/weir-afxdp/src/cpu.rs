//! Pinning a worker thread to one CPU, with an error that lists the CPUs
//! that do exist (and the ones this process may use) when asked for another.

use weir_sys::{allowed_cpus, format_cpu_list, online_cpus};

use crate::error::{Error, Result};

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    let online = online_cpus();
    if !online.contains(&cpu) || cpu >= libc::CPU_SETSIZE as usize {
        return Err(Error::NoCpu {
            cpu,
            online: format_cpu_list(&online),
        });
    }
    let allowed = allowed_cpus().map_err(|source| Error::Pin { cpu, source })?;
    if !allowed.contains(&cpu) {
        return Err(Error::CpuNotAllowed {
            cpu,
            allowed: format_cpu_list(&allowed),
        });
    }
    weir_sys::pin_current_thread(cpu).map_err(|source| Error::Pin { cpu, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_to_an_allowed_cpu_and_names_the_ones_that_exist_otherwise() {
        // On a thread of its own: pinning the test harness's would outlive the test.
        std::thread::spawn(|| {
            let cpu = allowed_cpus().unwrap()[0];
            pin_current_thread(cpu).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![cpu]);

            let err = pin_current_thread(100_000).unwrap_err();
            assert!(matches!(err, Error::NoCpu { cpu: 100_000, .. }), "{err}");
            let msg = err.to_string();
            assert!(msg.contains("CPU 100000 does not exist"), "{msg}");
            assert!(msg.contains(&format_cpu_list(&online_cpus())), "{msg}");
        })
        .join()
        .unwrap();
    }
}
