//! A config as YAML with each key's `///` documentation written above it as a comment (for
//! `--defaultconfig`). The comments come from the config types' JSON schema (schemars reads the
//! doc comments), so they cannot drift from the code. A key whose value is unset (`None`) is
//! printed commented out, below the documentation of what it defaults to, never as `null`.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value as Json;
use serde_yaml_ng::{Mapping, Value};

/// `value` as YAML, each key preceded by its documentation.
pub fn to_commented_yaml<T: Serialize + JsonSchema>(value: &T) -> String {
    let schema = schemars::schema_for!(T);
    // Config structs are plain data with string keys; serializing them cannot fail.
    let value = serde_yaml_ng::to_value(value).expect("config structs serialize to YAML");
    let mut out = Writer {
        defs: &schema.as_value()["$defs"],
        text: String::new(),
    };
    match &value {
        Value::Mapping(map) => out.mapping(map, schema.as_value(), 0),
        other => out.text.push_str(&scalar(other)),
    }
    out.text
}

struct Writer<'a> {
    /// The schema's named definitions, which `$ref`s point into.
    defs: &'a Json,
    text: String,
}

// === impl Writer ===

impl<'a> Writer<'a> {
    fn mapping(&mut self, map: &Mapping, schema: &'a Json, indent: usize) {
        let object = resolve(self.defs, schema);
        for (i, (key, value)) in map.iter().enumerate() {
            let key = scalar(key);
            let field = object["properties"].get(&key);
            if indent == 0 && i > 0 {
                self.text.push('\n');
            }
            self.comment(field, indent);
            let pad = " ".repeat(indent);
            match value {
                Value::Null => self.text.push_str(&format!("{pad}# {key}:\n")),
                Value::Mapping(m) if !m.is_empty() => {
                    self.text.push_str(&format!("{pad}{key}:\n"));
                    self.mapping(m, field.unwrap_or(&Json::Null), indent + 2);
                }
                Value::Sequence(items) if !items.is_empty() => {
                    self.text.push_str(&format!("{pad}{key}:\n"));
                    let block = serde_yaml_ng::to_string(items).expect("YAML values serialize");
                    for line in block.lines() {
                        self.text.push_str(&format!("{pad}  {line}\n"));
                    }
                }
                other => self
                    .text
                    .push_str(&format!("{pad}{key}: {}\n", scalar(other))),
            }
        }
    }

    /// Writes the documentation of a field (its own, else its type's), one comment line per
    /// line of the doc comment.
    fn comment(&mut self, field: Option<&'a Json>, indent: usize) {
        let doc = field.and_then(|f| {
            f["description"]
                .as_str()
                .or_else(|| resolve(self.defs, f)["description"].as_str())
        });
        let Some(doc) = doc else { return };
        let pad = " ".repeat(indent);
        for line in doc.lines() {
            match line.trim_end() {
                "" => self.text.push_str(&format!("{pad}#\n")),
                line => self.text.push_str(&format!("{pad}# {line}\n")),
            }
        }
    }
}

/// Follows `$ref` (and a lone `allOf`/`anyOf`/`oneOf` branch that is not `null`) to the
/// schema that describes the value.
fn resolve<'a>(defs: &'a Json, schema: &'a Json) -> &'a Json {
    if let Some(name) = schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/$defs/"))
    {
        return resolve(defs, &defs[name]);
    }
    for combinator in ["allOf", "anyOf", "oneOf"] {
        if let Some(branches) = schema[combinator].as_array() {
            let mut real = branches.iter().filter(|b| b["type"] != "null");
            if let (Some(only), None) = (real.next(), real.next()) {
                return resolve(defs, only);
            }
        }
    }
    schema
}

/// A scalar (or an empty collection) in YAML's plain or quoted form.
fn scalar(value: &Value) -> String {
    let text = serde_yaml_ng::to_string(value).expect("YAML values serialize");
    text.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    /// The whole file.
    #[derive(Serialize, Deserialize, JsonSchema, Default)]
    #[serde(default, rename_all = "camelCase")]
    struct Top {
        /// Where the data goes.
        /// Second line.
        data_dir: String,
        /// The inner section.
        inner: Inner,
        /// Unset by default: the host name.
        name: Option<String>,
        /// Listed.
        list: Vec<u16>,
    }

    /// Inner's own doc.
    #[derive(Serialize, Deserialize, JsonSchema, Default)]
    #[serde(default, rename_all = "camelCase")]
    struct Inner {
        /// Turn it on.
        enable: bool,
        /// Ports.
        ports: Vec<u16>,
    }

    #[test]
    fn every_key_gets_its_doc_comment_and_unset_keys_are_commented_out() {
        let top = Top {
            data_dir: "/var/x".into(),
            list: vec![1, 2],
            ..Top::default()
        };
        let text = to_commented_yaml(&top);
        let expected = "\
# Where the data goes.
# Second line.
dataDir: /var/x

# The inner section.
inner:
  # Turn it on.
  enable: false
  # Ports.
  ports: []

# Unset by default: the host name.
# name:

# Listed.
list:
  - 1
  - 2
";
        assert_eq!(text, expected);
        let back: Top = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(back.list, [1, 2]);
        assert!(back.name.is_none());
    }
}
