//! Building the config files keadm writes: a YAML tree with only the keys that differ from the
//! daemon's defaults, `--set key.path=value` applied, then checked by the daemon's own parser.

use serde_yaml_ng::{Mapping, Value};

/// Applies `key.path=value` settings; the value is read as YAML (`0`, `true`, `[a, b]`).
pub fn apply_sets(tree: &mut Value, sets: &[String]) -> anyhow::Result<()> {
    for set in sets {
        let (path, raw) = set
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--set {set:?}: expected key.path=value"))?;
        let value: Value = match raw {
            "" => Value::String(String::new()),
            raw => serde_yaml_ng::from_str(raw)
                .map_err(|e| anyhow::anyhow!("--set {set:?}: the value is not YAML: {e}"))?,
        };
        let keys: Vec<&str> = path.split('.').collect();
        if keys.iter().any(|k| k.is_empty()) {
            anyhow::bail!("--set {set:?}: empty key in {path:?}");
        }
        let mut node = &mut *tree;
        for (i, key) in keys.iter().enumerate() {
            if !node.is_mapping() {
                anyhow::bail!("--set {set:?}: {} is not a section", keys[..i].join("."));
            }
            let map = node.as_mapping_mut().expect("checked just above");
            let key = Value::String(key.to_string());
            if i + 1 == keys.len() {
                map.insert(key, value.clone());
                break;
            }
            node = map
                .entry(key)
                .or_insert_with(|| Value::Mapping(Mapping::new()));
        }
    }
    Ok(())
}

/// A YAML tree from JSON built with `serde_json::json!`.
pub fn from_json(json: serde_json::Value) -> Value {
    // JSON values are a subset of YAML values.
    serde_yaml_ng::to_value(json).expect("JSON converts to YAML")
}

/// The file text, with a header line.
/// A daemon's config file: `tree` with the `--set`s applied, rendered under `header`, and
/// checked by the daemon's own parser for `C` (an error names `file`, the file it would be).
pub fn config_file<C: serde::de::DeserializeOwned>(
    mut tree: Value,
    sets: &[String],
    header: &str,
    path: &std::path::Path,
    file: &str,
) -> anyhow::Result<String> {
    apply_sets(&mut tree, sets)?;
    let text = render(header, &tree);
    daemon::parse_yaml::<C>(path, &text)
        .map_err(|e| anyhow::anyhow!("the {file} these flags make is invalid: {e}"))?;
    Ok(text)
}

pub fn render(header: &str, tree: &Value) -> String {
    let body = serde_yaml_ng::to_string(tree).expect("a YAML tree serializes");
    format!("# {header}\n{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_reach_nested_keys_and_read_values_as_yaml() {
        let mut tree = from_json(serde_json::json!({"modules": {"cloudHub": {"enable": true}}}));
        apply_sets(
            &mut tree,
            &[
                "modules.cloudHub.https.port=0".into(),
                "modules.cloudHub.enable=false".into(),
                "kubeAPIConfig.kubeConfig=".into(),
            ],
        )
        .unwrap();
        let text = serde_yaml_ng::to_string(&tree).unwrap();
        assert!(text.contains("port: 0"), "{text}");
        assert!(text.contains("enable: false"), "{text}");
        assert!(text.contains("kubeConfig: ''"), "{text}");
        let err = apply_sets(&mut tree, &["modules.cloudHub.enable.x=1".into()]).unwrap_err();
        assert!(
            err.to_string()
                .contains("modules.cloudHub.enable is not a section"),
            "{err}"
        );
        assert!(apply_sets(&mut tree, &["nokey".into()]).is_err());
    }
}
