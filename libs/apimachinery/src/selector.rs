//! Label selectors (full syntax) and field selectors.

use std::collections::BTreeMap;

/// A parse error, naming what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SelectorError {
    pub message: String,
}

/// `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    _todo: (),
}

/// `metadata.name=x,spec.nodeName!=y` (`=`, `==`, `!=`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    _todo: (),
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let _ = s;
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        todo!()
    }
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let _ = labels;
        todo!()
    }
    /// The `key=value` (and `key in (value)`) requirements, usable as index hints.
    pub fn equalities(&self) -> Vec<(String, String)> {
        todo!()
    }
}

impl FieldSelector {
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let _ = s;
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        todo!()
    }
    /// `get(field)` returns the object's value of a field (`None`: absent, matches `!=`).
    pub fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        let _ = get;
        todo!()
    }
    /// The `field=value` requirements, usable as index hints.
    pub fn equalities(&self) -> Vec<(String, String)> {
        todo!()
    }
    /// Every field the selector mentions (to refuse unsupported ones with 400).
    pub fn fields(&self) -> Vec<String> {
        todo!()
    }
}
