//! Every example config in `conf/` parses into its daemon's config type, so they cannot rot.

use std::path::Path;

use serde::Deserialize;

#[derive(Deserialize)]
struct Head {
    kind: String,
}

#[test]
fn every_file_in_conf_parses_as_its_kind() {
    let mut seen = 0;
    for entry in std::fs::read_dir(e2e::conf_dir()).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let head: Head =
            serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        match head.kind.as_str() {
            "CloudCore" => check::<cloudcore::Config>(&path, &text),
            "EdgeCore" => check::<edgecore::Config>(&path, &text),
            other => panic!("{}: unknown kind {other:?}", path.display()),
        }
        seen += 1;
    }
    assert!(
        seen >= 2,
        "conf/ holds cloudcore.yaml and edgecore.yaml at least"
    );
}

fn check<T: serde::de::DeserializeOwned>(path: &Path, text: &str) {
    if let Err(e) = daemon::parse_yaml::<T>(path, text) {
        panic!("{e}");
    }
}

#[test]
fn the_example_edge_certificate_is_not_the_file_cloudcore_writes_its_own_to() {
    let read = |name: &str| std::fs::read_to_string(e2e::conf_dir().join(name)).unwrap();
    let cloud: cloudcore::Config = serde_yaml_ng::from_str(&read("cloudcore.yaml")).unwrap();
    let edge: edgecore::Config = serde_yaml_ng::from_str(&read("edgecore.yaml")).unwrap();
    let (hub, node) = (&cloud.modules.cloud_hub, &edge.modules.edge_hub);
    assert_ne!(hub.tls_cert_file, node.tls_cert_file);
    assert_ne!(hub.tls_private_key_file, node.tls_private_key_file);
    let (hub, node) = (
        cloudcore::Config::default().modules.cloud_hub,
        edgecore::Config::default().modules.edge_hub,
    );
    assert_ne!(
        hub.tls_cert_file, node.tls_cert_file,
        "the defaults collide"
    );
}
