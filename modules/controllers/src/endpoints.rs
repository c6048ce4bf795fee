//! The EndpointSlice and Endpoints controllers, as kube-controller-manager's: for each Service
//! with a selector, the pods it selects that have an IP become endpoints (ready from the pod's
//! Ready condition, serving, terminating while the pod is being deleted), with the Service's
//! ports resolved against each pod (`targetPort` by number or by container port name). Slices
//! hold at most 100 endpoints, one group of slices per distinct port mapping; they are labelled
//! `kubernetes.io/service-name` and managed-by `endpointslice-controller.k8s.io`, owned by the
//! Service, updated in place, created and deleted as needed. The Endpoints object of the same
//! name as the Service carries the same addresses (`addresses` ready, `notReadyAddresses` not).
//! A Service without a selector is left alone (its endpoints are the user's).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, PostParams};
use reconciler::{Action, Cache, Stores};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::informer::{controller_ref, ignore_gone, key, selects};

/// Controller name.
pub const NAME: &str = "endpointslice-controller";
/// `endpointslice.kubernetes.io/managed-by` of the slices this controller writes.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// Endpoints per slice (kube-controller-manager's default).
const PER_SLICE: usize = 100;

/// One port of a slice: name, number, protocol.
type Port = (String, i32, String);

/// Runs both controllers until shutdown.
pub async fn run(stores: Stores, shutdown: CancellationToken) {
    let client = stores.client().clone();
    let (tx, rx) = reconciler::queue();
    let services = stores.keyed::<Service>(&tx);
    // A pod change concerns the Services of its namespace that select it (now or before).
    let (queue, svc) = (tx.clone(), services.clone());
    let pods = stores.pods();
    pods.subscribe(move |c| {
        let ns = c.now.metadata.namespace.clone().unwrap_or_default();
        for s in svc.all() {
            if s.metadata.namespace.as_deref() != Some(ns.as_str()) {
                continue;
            }
            let Some(sel) = selector(&s) else { continue };
            let hit = [Some(&c.now), c.before.as_ref()]
                .into_iter()
                .flatten()
                .any(|p| selects_pod(&sel, p));
            if hit {
                let _ = queue.send(key(&*s));
            }
        }
    });
    let queue = tx.clone();
    let slices = stores.cache::<EndpointSlice>();
    slices.subscribe(move |c| {
        let labels = c.now.metadata.labels.clone().unwrap_or_default();
        if labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
            && let Some(svc) = labels.get(SERVICE_NAME_LABEL)
        {
            let ns = c.now.metadata.namespace.clone().unwrap_or_default();
            let _ = queue.send(format!("{ns}/{svc}"));
        }
    });
    let (queue, svc) = (tx.clone(), services.clone());
    let nodes = stores.cache::<Node>();
    let zones = crate::topology::Zones::follow(&nodes, move || {
        for s in svc.all() {
            let _ = queue.send(key(&*s));
        }
    });
    if !reconciler::wait_synced(&[&*services, &*pods, &*slices, &*nodes], &shutdown).await {
        return;
    }
    let ctx = Context {
        client,
        services,
        pods,
        slices,
        zones,
    };
    let ctx = Arc::new(ctx);
    reconciler::work(rx, "endpointslice", shutdown, move |k| {
        let ctx = ctx.clone();
        async move { ctx.sync(&k).await.map(|()| Action::AwaitChange) }
    })
    .await;
}

struct Context {
    client: kube::Client,
    services: Arc<Cache<Service>>,
    pods: Arc<Cache<Pod>>,
    slices: Arc<Cache<EndpointSlice>>,
    zones: crate::topology::Zones,
}

fn selector(s: &Service) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector> {
    let sel = s.spec.as_ref()?.selector.clone()?;
    if sel.is_empty() {
        return None;
    }
    Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some(sel),
            match_expressions: None,
        },
    )
}

fn selects_pod(
    sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    p: &Pod,
) -> bool {
    selects(sel, &p.metadata.labels.clone().unwrap_or_default())
}

// === impl Context ===

impl Context {
    async fn sync(&self, k: &str) -> Result<(), kube::Error> {
        let (ns, name) = k.split_once('/').unwrap_or(("", k));
        let Some(svc) = self.services.get(k) else {
            // Slices and Endpoints go with their Service (owner reference; deleted here too
            // as there is no garbage collector yet).
            return self.remove_all(ns, name).await;
        };
        let Some(sel) = selector(&svc) else {
            return Ok(());
        };
        let publish_not_ready = svc
            .spec
            .as_ref()
            .and_then(|s| s.publish_not_ready_addresses)
            .unwrap_or(false);
        let mut pods: Vec<Arc<Pod>> = self
            .pods
            .all()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns) && selects_pod(&sel, p))
            .filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Succeeded" | "Failed")) && !pod_ip(p).is_empty()
            })
            .collect();
        pods.sort_by_key(|p| p.metadata.name.clone());
        // Group the endpoints by the ports they resolve to.
        let mut groups: BTreeMap<Vec<Port>, Vec<Value>> = BTreeMap::new();
        let mut endpoints_subsets: BTreeMap<Vec<Port>, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
        for p in &pods {
            let ports = resolve_ports(&svc, p);
            let ready = is_ready(p) || publish_not_ready;
            let terminating = p.metadata.deletion_timestamp.is_some();
            let target = json!({"kind": "Pod", "namespace": ns, "name": p.metadata.name,
                                "uid": p.metadata.uid});
            let mut ep = json!({
                "addresses": [pod_ip(p)],
                "conditions": {"ready": ready && !terminating, "serving": ready, "terminating": terminating},
                "targetRef": target,
            });
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            if let Some(n) = &node {
                ep["nodeName"] = json!(n);
            }
            groups.entry(ports.clone()).or_default().push(ep);
            if !terminating {
                let mut address = json!({"ip": pod_ip(p), "targetRef": target});
                if let Some(n) = &node {
                    address["nodeName"] = json!(n);
                }
                let subset = endpoints_subsets.entry(ports).or_default();
                if ready {
                    subset.0.push(address);
                } else {
                    subset.1.push(address);
                }
            }
        }
        crate::topology::fill(&svc, groups.values_mut().flatten(), &self.zones);
        self.write_slices(&svc, ns, name, groups).await?;
        self.write_endpoints(&svc, ns, name, endpoints_subsets)
            .await
    }

    /// Makes the slices of Service `name` hold `groups`, reusing the slices it has.
    async fn write_slices(
        &self,
        svc: &Service,
        ns: &str,
        name: &str,
        groups: BTreeMap<Vec<Port>, Vec<Value>>,
    ) -> Result<(), kube::Error> {
        let mut existing: Vec<Arc<EndpointSlice>> = self.owned_slices(ns, name);
        existing.sort_by_key(|s| s.metadata.name.clone());
        let mut wanted: Vec<Value> = Vec::new();
        for (ports, eps) in groups {
            let ports: Vec<Value> = ports
                .iter()
                .map(|(n, p, proto)| json!({"name": n, "port": p, "protocol": proto}))
                .collect();
            for chunk in eps.chunks(PER_SLICE) {
                wanted.push(json!({"ports": ports, "endpoints": chunk}));
            }
        }
        if wanted.is_empty() {
            // An empty slice says the Service has no endpoints (rather than: not computed).
            let ports: Vec<Value> = svc
                .spec
                .as_ref()
                .and_then(|s| s.ports.clone())
                .unwrap_or_default()
                .iter()
                .map(|p| json!({"name": p.name.clone().unwrap_or_default(), "port": p.port, "protocol": p.protocol.clone().unwrap_or_else(|| "TCP".into())}))
                .collect();
            wanted.push(json!({"ports": ports, "endpoints": []}));
        }
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
        let owner = serde_json::to_value(controller_ref(svc)).unwrap_or_default();
        for (i, body) in wanted.iter().enumerate() {
            let mut slice = json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {
                    "namespace": ns,
                    "labels": {SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY},
                    "ownerReferences": [owner],
                },
                "addressType": "IPv4",
                "ports": body["ports"],
                "endpoints": body["endpoints"],
            });
            match existing.get(i) {
                Some(old) => {
                    let endpoints: Vec<k8s_openapi::api::discovery::v1::Endpoint> =
                        serde_json::from_value(body["endpoints"].clone()).unwrap_or_default();
                    let ports: Vec<k8s_openapi::api::discovery::v1::EndpointPort> =
                        serde_json::from_value(body["ports"].clone()).unwrap_or_default();
                    let same = old.endpoints == endpoints
                        && old.ports.clone().unwrap_or_default() == ports;
                    if same {
                        continue;
                    }
                    let old_name = old.metadata.name.clone().unwrap_or_default();
                    slice["metadata"]["name"] = json!(old_name);
                    slice["metadata"]["resourceVersion"] = json!(old.metadata.resource_version);
                    let s: EndpointSlice =
                        serde_json::from_value(slice).map_err(kube::Error::SerdeError)?;
                    api.replace(&old_name, &PostParams::default(), &s).await?;
                }
                None => {
                    slice["metadata"]["generateName"] = json!(format!("{name}-"));
                    let s: EndpointSlice =
                        serde_json::from_value(slice).map_err(kube::Error::SerdeError)?;
                    api.create(&PostParams::default(), &s).await?;
                }
            }
        }
        for extra in existing.iter().skip(wanted.len()) {
            let n = extra.metadata.name.clone().unwrap_or_default();
            ignore_gone(api.delete(&n, &DeleteParams::default()).await.map(|_| ()))?;
        }
        Ok(())
    }

    async fn write_endpoints(
        &self,
        svc: &Service,
        ns: &str,
        name: &str,
        subsets: BTreeMap<Vec<Port>, (Vec<Value>, Vec<Value>)>,
    ) -> Result<(), kube::Error> {
        let subsets: Vec<Value> = subsets
            .into_iter()
            .map(|(ports, (ready, not_ready))| {
                let ports: Vec<Value> = ports
                    .iter()
                    .map(|(n, p, proto)| json!({"name": n, "port": p, "protocol": proto}))
                    .collect();
                let mut s = json!({"ports": ports});
                if !ready.is_empty() {
                    s["addresses"] = json!(ready);
                }
                if !not_ready.is_empty() {
                    s["notReadyAddresses"] = json!(not_ready);
                }
                s
            })
            .collect();
        let api: Api<Endpoints> = Api::namespaced(self.client.clone(), ns);
        let body = json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": name, "namespace": ns,
                         "labels": svc.metadata.labels.clone().unwrap_or_default()},
            "subsets": subsets,
        });
        match api.get_opt(name).await? {
            Some(old) => {
                let subsets: Vec<k8s_openapi::api::core::v1::EndpointSubset> =
                    serde_json::from_value(body["subsets"].clone()).unwrap_or_default();
                if old.subsets.clone().unwrap_or_default() == subsets {
                    return Ok(());
                }
                let mut body = body;
                body["metadata"]["resourceVersion"] = json!(old.metadata.resource_version);
                let e: Endpoints = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
                api.replace(name, &PostParams::default(), &e).await?;
            }
            None => {
                let e: Endpoints = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
                api.create(&PostParams::default(), &e).await?;
            }
        }
        Ok(())
    }

    fn owned_slices(&self, ns: &str, name: &str) -> Vec<Arc<EndpointSlice>> {
        self.slices
            .all()
            .into_iter()
            .filter(|s| {
                let labels = s.metadata.labels.clone().unwrap_or_default();
                s.metadata.namespace.as_deref() == Some(ns)
                    && labels.get(SERVICE_NAME_LABEL).map(String::as_str) == Some(name)
                    && labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
            })
            .collect()
    }

    async fn remove_all(&self, ns: &str, name: &str) -> Result<(), kube::Error> {
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
        for s in self.owned_slices(ns, name) {
            let n = s.metadata.name.clone().unwrap_or_default();
            ignore_gone(api.delete(&n, &DeleteParams::default()).await.map(|_| ()))?;
        }
        let endpoints: Api<Endpoints> = Api::namespaced(self.client.clone(), ns);
        ignore_gone(
            endpoints
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
        )
    }
}

fn pod_ip(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default()
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Service's ports as they reach pod `p`: `targetPort` a number, a container port's name
/// (skipped when the pod has no port of that name), or absent (the port itself).
fn resolve_ports(svc: &Service, p: &Pod) -> Vec<Port> {
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let mut out = Vec::new();
    for sp in ports {
        let proto = sp.protocol.clone().unwrap_or_else(|| "TCP".into());
        let number = match &sp.target_port {
            None => Some(sp.port),
            Some(IntOrString::Int(n)) => Some(*n),
            Some(IntOrString::String(name)) => name.parse().ok().or_else(|| {
                p.spec
                    .iter()
                    .flat_map(|s| s.containers.iter())
                    .flat_map(|c| c.ports.iter().flatten())
                    .find(|cp| {
                        cp.name.as_deref() == Some(name.as_str())
                            && cp.protocol.as_deref().unwrap_or("TCP") == proto
                    })
                    .map(|cp| cp.container_port)
            }),
        };
        if let Some(n) = number {
            out.push((sp.name.clone().unwrap_or_default(), n, proto));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_ports_resolve_by_number_and_by_container_port_name() {
        let svc: Service =
            serde_json::from_value(json!({"spec": {"selector": {"app": "web"}, "ports": [
                {"name": "http", "port": 80, "targetPort": "web"},
                {"name": "metrics", "port": 9090, "targetPort": 9100},
                {"name": "dns", "port": 53, "protocol": "UDP"},
            ]}}))
            .unwrap();
        let pod: Pod = serde_json::from_value(json!({"spec": {"containers": [{"name": "c",
            "ports": [{"name": "web", "containerPort": 8080}]}]}}))
        .unwrap();
        assert_eq!(
            resolve_ports(&svc, &pod),
            [
                ("http".to_string(), 8080, "TCP".to_string()),
                ("metrics".to_string(), 9100, "TCP".to_string()),
                ("dns".to_string(), 53, "UDP".to_string()),
            ]
        );
        let bare: Pod =
            serde_json::from_value(json!({"spec": {"containers": [{"name": "c"}]}})).unwrap();
        assert_eq!(
            resolve_ports(&svc, &bare).len(),
            2,
            "no port named web: skipped"
        );
    }
}
