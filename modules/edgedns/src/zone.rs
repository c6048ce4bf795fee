//! The cluster zone (`cluster.local` by default): the records the Kubernetes DNS
//! specification gives the Services and EndpointSlices the edge store holds, kept as a table of
//! names so a query is one lookup. Pure: objects in, records out; the follower in
//! [`crate::follow`] feeds it from the store's change log.
//!
//! - `<svc>.<ns>.svc.<domain>`: A/AAAA of the cluster IPs; of each ready endpoint for a headless
//!   Service (all of them with `publishNotReadyAddresses`); a CNAME for an ExternalName one.
//! - `<host>.<svc>.<ns>.svc.<domain>` for each endpoint of a headless Service: its `hostname`,
//!   or its address with dashes (`10-0-0-7`), as CoreDNS names them.
//! - `_<port>._<proto>.<svc>.<ns>.svc.<domain>`: SRV for each named port, pointing at the
//!   Service name (cluster IP) or at each endpoint's name (headless).
//! - PTR for each cluster IP and each headless endpoint address.
//! - `<a-b-c-d>.<ns>.pod.<domain>`: A of that address (CoreDNS's `pods insecure`).
//! - `dns-version.<domain>`: TXT `1.1.0`, the specification's schema version.
//! - A name in the zone that nothing owns is NXDOMAIN; a name that exists (or has names below
//!   it, like `<ns>.svc.<domain>`) without records of the asked type is NODATA. Both carry the
//!   zone's SOA in the authority section.

use std::collections::HashMap;
use std::net::IpAddr;

use hickory_proto::rr::rdata::{A, AAAA, CNAME, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use crate::objects::{Service, ServiceKind, Slice};

/// The answer to one question.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Answer {
    /// NOERROR with records; `additionals` are addresses of SRV targets.
    Records {
        answers: Vec<Record>,
        additionals: Vec<Record>,
    },
    /// NOERROR, no records of that type (SOA in authority).
    NoData,
    /// The name does not exist in the zone (SOA in authority).
    NxDomain,
    /// Not a name of the zone, nor a reverse name it knows: forward it.
    NotOurs,
}

/// The Kubernetes DNS specification's schema version (`dns-version.<domain>` TXT).
const DNS_SCHEMA_VERSION: &str = "1.1.0";

/// A Service's namespace and name.
type ServiceId = (String, String);

/// The zone's records.
pub(crate) struct Zone {
    apex: Name,
    svc: Name,
    pod: Name,
    ttl: u32,
    serial: u32,
    services: HashMap<ServiceId, Service>,
    /// By namespace and slice name.
    slices: HashMap<(String, String), Slice>,
    /// What each Service put in the zone.
    owned: HashMap<ServiceId, Owned>,
    /// Owner name to records.
    names: HashMap<Name, Vec<Record>>,
    /// Names in the zone that exist, with the number of owned names at or below each.
    existing: HashMap<Name, usize>,
}

/// The names a Service makes exist and the records it put at them.
struct Owned {
    names: Vec<Name>,
    records: Vec<Record>,
}

// === impl Zone ===

impl Zone {
    /// An empty zone for `domain` (e.g. `cluster.local`); records live `ttl` seconds.
    pub(crate) fn new(domain: &str, ttl: u32) -> Result<Zone, String> {
        let apex = fqdn(domain).map_err(|e| e.to_string())?;
        let child = |label: &str| fqdn(&format!("{label}.{domain}")).map_err(|e| e.to_string());
        Ok(Zone {
            svc: child("svc")?,
            pod: child("pod")?,
            apex,
            ttl,
            serial: 1,
            services: HashMap::new(),
            slices: HashMap::new(),
            owned: HashMap::new(),
            names: HashMap::new(),
            existing: HashMap::new(),
        })
    }

    /// Sets (or, with `None`, removes) Service `namespace/name`.
    pub(crate) fn set_service(&mut self, namespace: &str, name: &str, svc: Option<Service>) {
        let id = (namespace.to_owned(), name.to_owned());
        match svc {
            Some(svc) => self.services.insert(id.clone(), svc),
            None => self.services.remove(&id),
        };
        self.rebuild(&id);
    }

    /// Sets (or, with `None`, removes) EndpointSlice `namespace/name`.
    pub(crate) fn set_slice(&mut self, namespace: &str, name: &str, slice: Option<Slice>) {
        let key = (namespace.to_owned(), name.to_owned());
        let before = match slice {
            Some(slice) => {
                let now = slice.service.clone();
                let before = self.slices.insert(key, slice).map(|s| s.service);
                self.rebuild(&(namespace.to_owned(), now.clone()));
                before.filter(|b| *b != now)
            }
            None => self.slices.remove(&key).map(|s| s.service),
        };
        if let Some(before) = before {
            self.rebuild(&(namespace.to_owned(), before));
        }
    }

    /// Empties the zone (before a full read of the store).
    pub(crate) fn clear(&mut self) {
        self.services.clear();
        self.slices.clear();
        self.owned.clear();
        self.names.clear();
        self.existing.clear();
        self.serial = self.serial.wrapping_add(1);
    }

    /// The zone's SOA record.
    pub(crate) fn soa(&self) -> Record {
        let soa = SOA::new(
            self.apex
                .prepend_label("dns")
                .and_then(|n| n.prepend_label("ns"))
                .unwrap_or_else(|_| self.apex.clone()),
            self.apex
                .prepend_label("hostmaster")
                .unwrap_or_else(|_| self.apex.clone()),
            self.serial,
            7200,
            1800,
            86400,
            self.ttl,
        );
        Record::from_rdata(self.apex.clone(), self.ttl, RData::SOA(soa))
    }

    /// Answers `qtype` for `name` (lowercase, fully qualified).
    pub(crate) fn lookup(&self, name: &Name, qtype: RecordType) -> Answer {
        if let Some(records) = self.names.get(name) {
            return self.pick(records, qtype);
        }
        if !self.apex.zone_of(name) {
            return Answer::NotOurs;
        }
        if *name == self.apex {
            return match qtype {
                RecordType::SOA | RecordType::ANY => records(vec![self.soa()]),
                _ => Answer::NoData,
            };
        }
        if name.num_labels() == self.apex.num_labels() + 1
            && name.iter().next() == Some(b"dns-version".as_slice())
        {
            // The schema version of the Kubernetes DNS specification answered here.
            return match qtype {
                RecordType::TXT | RecordType::ANY => {
                    let txt = TXT::new(vec![DNS_SCHEMA_VERSION.to_owned()]);
                    records(vec![Record::from_rdata(
                        name.clone(),
                        self.ttl,
                        RData::TXT(txt),
                    )])
                }
                _ => Answer::NoData,
            };
        }
        if self.pod.zone_of(name) && *name != self.pod {
            return self.pod_name(name, qtype);
        }
        if *name == self.svc || self.existing.contains_key(name) {
            return Answer::NoData;
        }
        Answer::NxDomain
    }

    /// The records of type `qtype` among `records` (a CNAME answers any type).
    fn pick(&self, all: &[Record], qtype: RecordType) -> Answer {
        let wanted = |r: &&Record| qtype == RecordType::ANY || r.record_type() == qtype;
        let mut answers: Vec<Record> = all.iter().filter(wanted).cloned().collect();
        if answers.is_empty() {
            answers = all
                .iter()
                .filter(|r| r.record_type() == RecordType::CNAME)
                .cloned()
                .collect();
        }
        if answers.is_empty() {
            return Answer::NoData;
        }
        let additionals = answers
            .iter()
            .filter_map(|r| match r.data() {
                RData::SRV(srv) => self.names.get(srv.target()),
                _ => None,
            })
            .flatten()
            .filter(|r| matches!(r.record_type(), RecordType::A | RecordType::AAAA))
            .cloned()
            .collect();
        Answer::Records {
            answers,
            additionals,
        }
    }

    /// `<a-b-c-d>.<ns>.pod.<domain>`: the address the first label spells.
    fn pod_name(&self, name: &Name, qtype: RecordType) -> Answer {
        let below = name.num_labels() - self.pod.num_labels();
        if below == 1 {
            return Answer::NoData; // a namespace
        }
        let first = name.iter().next().map(String::from_utf8_lossy);
        let ip = first.filter(|_| below == 2).and_then(|l| undash(&l));
        let Some(ip) = ip else {
            return Answer::NxDomain;
        };
        let record = address(name.clone(), self.ttl, ip);
        match record.record_type() == qtype || qtype == RecordType::ANY {
            true => records(vec![record]),
            false => Answer::NoData,
        }
    }

    /// Computes Service `id`'s records again, from the Service and its slices.
    fn rebuild(&mut self, id: &ServiceId) {
        if let Some(old) = self.owned.remove(id) {
            self.withdraw(old);
        }
        let (built, base) = match self.services.get(id) {
            Some(svc) => (self.records_of(id, svc), self.base(id).ok()),
            None => (Vec::new(), None),
        };
        // A Service's own name exists even with nothing to answer (a headless one without
        // endpoints): NODATA, not NXDOMAIN.
        let mut owned = Owned {
            names: base.into_iter().collect(),
            records: Vec::new(),
        };
        for record in built {
            if owned.records.contains(&record) {
                continue;
            }
            if !owned.names.contains(record.name()) {
                owned.names.push(record.name().clone());
            }
            let at = self.names.entry(record.name().clone()).or_default();
            at.push(record.clone());
            owned.records.push(record);
        }
        for name in &owned.names {
            self.remember(name);
        }
        if !owned.names.is_empty() {
            self.owned.insert(id.clone(), owned);
        }
        self.serial = self.serial.wrapping_add(1);
    }

    /// Takes one Service's records out (others' records at the same names, e.g. a PTR of an
    /// address two headless Services share, stay).
    fn withdraw(&mut self, old: Owned) {
        for name in &old.names {
            self.forget(name);
        }
        for record in old.records {
            let Some(at) = self.names.get_mut(record.name()) else {
                continue;
            };
            if let Some(i) = at.iter().position(|r| *r == record) {
                at.swap_remove(i);
            }
            if at.is_empty() {
                self.names.remove(record.name());
            }
        }
    }

    /// Service `id`'s records (see the module doc).
    fn records_of(&self, id: &ServiceId, svc: &Service) -> Vec<Record> {
        let (namespace, name) = id;
        let Ok(base) = self.base(id) else {
            return Vec::new();
        };
        let ttl = self.ttl;
        let mut out = Vec::new();
        match &svc.kind {
            ServiceKind::ClusterIp(ips) => {
                for ip in ips {
                    out.push(address(base.clone(), ttl, *ip));
                    out.push(pointer(*ip, ttl, &base));
                }
                for port in svc.ports.iter().filter(|p| !p.name.is_empty()) {
                    if let Some(at) = srv_name(&port.name, &port.protocol, &base) {
                        let srv = SRV::new(0, 100, port.port, base.clone());
                        out.push(Record::from_rdata(at, ttl, RData::SRV(srv)));
                    }
                }
            }
            ServiceKind::ExternalName(target) => {
                if let Ok(target) = fqdn(target) {
                    out.push(Record::from_rdata(base, ttl, RData::CNAME(CNAME(target))));
                }
            }
            ServiceKind::Headless => self.endpoint_records(namespace, name, svc, &base, &mut out),
        }
        out
    }

    /// `<svc>.<ns>.svc.<domain>`.
    fn base(&self, (namespace, name): &ServiceId) -> Result<Name, hickory_proto::ProtoError> {
        fqdn(&format!("{name}.{namespace}.{}", self.svc))
    }

    /// A headless Service's records: one set per published endpoint address.
    fn endpoint_records(
        &self,
        namespace: &str,
        name: &str,
        svc: &Service,
        base: &Name,
        out: &mut Vec<Record>,
    ) {
        let ttl = self.ttl;
        let slices = self
            .slices
            .iter()
            .filter(|((ns, _), s)| ns == namespace && s.service == name)
            .map(|(_, s)| s);
        for slice in slices {
            let published = slice
                .endpoints
                .iter()
                .filter(|e| e.ready || svc.publish_not_ready);
            for ep in published {
                for ip in &ep.addresses {
                    let label = ep.hostname.clone().unwrap_or_else(|| dashed(*ip));
                    let Ok(host) = base.prepend_label(label.as_str()) else {
                        continue;
                    };
                    out.push(address(base.clone(), ttl, *ip));
                    out.push(address(host.clone(), ttl, *ip));
                    out.push(pointer(*ip, ttl, &host));
                    for port in slice.ports.iter().filter(|p| !p.name.is_empty()) {
                        if let Some(at) = srv_name(&port.name, &port.protocol, base) {
                            let srv = SRV::new(0, 100, port.port, host.clone());
                            out.push(Record::from_rdata(at, ttl, RData::SRV(srv)));
                        }
                    }
                }
            }
        }
    }

    /// `name` and its ancestors in the zone now exist (once more).
    fn remember(&mut self, name: &Name) {
        for at in self.ancestry(name) {
            *self.existing.entry(at).or_default() += 1;
        }
    }

    /// One owned name at or below each of `name`'s ancestors less.
    fn forget(&mut self, name: &Name) {
        for at in self.ancestry(name) {
            if let Some(n) = self.existing.get_mut(&at) {
                *n -= 1;
                if *n == 0 {
                    self.existing.remove(&at);
                }
            }
        }
    }

    /// `name` and its ancestors strictly below the apex (none for a name outside the zone).
    fn ancestry(&self, name: &Name) -> Vec<Name> {
        if !self.apex.zone_of(name) {
            return Vec::new();
        }
        let (top, bottom) = (self.apex.num_labels() + 1, name.num_labels());
        (top..=bottom).map(|n| name.trim_to(n as usize)).collect()
    }
}

/// A fully qualified, lowercase name.
pub(crate) fn fqdn(text: &str) -> Result<Name, hickory_proto::ProtoError> {
    let mut name = Name::from_ascii(text.trim_end_matches('.'))?.to_lowercase();
    name.set_fqdn(true);
    Ok(name)
}

fn records(answers: Vec<Record>) -> Answer {
    Answer::Records {
        answers,
        additionals: Vec::new(),
    }
}

/// An A or AAAA record.
fn address(name: Name, ttl: u32, ip: IpAddr) -> Record {
    let data = match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    Record::from_rdata(name, ttl, data)
}

/// The PTR record of `ip` pointing at `target`.
fn pointer(ip: IpAddr, ttl: u32, target: &Name) -> Record {
    let mut reverse = Name::from(ip).to_lowercase();
    reverse.set_fqdn(true);
    Record::from_rdata(reverse, ttl, RData::PTR(PTR(target.clone())))
}

/// `_<port>._<proto>.<base>`.
fn srv_name(port: &str, protocol: &str, base: &Name) -> Option<Name> {
    let proto = base.prepend_label(format!("_{protocol}")).ok()?;
    proto.prepend_label(format!("_{port}")).ok()
}

/// An address as a DNS label: `10-0-0-7`, `fd00--7`.
fn dashed(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// The address a dashed label spells.
fn undash(label: &str) -> Option<IpAddr> {
    if let Ok(v4) = label.replace('-', ".").parse() {
        return Some(IpAddr::V4(v4));
    }
    label.replace('-', ":").parse().ok().map(IpAddr::V6)
}

#[cfg(test)]
mod tests;
