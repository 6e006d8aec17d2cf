//! Linux `/proc` readers for the bench driver: a process's resident set, CPU time and system-call
//! counts, this
//! thread's CPU time, and machine facts for the report. Owns no sockets and starts nothing;
//! every reader returns `None` when the file is missing or unparsable (never panics).

use std::fs;

/// `VmRSS` of `pid` in KiB (`/proc/PID/status`).
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    field_kib(&status, "VmRSS:")
}

/// `Rss` of `pid` in KiB from `/proc/PID/smaps_rollup` (same pages as `VmRSS`, counted by the
/// page walker instead of the lazily updated counters).
pub fn smaps_rss_kib(pid: u32) -> Option<u64> {
    let rollup = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    field_kib(&rollup, "Rss:")
}

/// `RssAnon` of `pid` in KiB (heap, stacks: what grows with sessions).
pub fn rss_anon_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    field_kib(&status, "RssAnon:")
}

fn field_kib(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// (utime, stime) of `pid` in clock ticks (`/proc/PID/stat` fields 14 and 15), all threads.
pub fn cpu_ticks(pid: u32) -> Option<(u64, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it start past the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state), so field N is f[N - 3].
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// (`syscr`, `syscw`) of `pid` from `/proc/PID/io`: read-like and write-like system calls
/// (read, readv, recv*, … / write, writev, send*, …) since the process started, all threads.
pub fn io_syscalls(pid: u32) -> Option<(u64, u64)> {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    let get = |name: &str| -> Option<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .parse()
            .ok()
    };
    Some((get("syscr:")?, get("syscw:")?))
}

/// Nanoseconds on CPU of the main thread of `pid` (`/proc/PID/schedstat`, first field).
/// The proxy is single-threaded, so this is its whole CPU time at ns resolution.
pub fn sched_ns(pid: u32) -> Option<u64> {
    schedstat(&format!("/proc/{pid}/schedstat"))
}

/// Nanoseconds on CPU of the calling thread (`/proc/thread-self/schedstat`).
pub fn thread_cpu_ns() -> Option<u64> {
    schedstat("/proc/thread-self/schedstat")
}

fn schedstat(path: &str) -> Option<u64> {
    fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Clock ticks per second: `BENCH_CLK_TCK` (run.sh passes `getconf CLK_TCK`), else 100.
pub fn clk_tck() -> u64 {
    std::env::var("BENCH_CLK_TCK")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// `model name` of the first CPU in `/proc/cpuinfo`.
pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// Whether the first CPU advertises the named flag (`aes`, `vaes`, …).
pub fn cpu_flag(flag: &str) -> bool {
    fs::read_to_string("/proc/cpuinfo").is_ok_and(|t| {
        t.lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| l.split_whitespace().any(|w| w == flag))
    })
}

/// Kernel release (`/proc/sys/kernel/osrelease`).
pub fn kernel() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Soft `RLIMIT_NOFILE` of this process (`/proc/self/limits`).
pub fn nofile() -> Option<u64> {
    let t = fs::read_to_string("/proc/self/limits").ok()?;
    let l = t.lines().find(|l| l.starts_with("Max open files"))?;
    l.split_whitespace().nth(3)?.parse().ok()
}

/// Resident KiB per mapping name from `/proc/PID/smaps` (file basename, `[heap]`, `[stack]`,
/// `anon` for nameless), largest first.
pub fn rss_by_mapping(pid: u32) -> Vec<(String, u64)> {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/smaps")) else {
        return Vec::new();
    };
    let mut sums: Vec<(String, u64)> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            // A mapping header: "start-end perms offset dev inode [path]".
            let path = line.split_whitespace().nth(5).unwrap_or("anon");
            current = path.rsplit('/').next().unwrap_or(path).to_string();
        } else if let Some(kib) = line
            .strip_prefix("Rss:")
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        {
            match sums.iter_mut().find(|(n, _)| *n == current) {
                Some((_, k)) => *k += kib,
                None => sums.push((current.clone(), kib)),
            }
        }
    }
    sums.retain(|(_, k)| *k > 0);
    sums.sort_by_key(|e| std::cmp::Reverse(e.1));
    sums
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`), e.g. `"1.77 0.90 0.41"`.
pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_string())
}
