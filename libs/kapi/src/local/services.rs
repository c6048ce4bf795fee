//! The service strategy: names are DNS-1035 labels; a Service is defaulted
//! ([`apimachinery::defaults::service`]) and validated on every write; its cluster IP and node
//! ports are allocated in the create's transaction from a ledger stored beside the objects
//! (as kube-apiserver's range allocators keep a bitmap in etcd), and an update keeps them.
//!
//! The ledger maps every allocated value to its owner, `namespace/name/uid`. An entry whose
//! owner the transaction read and found gone (or replaced) is stale and is dropped, so a
//! deleted Service's addresses come free at the next allocation, without a delete hook; an
//! entry whose owner was not read belongs to a Service created since, and stays.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use apimachinery::defaults;
use apimachinery::validation::{self, FieldError};
use apimachinery::{ApiError, ResourceInfo};
use objstore::{ObjKey, StoredObject};
use serde_json::{Map, Value, json};

use super::vocab::{Core, NameRule, Strategy, Target, parse};
use super::{meta, validate};

/// Services.
pub(super) struct Services;

/// Where the allocations are kept (kube's `/registry/ranges/serviceips`).
const LEDGER: (&str, &str) = ("ranges", "services");

/// What the ledger holds, read and written as JSON.
#[derive(Default)]
struct Ledger {
    cluster_ips: Map<String, Value>,
    node_ports: Map<String, Value>,
}

// === impl Services ===

impl Strategy for Services {
    fn name_rule(&self) -> NameRule {
        NameRule::Dns1035
    }

    fn canonicalize(&self, _target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        defaults::service::service(obj);
        Ok(())
    }

    fn prepare_create(&self, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
        check(&target.info, obj, validation::service::service(obj))
    }

    /// Keeps the allocated addresses the body leaves out (`kubectl apply` sends none), then
    /// refuses a changed cluster IP.
    fn prepare_update(
        &self,
        target: &Target,
        next: &mut Value,
        current: &Value,
    ) -> Result<(), ApiError> {
        keep_allocated(next, current);
        defaults::service::service(next);
        check(
            &target.info,
            next,
            validation::service::update(next, current),
        )
    }

    fn ledger(&self) -> Option<ObjKey> {
        Some(ObjKey::new(LEDGER.0, "", LEDGER.1))
    }

    fn allocate(
        &self,
        core: &Core,
        target: &Target,
        obj: &mut Value,
        ledger: Option<Value>,
        owners: &[(ObjKey, Option<StoredObject>)],
    ) -> Result<Option<Value>, ApiError> {
        let mut ledger = Ledger::from(ledger);
        ledger.drop_stale(owners);
        let (mut ips, mut ports) = ledger.used();
        for (_, stored) in owners {
            if let Some(svc) = stored.as_ref().map(parse).transpose()? {
                ips.extend(cluster_ip(&svc));
                ports.extend(node_ports(&svc));
            }
        }
        let owner = format!(
            "{}/{}/{}",
            target.namespace,
            meta::name(obj),
            meta::uid(obj)
        );
        let seed = seed();
        let errs = allocate_ip(core, obj, &ips, seed, &mut ledger, &owner);
        let errs = [
            errs,
            allocate_ports(core, obj, &ports, seed, &mut ledger, &owner),
        ]
        .concat();
        check(&target.info, obj, errs)?;
        Ok(Some(ledger.into_value()))
    }
}

// === impl Ledger ===

impl Ledger {
    fn from(value: Option<Value>) -> Ledger {
        let map = |key: &str| {
            value
                .as_ref()
                .and_then(|v| v.get(key))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        Ledger {
            cluster_ips: map("clusterIPs"),
            node_ports: map("nodePorts"),
        }
    }

    fn into_value(self) -> Value {
        json!({"clusterIPs": self.cluster_ips, "nodePorts": self.node_ports})
    }

    /// Drops the entries of owners read in the transaction and found gone or replaced.
    fn drop_stale(&mut self, owners: &[(ObjKey, Option<StoredObject>)]) {
        let live = |owner: &Value| {
            let mut parts = owner.as_str().unwrap_or("").splitn(3, '/');
            let (ns, name, uid) = (parts.next(), parts.next(), parts.next());
            let read = owners
                .iter()
                .find(|(k, _)| Some(k.namespace.as_str()) == ns && Some(k.name.as_str()) == name);
            match read {
                None => true,
                Some((_, stored)) => stored.as_ref().is_some_and(|s| Some(s.uid.as_str()) == uid),
            }
        };
        self.cluster_ips.retain(|_, owner| live(owner));
        self.node_ports.retain(|_, owner| live(owner));
    }

    fn used(&self) -> (HashSet<Ipv4Addr>, HashSet<u16>) {
        let ips = self
            .cluster_ips
            .keys()
            .filter_map(|k| k.parse().ok())
            .collect();
        let ports = self
            .node_ports
            .keys()
            .filter_map(|k| k.parse().ok())
            .collect();
        (ips, ports)
    }
}

// === helpers ===

/// Gives `obj` its cluster IP: the one it asks for, if in range and free, else a free one.
fn allocate_ip(
    core: &Core,
    obj: &mut Value,
    used: &HashSet<Ipv4Addr>,
    seed: u64,
    ledger: &mut Ledger,
    owner: &str,
) -> Vec<FieldError> {
    let spec = meta::object_mut(obj)
        .entry("spec")
        .or_insert_with(|| json!({}));
    let Some(spec) = spec.as_object_mut() else {
        return Vec::new();
    };
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName")
        || defaults::service::headless(spec)
    {
        return Vec::new();
    }
    let range = core.ranges.cluster_ips;
    let asked = spec.get("clusterIP").and_then(Value::as_str).unwrap_or("");
    let ip = if asked.is_empty() {
        match range.pick(used, seed) {
            Some(ip) => ip,
            None => {
                let why = format!("failed to allocate a serviceIP: range {range} is full");
                return vec![FieldError::forbidden("spec.clusterIPs", &why)];
            }
        }
    } else {
        let field = "spec.clusterIPs";
        let value = json!([asked]);
        let fail = |why: String| vec![FieldError::invalid(field, &value, &why)];
        let Ok(ip) = asked.parse::<Ipv4Addr>() else {
            return fail("must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".into());
        };
        if range.index_of(ip).is_none() {
            return fail(format!(
                "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {range}"
            ));
        }
        if used.contains(&ip) {
            return fail(format!(
                "failed to allocate IP {ip}: provided IP is already allocated"
            ));
        }
        ip
    };
    spec.insert("clusterIP".into(), json!(ip.to_string()));
    spec.insert("clusterIPs".into(), json!([ip.to_string()]));
    ledger.cluster_ips.insert(ip.to_string(), json!(owner));
    Vec::new()
}

/// Gives each port of a NodePort or LoadBalancer Service its node port: the one it asks for,
/// if in range and free, else a free one.
fn allocate_ports(
    core: &Core,
    obj: &mut Value,
    used: &HashSet<u16>,
    seed: u64,
    ledger: &mut Ledger,
    owner: &str,
) -> Vec<FieldError> {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Vec::new();
    };
    let kind = spec.get("type").and_then(Value::as_str).unwrap_or("");
    let lb_without =
        kind == "LoadBalancer" && spec.get("allocateLoadBalancerNodePorts") == Some(&json!(false));
    if !matches!(kind, "NodePort" | "LoadBalancer") || lb_without {
        return Vec::new();
    }
    let range = core.ranges.node_ports;
    let mut used = used.clone();
    let mut errs = Vec::new();
    let ports = spec.get_mut("ports").and_then(Value::as_array_mut);
    for (i, port) in ports.into_iter().flatten().enumerate() {
        let Some(port) = port.as_object_mut() else {
            continue;
        };
        let field = format!("spec.ports[{i}].nodePort");
        let chosen = match port.get("nodePort").and_then(Value::as_i64) {
            Some(asked) => {
                let value = json!(asked);
                if !range.contains(asked) {
                    let why = format!(
                        "provided port is not in the valid range. The range of valid ports is {range}"
                    );
                    errs.push(FieldError::invalid(field, &value, &why));
                    continue;
                }
                let asked = u16::try_from(asked).unwrap_or(0);
                if used.contains(&asked) {
                    errs.push(FieldError::invalid(
                        field,
                        &value,
                        "provided port is already allocated",
                    ));
                    continue;
                }
                asked
            }
            None => match range.pick(&used, seed.rotate_left(i as u32 * 7)) {
                Some(p) => p,
                None => {
                    let why = format!("failed to allocate a nodePort: range {range} is full");
                    errs.push(FieldError::forbidden(field, &why));
                    continue;
                }
            },
        };
        used.insert(chosen);
        port.insert("nodePort".into(), json!(chosen));
        ledger.node_ports.insert(chosen.to_string(), json!(owner));
    }
    errs
}

/// A PUT leaves the allocated cluster IP and node ports out: keep the current ones (kube's
/// `patchAllocatedValues`), node ports matched by port number and protocol, while the type
/// still has node ports.
fn keep_allocated(next: &mut Value, current: &Value) {
    let Some(cur) = current.get("spec") else {
        return;
    };
    let spec = meta::object_mut(
        meta::object_mut(next)
            .entry("spec")
            .or_insert_with(|| json!({})),
    );
    let same_type = spec.get("type").is_none_or(|t| Some(t) == cur.get("type"));
    let unset = |v: Option<&Value>| v.is_none_or(|v| v.is_null() || v == "");
    if unset(spec.get("clusterIP"))
        && (same_type || cur.get("type") != Some(&json!("ExternalName")))
    {
        for key in ["clusterIP", "clusterIPs"] {
            if let Some(v) = cur.get(key) {
                spec.insert(key.into(), v.clone());
            }
        }
    }
    // Node ports are kept only while the Service still needs them (a NodePort or
    // LoadBalancer before and after, as kube's `patchAllocatedValues`).
    let needs_node_ports =
        |t: Option<&Value>| matches!(t.and_then(Value::as_str), Some("NodePort" | "LoadBalancer"));
    let old_ports = cur
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !needs_node_ports(cur.get("type")) {
        return;
    }
    if !needs_node_ports(spec.get("type")) {
        // A type that has none: the node ports the write left as they were go with the
        // old type (kube's `dropTypeDependentFields`); one it set is refused by validation.
        let ports = spec.get_mut("ports").and_then(Value::as_array_mut);
        for port in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
            if old_ports
                .iter()
                .any(|o| o.get("nodePort").is_some() && o.get("nodePort") == port.get("nodePort"))
            {
                port.remove("nodePort");
            }
        }
        return;
    }
    let ports = spec.get_mut("ports").and_then(Value::as_array_mut);
    for port in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
        if port.get("nodePort").is_some_and(|n| !n.is_null()) {
            continue;
        }
        let protocol = |p: &Map<String, Value>| {
            p.get("protocol")
                .and_then(Value::as_str)
                .unwrap_or("TCP")
                .to_owned()
        };
        let found = old_ports
            .iter()
            .filter_map(Value::as_object)
            .find(|o| o.get("port") == port.get("port") && protocol(o) == protocol(port));
        if let Some(n) = found.and_then(|o| o.get("nodePort")) {
            port.insert("nodePort".into(), n.clone());
        }
    }
}

fn cluster_ip(svc: &Value) -> Option<Ipv4Addr> {
    svc.pointer("/spec/clusterIP")?.as_str()?.parse().ok()
}

fn node_ports(svc: &Value) -> Vec<u16> {
    let ports = svc.pointer("/spec/ports").and_then(Value::as_array);
    ports
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort")?.as_u64())
        .filter_map(|p| u16::try_from(p).ok())
        .collect()
}

fn seed() -> u64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    u64::from_le_bytes(bytes[8..16].try_into().unwrap_or_default())
}

/// 422 with every cause, when there is one.
pub(super) fn check(
    info: &ResourceInfo,
    obj: &Value,
    errs: Vec<FieldError>,
) -> Result<(), ApiError> {
    validate::field_errors(info, meta::name(obj), errs)
}
