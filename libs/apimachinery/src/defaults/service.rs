//! Service defaulting (`SetDefaults_Service` and what the service REST storage fills in besides
//! the addresses it allocates): type, session affinity, traffic policies, IP families, port
//! protocols and target ports.

use serde_json::{Map, Value, json};

use super::{child, items, or_set};

/// `sessionAffinityConfig.clientIP.timeoutSeconds` when ClientIP affinity does not say (3 h).
const AFFINITY_TIMEOUT: i64 = 10800;

/// Defaults a Service.
pub fn service(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    // An empty load balancer status, as kube-apiserver's JSON of a Service always has.
    child(child(map, "status"), "loadBalancer");
    let spec = child(map, "spec");
    or_set(spec, "type", json!("ClusterIP"));
    or_set(spec, "sessionAffinity", json!("None"));
    if spec.get("sessionAffinity") == Some(&json!("ClientIP")) {
        let config = child(child(spec, "sessionAffinityConfig"), "clientIP");
        or_set(config, "timeoutSeconds", json!(AFFINITY_TIMEOUT));
    }
    let kind = spec["type"].as_str().unwrap_or("ClusterIP").to_owned();
    for port in items(spec, "ports") {
        or_set(port, "protocol", json!("TCP"));
        let unset = match port.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            Some(Value::String(s)) => s.is_empty(),
            Some(_) => false,
        };
        if unset && let Some(p) = port.get("port").cloned() {
            port.insert("targetPort".into(), p);
        }
    }
    if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
        or_set(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        or_set(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if kind == "ExternalName" {
        return;
    }
    or_set(spec, "internalTrafficPolicy", json!("Cluster"));
    families(spec);
}

/// True for `clusterIP: None`.
pub fn headless(spec: &Map<String, Value>) -> bool {
    spec.get("clusterIP").and_then(Value::as_str) == Some("None")
}

/// The cluster is IPv4 only: `ipFamilies: [IPv4]`; single stack, but a headless service
/// without a selector requires dual stack (it may list endpoints of both families), as
/// kube-apiserver answers.
fn families(spec: &mut Map<String, Value>) {
    let selectorless = spec
        .get("selector")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty);
    let policy = if headless(spec) && selectorless {
        "RequireDualStack"
    } else {
        "SingleStack"
    };
    or_set(spec, "ipFamilyPolicy", json!(policy));
    or_set(spec, "ipFamilies", json!(["IPv4"]));
    if let Some(ip) = spec
        .get("clusterIP")
        .filter(|ip| ip.as_str().is_some_and(|s| !s.is_empty()))
    {
        let ip = ip.clone();
        or_set(spec, "clusterIPs", json!([ip]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_service_gets_type_affinity_families_and_ports() {
        let mut s = json!({"spec": {"selector": {"app": "a"}, "ports": [{"port": 80}]}});
        service(&mut s);
        let spec = &s["spec"];
        assert_eq!(spec["type"], "ClusterIP");
        assert_eq!(spec["sessionAffinity"], "None");
        assert_eq!(spec["internalTrafficPolicy"], "Cluster");
        assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
        assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
        assert_eq!(
            spec["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert!(spec.get("externalTrafficPolicy").is_none());
        assert_eq!(s["status"], json!({"loadBalancer": {}}));
    }

    #[test]
    fn node_ports_and_load_balancers_get_the_external_policy() {
        let mut s = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 53, "protocol": "UDP", "targetPort": "dns"}]}});
        service(&mut s);
        assert_eq!(s["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(s["spec"]["allocateLoadBalancerNodePorts"], true);
        assert_eq!(s["spec"]["ports"][0]["targetPort"], "dns");
        assert_eq!(s["spec"]["ports"][0]["protocol"], "UDP");
    }

    #[test]
    fn headless_services_keep_none_and_selectorless_ones_require_dual_stack() {
        let mut s = json!({"spec": {"clusterIP": "None", "selector": {"a": "b"}}});
        service(&mut s);
        assert_eq!(s["spec"]["clusterIPs"], json!(["None"]));
        assert_eq!(s["spec"]["ipFamilyPolicy"], "SingleStack");
        let mut bare = json!({"spec": {"clusterIP": "None"}});
        service(&mut bare);
        assert_eq!(bare["spec"]["ipFamilyPolicy"], "RequireDualStack");
    }

    #[test]
    fn external_names_get_no_families_and_client_ip_affinity_a_timeout() {
        let mut s = json!({"spec": {"type": "ExternalName", "externalName": "x.example", "sessionAffinity": "ClientIP"}});
        service(&mut s);
        assert!(s["spec"].get("ipFamilies").is_none());
        assert_eq!(
            s["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"],
            10800
        );
    }
}
