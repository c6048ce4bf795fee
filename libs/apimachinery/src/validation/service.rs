//! Service validation (`ValidateService`, `ValidateServiceUpdate`): the type, the ports (a
//! number each, names when there are several), `externalName`, and the cluster IP, which an
//! update may not change.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::pod::one_of;
use super::{DNS_LABEL_MSG, FieldError, is_dns_label, list_at, port_number, str_at};

const TYPES: [&str; 4] = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];
const AFFINITIES: [&str; 2] = ["ClientIP", "None"];

/// Validates a (defaulted) Service.
pub fn service(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    one_of(&mut errs, spec, "spec", "type", &TYPES);
    one_of(&mut errs, spec, "spec", "sessionAffinity", &AFFINITIES);
    let kind = str_at(spec, "type");
    let headless = str_at(spec, "clusterIP") == "None";
    let ports = list_at(spec, "ports");
    if kind == "ExternalName" {
        if str_at(spec, "externalName").is_empty() {
            errs.push(FieldError::required("spec.externalName", ""));
        }
    } else if ports.is_empty() && !headless {
        errs.push(FieldError::required("spec.ports", ""));
    }
    if headless && matches!(kind, "NodePort" | "LoadBalancer") {
        let why = format!("may not be set to 'None' for {kind} services");
        errs.push(FieldError::invalid(
            "spec.clusterIPs[0]",
            &json!("None"),
            &why,
        ));
    }
    let mut names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let name = str_at(p, "name");
        if name.is_empty() {
            if ports.len() > 1 {
                errs.push(FieldError::required(format!("{at}.name"), ""));
            }
        } else if !is_dns_label(name) {
            errs.push(FieldError::invalid(
                format!("{at}.name"),
                &json!(name),
                DNS_LABEL_MSG,
            ));
        } else if !names.insert(name) {
            errs.push(FieldError::duplicate(format!("{at}.name"), &json!(name)));
        }
        port_number(&mut errs, &format!("{at}.port"), p.get("port"), true);
        one_of(&mut errs, p, &at, "protocol", &PROTOCOLS);
        if let Some(target) = p.get("targetPort").filter(|t| t.is_number()) {
            port_number(&mut errs, &format!("{at}.targetPort"), Some(target), false);
        }
        if p.get("nodePort").is_some_and(|n| !n.is_null())
            && !matches!(kind, "NodePort" | "LoadBalancer")
        {
            let why = "may not be used when `type` is 'ClusterIP'";
            errs.push(FieldError::forbidden(format!("{at}.nodePort"), why));
        }
    }
    errs
}

/// What an update may not change: the cluster IP (once set).
pub fn update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = service(new);
    let ip = |o: &Value| str_at(o.get("spec").unwrap_or(&Value::Null), "clusterIP").to_owned();
    let (before, after) = (ip(old), ip(new));
    let changed = !before.is_empty() && before != after;
    let same_type = old.pointer("/spec/type") == new.pointer("/spec/type");
    if changed && (same_type || !after.is_empty()) {
        let value = new
            .pointer("/spec/clusterIPs")
            .cloned()
            .unwrap_or(json!([after]));
        errs.push(FieldError::invalid(
            "spec.clusterIPs[0]",
            &value,
            "may not change once set",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_need_ports_with_numbers_and_names_when_several() {
        let errs = service(&json!({"spec": {"type": "ClusterIP"}}));
        assert_eq!(errs, [FieldError::required("spec.ports", "")]);
        let s = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 0}, {"name": "b", "port": 80}]}});
        let got: Vec<String> = service(&s).into_iter().map(|e| e.field).collect();
        assert_eq!(got, ["spec.ports[0].name", "spec.ports[0].port"]);
    }

    #[test]
    fn headless_and_external_name_services_need_no_ports() {
        assert_eq!(
            service(&json!({"spec": {"type": "ClusterIP", "clusterIP": "None"}})),
            []
        );
        let external = json!({"spec": {"type": "ExternalName"}});
        assert_eq!(
            service(&external),
            [FieldError::required("spec.externalName", "")]
        );
        let bad = json!({"spec": {"type": "Magic", "ports": [{"port": 1}]}});
        assert_eq!(service(&bad)[0].field, "spec.type");
    }

    #[test]
    fn the_cluster_ip_may_not_change() {
        let old = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "ports": [{"port": 80}]}});
        let mut new = old.clone();
        new["spec"]["clusterIP"] = json!("10.96.0.11");
        let errs = update(&new, &old);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.clusterIPs[0]");
        assert!(errs[0].why.ends_with("may not change once set"));
        assert_eq!(update(&old, &old), []);
    }
}
