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
