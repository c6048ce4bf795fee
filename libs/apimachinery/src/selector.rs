//! Label selectors (full syntax, as k8s.io/apimachinery `pkg/labels`) and field selectors
//! (`pkg/fields`).

use std::collections::BTreeMap;
use std::fmt;

mod label;

/// A parse error, naming what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SelectorError {
    pub message: String,
}

/// `a=b,c!=d,e in (f,g),h notin (i),j,!k`. Requirements are kept sorted by key, as
/// kube-apiserver sorts them; [`fmt::Display`] gives the canonical string form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// One term of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    /// Sorted and without duplicates; one value for `=`, `==`, `!=`, `>`, `<`; none for
    /// `exists` and `!`.
    pub values: Vec<String>,
}

/// A label selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `k=v`
    Equals,
    /// `k==v`
    DoubleEquals,
    /// `k!=v` (also matches when `k` is absent)
    NotEquals,
    /// `k in (a,b)`
    In,
    /// `k notin (a,b)` (also matches when `k` is absent)
    NotIn,
    /// `k`
    Exists,
    /// `!k`
    DoesNotExist,
    /// `k>5` (integer comparison)
    GreaterThan,
    /// `k<5` (integer comparison)
    LessThan,
}

/// `metadata.name=x,spec.nodeName!=y` (`=`, `==`, `!=`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldRequirement>,
}

/// One term of a field selector; `==` is kept as [`FieldOperator::Equals`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub operator: FieldOperator,
    /// Unescaped.
    pub value: String,
}

/// A field selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    Equals,
    NotEquals,
}

// === impl SelectorError ===

impl SelectorError {
    pub(crate) fn new(message: impl Into<String>) -> SelectorError {
        SelectorError {
            message: message.into(),
        }
    }
}

// === impl LabelSelector ===

impl LabelSelector {
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let requirements = label::parse(s)?;
        Ok(LabelSelector::from_requirements(requirements))
    }

    /// A selector of these requirements (sorted by key, stable).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> LabelSelector {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector { requirements }
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// The `key=value` (and `key in (value)`) requirements, usable as index hints.
    pub fn equalities(&self) -> Vec<(String, String)> {
        self.requirements
            .iter()
            .filter(|r| {
                matches!(
                    r.operator,
                    Operator::Equals | Operator::DoubleEquals | Operator::In
                ) && r.values.len() == 1
            })
            .map(|r| (r.key.clone(), r.values[0].clone()))
            .collect()
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

// === impl Requirement ===

impl Requirement {
    /// A validated requirement (key and values as Kubernetes validates them).
    pub fn new(
        key: &str,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, SelectorError> {
        label::requirement(key, operator, values, 0)
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => {
                value.is_some_and(|v| self.values.contains(v))
            }
            Operator::NotEquals | Operator::NotIn => {
                !value.is_some_and(|v| self.values.contains(v))
            }
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => self.compares(value),
        }
    }

    fn compares(&self, value: Option<&String>) -> bool {
        let Some(have) = value.and_then(|v| v.parse::<i64>().ok()) else {
            return false;
        };
        let Some(want) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
            return false;
        };
        match self.operator {
            Operator::GreaterThan => have > want,
            _ => have < want,
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.values.first().map_or("", String::as_str);
        match self.operator {
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Equals => write!(f, "{}={value}", self.key),
            Operator::DoubleEquals => write!(f, "{}=={value}", self.key),
            Operator::NotEquals => write!(f, "{}!={value}", self.key),
            Operator::GreaterThan => write!(f, "{}>{value}", self.key),
            Operator::LessThan => write!(f, "{}<{value}", self.key),
            Operator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
        }
    }
}

// === impl FieldSelector ===

impl FieldSelector {
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let terms = split_terms(s)
            .into_iter()
            .filter(|term| !term.is_empty())
            .map(parse_field_term)
            .collect::<Result<_, _>>()?;
        Ok(FieldSelector { terms })
    }

    /// A selector of these terms, in order.
    pub fn from_requirements(terms: Vec<FieldRequirement>) -> FieldSelector {
        FieldSelector { terms }
    }

    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.terms
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// `get(field)` returns the object's value of a field (`None`: absent, matches `!=`).
    ///
    /// As in Kubernetes, an absent field compares as the empty string: `spec.nodeName=`
    /// selects pods without a node and `spec.nodeName!=` excludes them.
    pub fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| {
            let value = get(&t.field).unwrap_or_default();
            match t.operator {
                FieldOperator::Equals => value == t.value,
                FieldOperator::NotEquals => value != t.value,
            }
        })
    }

    /// The `field=value` requirements, usable as index hints.
    pub fn equalities(&self) -> Vec<(String, String)> {
        self.terms
            .iter()
            .filter(|t| t.operator == FieldOperator::Equals)
            .map(|t| (t.field.clone(), t.value.clone()))
            .collect()
    }

    /// Every field the selector mentions (to refuse unsupported ones with 400).
    pub fn fields(&self) -> Vec<String> {
        let mut fields: Vec<String> = Vec::new();
        for t in &self.terms {
            if !fields.contains(&t.field) {
                fields.push(t.field.clone());
            }
        }
        fields
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = match t.operator {
                FieldOperator::Equals => "=",
                FieldOperator::NotEquals => "!=",
            };
            write!(f, "{}{op}{}", t.field, escape_field_value(&t.value))?;
        }
        Ok(())
    }
}

/// `\`, `,` and `=` escaped with a backslash, as field selector values need.
pub fn escape_field_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits on commas that are not escaped.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let (mut start, mut in_slash) = (0, false);
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// `field<op>value` at the first operator (`!=`, `==`, `=`).
fn parse_field_term(term: &str) -> Result<FieldRequirement, SelectorError> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        let found = [
            ("!=", FieldOperator::NotEquals),
            ("==", FieldOperator::Equals),
            ("=", FieldOperator::Equals),
        ]
        .into_iter()
        .find(|(op, _)| rest.starts_with(op));
        if let Some((op, operator)) = found {
            let value = unescape_field_value(&rest[op.len()..])?;
            return Ok(FieldRequirement {
                field: term[..i].to_owned(),
                operator,
                value,
            });
        }
    }
    Err(SelectorError::new(format!(
        "invalid selector: '{term}'; can't understand '{term}'"
    )))
}

fn unescape_field_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::new(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                )));
            }
            out.push(c);
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if matches!(c, ',' | '=') {
            return Err(SelectorError::new(format!(
                "invalid field selector: unescaped character in value: {c}"
            )));
        } else {
            out.push(c);
        }
    }
    if in_slash {
        return Err(SelectorError::new(
            "invalid field selector: invalid escape sequence: \\",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
