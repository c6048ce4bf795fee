//! The node's own usage, read as cAdvisor reads the root container: CPU from `/proc/stat`,
//! memory from `/proc/meminfo`, network from `/proc/net/dev` (the default route's interface
//! first), and the filesystem under the kubelet's root directory from `statvfs`. The parsers
//! take the files' text, so they are tested on fixed samples.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::time;
use super::types::{FsStats, InterfaceStats, MemoryStats, NetworkStats};

/// What `/proc/stat` says about the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// CPU time used by everything but idle and I/O wait, in clock ticks.
    pub busy_ticks: u64,
    /// When the node booted, in seconds since the epoch.
    pub boot_time: u64,
}

/// `/proc/stat`'s aggregate `cpu` line and `btime`, if both are there.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let mut busy_ticks = None;
    let mut boot_time = None;
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        match fields.next() {
            Some("cpu") => {
                let ticks: Vec<u64> = fields.map_while(|f| f.parse().ok()).collect();
                // user nice system idle iowait irq softirq steal (guest time is in user).
                let at = |i: usize| ticks.get(i).copied().unwrap_or(0);
                busy_ticks =
                    (ticks.len() >= 4).then(|| at(0) + at(1) + at(2) + at(5) + at(6) + at(7));
            }
            Some("btime") => boot_time = fields.next().and_then(|f| f.parse().ok()),
            _ => {}
        }
    }
    Some(ProcStat {
        busy_ticks: busy_ticks?,
        boot_time: boot_time?,
    })
}

/// The node's memory from `/proc/meminfo` (values in kB there), as cAdvisor reports the root
/// container: usage is what is not free, the working set is usage less inactive file pages,
/// available is the capacity less the working set (the kubelet's eviction signal).
pub fn parse_meminfo(text: &str, at: SystemTime) -> Option<MemoryStats> {
    let field = |name: &str| {
        let line = text.lines().find(|l| l.split(':').next() == Some(name))?;
        let kb: u64 = line.split_ascii_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    let total = field("MemTotal")?;
    let usage = total.saturating_sub(field("MemFree")?);
    let working_set = usage.saturating_sub(field("Inactive(file)").unwrap_or(0));
    Some(MemoryStats {
        time: time(at),
        available_bytes: Some(total.saturating_sub(working_set)),
        usage_bytes: Some(usage),
        working_set_bytes: Some(working_set),
        rss_bytes: field("AnonPages"),
    })
}

/// The interfaces of `/proc/net/dev` but loopback, the one `default` names first.
pub fn parse_net_dev(text: &str, default: Option<&str>, at: SystemTime) -> Option<NetworkStats> {
    let mut interfaces: Vec<InterfaceStats> = text
        .lines()
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let c: Vec<u64> = counters
                .split_ascii_whitespace()
                .map_while(|f| f.parse().ok())
                .collect();
            // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs
            (c.len() >= 11).then(|| InterfaceStats {
                name: name.trim().to_string(),
                rx_bytes: Some(c[0]),
                rx_errors: Some(c[2]),
                tx_bytes: Some(c[8]),
                tx_errors: Some(c[10]),
            })
        })
        .filter(|i| i.name != "lo")
        .collect();
    if let Some(i) = interfaces
        .iter()
        .position(|i| Some(i.name.as_str()) == default)
    {
        interfaces[..=i].rotate_right(1);
    }
    Some(NetworkStats {
        time: time(at),
        default: interfaces.first()?.clone(),
        interfaces,
    })
}

/// The interface of the default IPv4 route in `/proc/net/route`.
pub fn default_interface(routes: &str) -> Option<&str> {
    routes.lines().skip(1).find_map(|line| {
        let mut fields = line.split_ascii_whitespace();
        let name = fields.next()?;
        (fields.next()? == "00000000").then_some(name)
    })
}

/// The node's usage read from `/proc` at `at`; `None` for what cannot be read.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    /// When the node booted.
    pub booted: Option<SystemTime>,
    /// CPU nanoseconds used since boot, all cores.
    pub cpu_used: Option<u64>,
    /// Memory.
    pub memory: Option<MemoryStats>,
    /// Network interfaces.
    pub network: Option<NetworkStats>,
}

/// Reads the node's usage from `/proc`, stamped `at`.
pub fn read(at: SystemTime) -> Reading {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let stat = read("/proc/stat").as_deref().and_then(parse_stat);
    let ticks_per_second = rustix::param::clock_ticks_per_second().max(1);
    let routes = read("/proc/net/route").unwrap_or_default();
    Reading {
        booted: stat.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s.boot_time)),
        cpu_used: stat.map(|s| s.busy_ticks * (1_000_000_000 / ticks_per_second)),
        memory: read("/proc/meminfo").and_then(|t| parse_meminfo(&t, at)),
        network: read("/proc/net/dev")
            .and_then(|t| parse_net_dev(&t, default_interface(&routes), at)),
    }
}

/// The filesystem holding `dir` (or its nearest existing parent).
pub fn filesystem(dir: &Path, at: SystemTime) -> Option<FsStats> {
    let existing = dir.ancestors().find(|d| d.exists())?;
    let fs = rustix::fs::statvfs(existing).ok()?;
    let block = fs.f_frsize;
    Some(FsStats {
        time: time(at),
        available_bytes: Some(fs.f_bavail * block),
        capacity_bytes: Some(fs.f_blocks * block),
        used_bytes: Some(fs.f_blocks.saturating_sub(fs.f_bfree) * block),
        inodes_free: Some(fs.f_ffree),
        inodes: Some(fs.f_files),
        inodes_used: Some(fs.f_files.saturating_sub(fs.f_ffree)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n\
        intr 1 2 3\nbtime 1700000000\nprocesses 42\n";
    const MEMINFO: &str = "MemTotal:        8000000 kB\nMemFree:         2000000 kB\n\
        MemAvailable:    5000000 kB\nInactive(file):  1000000 kB\nAnonPages:       3000000 kB\n";
    const NET_DEV: &str = "Inter-|   Receive                            |  Transmit\n \
        face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
        lo: 500 5 0 0 0 0 0 0 500 5 0 0 0 0 0 0\n  \
        eth0: 1000 10 1 0 0 0 0 0 2000 20 2 0 0 0 0 0\n  \
        eth1: 3000 30 3 0 0 0 0 0 4000 40 4 0 0 0 0 0\n";
    const ROUTE: &str = "Iface\tDestination\tGateway\tFlags\n\
        eth0\t0000A8C0\t00000000\t0001\neth1\t00000000\t0101A8C0\t0003\n";

    #[test]
    fn busy_cpu_is_everything_but_idle_and_iowait() {
        let stat = parse_stat(STAT).unwrap();
        assert_eq!(stat.busy_ticks, 100 + 5 + 50 + 3 + 2 + 1);
        assert_eq!(stat.boot_time, 1_700_000_000);
        assert_eq!(parse_stat("cpu 1 2\n"), None);
    }

    #[test]
    fn node_working_set_is_usage_less_inactive_file_pages() {
        let m = parse_meminfo(MEMINFO, SystemTime::UNIX_EPOCH).unwrap();
        let kb = 1024;
        assert_eq!(m.usage_bytes, Some(6_000_000 * kb));
        assert_eq!(m.working_set_bytes, Some(5_000_000 * kb));
        assert_eq!(m.available_bytes, Some(3_000_000 * kb));
        assert_eq!(m.rss_bytes, Some(3_000_000 * kb));
        assert!(parse_meminfo("MemFree: 1 kB\n", SystemTime::UNIX_EPOCH).is_none());
    }

    #[test]
    fn the_default_route_interface_comes_first_and_loopback_is_left_out() {
        assert_eq!(default_interface(ROUTE), Some("eth1"));
        let net = parse_net_dev(NET_DEV, Some("eth1"), SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(net.default.name, "eth1");
        assert_eq!(
            (net.default.rx_bytes, net.default.tx_errors),
            (Some(3000), Some(4))
        );
        let names: Vec<_> = net.interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["eth1", "eth0"]);
        let only_lo = "a|b\nc|d\n lo: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n";
        assert!(parse_net_dev(only_lo, None, SystemTime::UNIX_EPOCH).is_none());
    }

    #[test]
    fn the_filesystem_of_a_missing_directory_is_its_parents() {
        let dir = tempfile::tempdir().unwrap();
        let fs = filesystem(&dir.path().join("not/yet"), SystemTime::UNIX_EPOCH).unwrap();
        assert!(fs.capacity_bytes.unwrap() > 0);
        assert!(fs.available_bytes <= fs.capacity_bytes);
    }
}
