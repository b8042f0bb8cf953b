//! Which CPUs a benchmark's threads run on, and how much CPU time each got (Linux only).
//!
//! A thread inherits its creator's affinity, so a benchmark that narrows its own thread's
//! affinity before starting a run narrows every thread the run starts; [`pin_named`] then
//! moves the threads of a given name (by `/proc/self/task/*/comm`) to their own CPU,
//! as `taskset -p` would. [`sample`] reads each thread's scheduler statistics
//! (`/proc/self/task/*/schedstat`: time on a CPU, time waiting on a run queue).

use std::collections::BTreeMap;

/// One thread's scheduler counters, nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStat {
    /// Time on a CPU.
    pub run_ns: u64,
    /// Time runnable but waiting for a CPU.
    pub wait_ns: u64,
}

/// The CPUs the calling thread may run on.
pub fn allowed() -> Result<Vec<usize>, String> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(format!("sched_getaffinity: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: CPU_ISSET reads the set within its bounds (i < CPU_SETSIZE).
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect())
}

/// Restricts thread `tid` (0: the calling thread) to `cpus`.
pub fn set(tid: i32, cpus: &[usize]) -> Result<(), String> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET writes within the set (callers pass CPUs from `allowed`).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a live cpu_set_t of the size given.
    if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(format!(
            "sched_setaffinity({tid}, {cpus:?}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// This process's threads: id and name.
fn threads() -> Vec<(i32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let tid: i32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some((tid, comm.trim_end().to_string()))
        })
        .collect()
}

/// Moves every thread whose name starts with `prefix` to `cpus`; returns how many.
pub fn pin_named(prefix: &str, cpus: &[usize]) -> Result<usize, String> {
    let mut n = 0;
    for (tid, _) in threads().into_iter().filter(|(_, c)| c.starts_with(prefix)) {
        set(tid, cpus)?;
        n += 1;
    }
    Ok(n)
}

/// Every thread's counters by name (threads of the same name summed).
pub fn sample() -> BTreeMap<String, SchedStat> {
    let mut out: BTreeMap<String, SchedStat> = BTreeMap::new();
    for (tid, comm) in threads() {
        let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")) else {
            continue;
        };
        let mut f = s.split_whitespace().map(|v| v.parse::<u64>().unwrap_or(0));
        let e = out.entry(comm).or_default();
        e.run_ns += f.next().unwrap_or(0);
        e.wait_ns += f.next().unwrap_or(0);
    }
    out
}
