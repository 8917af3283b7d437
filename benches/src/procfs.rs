//! CPU time and memory of a process, from `/proc` (Linux only).

use serde::Serialize;

/// What `/proc/<pid>` says about a process at one moment.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct ProcSample {
    /// User + system CPU seconds since the process started.
    pub cpu_seconds: f64,
    /// Resident set size now, bytes.
    pub rss_bytes: u64,
    /// Peak resident set size (VmHWM), bytes.
    pub peak_rss_bytes: u64,
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// `pid` 0 means this process.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let dir = if pid == 0 {
        "/proc/self".to_owned()
    } else {
        format!("/proc/{pid}")
    };
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
    let kib = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some(ProcSample {
        cpu_seconds: (utime + stime) as f64 / clock_ticks_per_second(),
        rss_bytes: kib("VmRSS:") * 1024,
        peak_rss_bytes: kib("VmHWM:") * 1024,
    })
}

/// Raises the open-file soft limit to the hard limit (thousands of sockets);
/// children started afterwards inherit it.
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read the struct we pass and nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    lim.rlim_cur
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_process() {
        let s = super::sample(0).expect("/proc/self");
        assert!(s.rss_bytes > 0 && s.peak_rss_bytes >= s.rss_bytes);
        assert!(s.cpu_seconds >= 0.0);
    }
}
