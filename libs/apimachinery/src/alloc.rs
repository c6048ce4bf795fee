//! The address spaces a Service allocates from, as kube-apiserver's
//! `--service-cluster-ip-range` and `--service-node-port-range`, and the choice of a free
//! value in them: random, preferring the upper band of the IP range for dynamic allocation so
//! the lower band stays free for IPs clients pick (kube's `ServiceIPStaticSubrange`).

use std::collections::HashSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An IPv4 CIDR block, such as `10.96.0.0/12`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    base: u32,
    prefix: u8,
}

/// An inclusive port range, such as `30000-32767`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

/// Both ranges of the Services of a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceRanges {
    pub cluster_ips: Cidr,
    pub node_ports: PortRange,
}

/// A range that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid range {0:?}: {1}")]
pub struct RangeError(String, &'static str);

// === impl Cidr ===

impl Cidr {
    /// The usable addresses: all but the network and broadcast addresses.
    pub fn usable(&self) -> u32 {
        let size = 1u64 << (32 - u32::from(self.prefix));
        u32::try_from(size.saturating_sub(2)).unwrap_or(u32::MAX)
    }

    /// The `n`-th usable address (0: the one after the network address).
    pub fn nth(&self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(self.base.wrapping_add(1).wrapping_add(n))
    }

    /// The index of `ip` among the usable addresses, if it is one.
    pub fn index_of(&self, ip: Ipv4Addr) -> Option<u32> {
        let n = u32::from(ip).checked_sub(self.base.wrapping_add(1))?;
        (n < self.usable()).then_some(n)
    }

    /// A free address, random from `seed`: first in the upper band, then anywhere.
    pub fn pick(&self, used: &HashSet<Ipv4Addr>, seed: u64) -> Option<Ipv4Addr> {
        let size = self.usable();
        if size == 0 {
            return None;
        }
        let reserved = (size / 16).clamp(16, 256).min(size / 2);
        let free = |n: u32| !used.contains(&self.nth(n));
        probe(reserved, size, seed, free)
            .or_else(|| probe(0, size, seed, free))
            .map(|n| self.nth(n))
    }
}

impl FromStr for Cidr {
    type Err = RangeError;

    fn from_str(s: &str) -> Result<Cidr, RangeError> {
        let bad = |why| RangeError(s.to_owned(), why);
        let (ip, prefix) = s
            .split_once('/')
            .ok_or_else(|| bad("expected address/prefix"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad("not an IPv4 address"))?;
        let prefix: u8 = prefix.parse().map_err(|_| bad("not a prefix length"))?;
        if !(1..=30).contains(&prefix) {
            return Err(bad("the prefix must be between 1 and 30"));
        }
        let mask = u32::MAX << (32 - u32::from(prefix));
        Ok(Cidr {
            base: u32::from(ip) & mask,
            prefix,
        })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }
}

// === impl PortRange ===

impl PortRange {
    pub fn contains(&self, port: i64) -> bool {
        (i64::from(self.first)..=i64::from(self.last)).contains(&port)
    }

    /// A free port, random from `seed`.
    pub fn pick(&self, used: &HashSet<u16>, seed: u64) -> Option<u16> {
        let size = u32::from(self.last - self.first) + 1;
        let port = |n: u32| self.first + u16::try_from(n).unwrap_or(0);
        probe(0, size, seed, |n| !used.contains(&port(n))).map(port)
    }
}

impl FromStr for PortRange {
    type Err = RangeError;

    fn from_str(s: &str) -> Result<PortRange, RangeError> {
        let bad = |why| RangeError(s.to_owned(), why);
        let (first, last) = s
            .split_once('-')
            .ok_or_else(|| bad("expected first-last"))?;
        let first: u16 = first.trim().parse().map_err(|_| bad("not a port"))?;
        let last: u16 = last.trim().parse().map_err(|_| bad("not a port"))?;
        if first == 0 || first > last {
            return Err(bad("the range must be non-empty and start above 0"));
        }
        Ok(PortRange { first, last })
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

// === impl ServiceRanges ===

impl Default for ServiceRanges {
    /// kube-apiserver's: `10.96.0.0/12` (kubeadm's default) and `30000-32767`.
    fn default() -> Self {
        ServiceRanges {
            cluster_ips: Cidr {
                base: u32::from(Ipv4Addr::new(10, 96, 0, 0)),
                prefix: 12,
            },
            node_ports: PortRange {
                first: 30000,
                last: 32767,
            },
        }
    }
}

macro_rules! string_serde {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

string_serde!(Cidr);
string_serde!(PortRange);

/// The first `n` in `from..to`, starting at a point chosen by `seed` and wrapping, for which
/// `free(n)`.
fn probe(from: u32, to: u32, seed: u64, free: impl Fn(u32) -> bool) -> Option<u32> {
    let span = to.checked_sub(from).filter(|s| *s > 0)?;
    let start = u32::try_from(seed % u64::from(span)).unwrap_or(0);
    (0..span)
        .map(|i| from + (start + i) % span)
        .find(|n| free(*n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_print_as_configured() {
        let cidr: Cidr = "10.96.0.0/12".parse().unwrap();
        assert_eq!(cidr.to_string(), "10.96.0.0/12");
        assert_eq!(cidr, ServiceRanges::default().cluster_ips);
        assert_eq!(
            "10.96.3.4/24".parse::<Cidr>().unwrap().to_string(),
            "10.96.3.0/24"
        );
        assert!("10.96.0.0".parse::<Cidr>().is_err());
        assert!("10.96.0.0/31".parse::<Cidr>().is_err());
        let ports: PortRange = "30000-32767".parse().unwrap();
        assert_eq!(ports, ServiceRanges::default().node_ports);
        assert!("5-1".parse::<PortRange>().is_err());
    }

    #[test]
    fn addresses_are_indexed_without_network_and_broadcast() {
        let cidr: Cidr = "10.0.0.0/29".parse().unwrap();
        assert_eq!(cidr.usable(), 6);
        assert_eq!(cidr.nth(0), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(cidr.index_of(Ipv4Addr::new(10, 0, 0, 6)), Some(5));
        assert_eq!(cidr.index_of(Ipv4Addr::new(10, 0, 0, 7)), None);
        assert_eq!(cidr.index_of(Ipv4Addr::new(10, 0, 0, 0)), None);
    }

    #[test]
    fn picks_avoid_used_values_until_the_range_is_full() {
        let cidr: Cidr = "10.0.0.0/29".parse().unwrap();
        let mut used = HashSet::new();
        for seed in 0..6 {
            let ip = cidr.pick(&used, seed * 7919).expect("a free address");
            assert!(cidr.index_of(ip).is_some());
            assert!(used.insert(ip));
        }
        assert_eq!(cidr.pick(&used, 1), None);
        let ports = PortRange {
            first: 30000,
            last: 30002,
        };
        let mut used = HashSet::new();
        for seed in 0..3 {
            assert!(used.insert(ports.pick(&used, seed).unwrap()));
        }
        assert_eq!(ports.pick(&used, 9), None);
    }

    #[test]
    fn dynamic_picks_prefer_the_upper_band() {
        let cidr: Cidr = "10.96.0.0/12".parse().unwrap();
        for seed in [0, 1, 12345, u64::MAX] {
            let ip = cidr.pick(&HashSet::new(), seed).unwrap();
            assert!(cidr.index_of(ip).unwrap() >= 256);
        }
    }
}
