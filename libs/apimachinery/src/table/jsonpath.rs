//! The JSONPath subset printer columns use: `.a.b`, `{.a.b}`, `.a[0].b`, `.a[-1]`, `.a[*].b`,
//! `['a.b']`, `.a\.b`, and filters `.a[?(@.type=="Ready")].status` (`==`, `!=`, or existence
//! `[?(@.x)]`). Recursive descent (`..`) is not supported.

use serde_json::Value;

/// A parsed path.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

/// The path is outside the supported subset or malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSONPath {path:?}: {why}")]
pub struct JsonPathError {
    pub path: String,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    Wildcard,
    Filter(Filter),
}

/// `?(@.a.b == literal)`, `?(@.a.b != literal)` or `?(@.a.b)`.
#[derive(Clone, Debug, PartialEq)]
struct Filter {
    fields: Vec<String>,
    compare: Option<(bool, Value)>,
}

// === impl JsonPath ===

impl JsonPath {
    pub fn parse(path: &str) -> Result<JsonPath, JsonPathError> {
        let err = |why: &str| JsonPathError {
            path: path.to_owned(),
            why: why.to_owned(),
        };
        let mut s = path.trim();
        if let Some(inner) = s.strip_prefix('{').and_then(|x| x.strip_suffix('}')) {
            s = inner.trim();
        }
        s = s.strip_prefix('$').unwrap_or(s);
        let chars: Vec<char> = s.chars().collect();
        let mut steps = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let (step, next) = match chars[i] {
                '.' if chars.get(i + 1) == Some(&'.') => {
                    return Err(err("recursive descent is not supported"));
                }
                '.' => field(&chars, i + 1).ok_or_else(|| err("empty field name"))?,
                '[' => bracket(&chars, i).map_err(|why| err(&why))?,
                _ if i == 0 => field(&chars, 0).ok_or_else(|| err("empty field name"))?,
                c => return Err(err(&format!("unexpected {c:?} at {i}"))),
            };
            steps.push(step);
            i = next;
        }
        Ok(JsonPath { steps })
    }

    /// Every value the path selects, in document order.
    pub fn find<'v>(&self, root: &'v Value) -> Vec<&'v Value> {
        self.steps.iter().fold(vec![root], |values, step| {
            values
                .into_iter()
                .flat_map(|value| step.select(value))
                .collect()
        })
    }
}

// === impl Step ===

impl Step {
    fn select<'v>(&self, value: &'v Value) -> Vec<&'v Value> {
        match (self, value) {
            (Step::Field(name), Value::Object(map)) => map.get(name).into_iter().collect(),
            (Step::Index(i), Value::Array(items)) => {
                let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
                let at = if *i < 0 { len + i } else { *i };
                usize::try_from(at)
                    .ok()
                    .and_then(|at| items.get(at))
                    .into_iter()
                    .collect()
            }
            (Step::Wildcard, Value::Array(items)) => items.iter().collect(),
            (Step::Wildcard, Value::Object(map)) => map.values().collect(),
            (Step::Filter(f), Value::Array(items)) => {
                items.iter().filter(|v| f.matches(v)).collect()
            }
            _ => Vec::new(),
        }
    }
}

// === impl Filter ===

impl Filter {
    fn parse(expr: &str) -> Result<Filter, String> {
        let (lhs, compare) = match split_comparison(expr) {
            Some((lhs, equal, rhs)) => (lhs, Some((equal, literal(rhs.trim())?))),
            None => (expr, None),
        };
        let lhs = lhs.trim();
        let rest = lhs
            .strip_prefix('@')
            .ok_or_else(|| format!("filter must start with @: {lhs}"))?;
        let fields = rest
            .split('.')
            .skip(1)
            .map(str::to_owned)
            .collect::<Vec<_>>();
        if fields.iter().any(String::is_empty) || (!rest.is_empty() && !rest.starts_with('.')) {
            return Err(format!("unsupported filter operand: {lhs}"));
        }
        Ok(Filter { fields, compare })
    }

    fn matches(&self, item: &Value) -> bool {
        let found = self
            .fields
            .iter()
            .try_fold(item, |v, f| v.as_object()?.get(f));
        match (&self.compare, found) {
            (None, found) => found.is_some_and(|v| !v.is_null()),
            (Some((equal, want)), found) => {
                let same = found.is_some_and(|have| same_value(have, want));
                same == *equal
            }
        }
    }
}

/// A field name starting at `start` (up to `.` or `[`, `\.` escapes a dot) and where it ends.
fn field(chars: &[char], start: usize) -> Option<(Step, usize)> {
    let mut name = String::new();
    let mut i = start;
    while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
        if chars[i] == '\\' && chars.get(i + 1) == Some(&'.') {
            i += 1;
        }
        name.push(chars[i]);
        i += 1;
    }
    match name.as_str() {
        "" => None,
        "*" => Some((Step::Wildcard, i)),
        _ => Some((Step::Field(name), i)),
    }
}

/// The `[...]` step starting at `open`, and where it ends.
fn bracket(chars: &[char], open: usize) -> Result<(Step, usize), String> {
    let close = matching_bracket(chars, open).ok_or("unclosed '['")?;
    let inner: String = chars[open + 1..close].iter().collect();
    let inner = inner.trim();
    let step = if inner == "*" {
        Step::Wildcard
    } else if let Some(expr) = inner.strip_prefix("?(").and_then(|e| e.strip_suffix(')')) {
        Step::Filter(Filter::parse(expr)?)
    } else if let Some(name) = quoted(inner) {
        Step::Field(name.to_owned())
    } else {
        Step::Index(
            inner
                .parse()
                .map_err(|_| format!("unsupported index [{inner}]"))?,
        )
    };
    Ok((step, close + 1))
}

/// The `]` closing the `[` at `open`, skipping quoted text and nested brackets.
fn matching_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (i, &c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn quoted(s: &str) -> Option<&str> {
    ['\'', '"']
        .into_iter()
        .find_map(|q| s.strip_prefix(q).and_then(|rest| rest.strip_suffix(q)))
}

/// `lhs == rhs` or `lhs != rhs` outside quotes: (lhs, is-equality, rhs).
fn split_comparison(expr: &str) -> Option<(&str, bool, &str)> {
    let mut quote: Option<char> = None;
    for (i, c) in expr.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '=' | '!') if expr[i + 1..].starts_with('=') => {
                return Some((&expr[..i], c == '=', &expr[i + 2..]));
            }
            _ => {}
        }
    }
    None
}

fn literal(s: &str) -> Result<Value, String> {
    if let Some(text) = quoted(s) {
        return Ok(Value::from(text));
    }
    serde_json::from_str(s).map_err(|_| format!("unsupported literal: {s}"))
}

fn same_value(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => have == want,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn find(path: &str, obj: &Value) -> Vec<Value> {
        JsonPath::parse(path)
            .unwrap()
            .find(obj)
            .into_iter()
            .cloned()
            .collect()
    }

    fn node() -> Value {
        json!({
            "metadata": {"name": "n1", "labels": {"app.kubernetes.io/name": "x"}},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False", "n": 1},
                {"type": "Ready", "status": "True", "n": 2}
            ]}
        })
    }

    #[test]
    fn dotted_paths_and_indexes_select_values() {
        let obj = node();
        assert_eq!(find(".metadata.name", &obj), [json!("n1")]);
        assert_eq!(find("{.metadata.name}", &obj), [json!("n1")]);
        assert_eq!(find("$.metadata.name", &obj), [json!("n1")]);
        assert_eq!(find(".status.conditions[1].type", &obj), [json!("Ready")]);
        assert_eq!(find(".status.conditions[-1].n", &obj), [json!(2)]);
        assert_eq!(find(".status.conditions[*].n", &obj), [json!(1), json!(2)]);
        assert!(find(".status.conditions[5].type", &obj).is_empty());
        assert!(find(".spec.missing", &obj).is_empty());
    }

    #[test]
    fn keys_with_dots_can_be_quoted_or_escaped() {
        let obj = node();
        let want = [json!("x")];
        assert_eq!(
            find(".metadata.labels['app.kubernetes.io/name']", &obj),
            want
        );
        assert_eq!(
            find(r".metadata.labels.app\.kubernetes\.io/name", &obj),
            want
        );
    }

    #[test]
    fn filters_select_matching_elements() {
        let obj = node();
        assert_eq!(
            find(r#".status.conditions[?(@.type=="Ready")].status"#, &obj),
            [json!("True")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type != 'Ready')].type", &obj),
            [json!("MemoryPressure")]
        );
        assert_eq!(
            find(".status.conditions[?(@.n==2)].type", &obj),
            [json!("Ready")]
        );
        assert_eq!(find(".status.conditions[?(@.n)].n", &obj).len(), 2);
    }

    #[test]
    fn unsupported_paths_are_errors() {
        assert!(JsonPath::parse("..name").is_err());
        assert!(JsonPath::parse(".a[").is_err());
        assert!(JsonPath::parse(".a[x]").is_err());
        assert!(JsonPath::parse(".a[?(b==1)]").is_err());
    }
}
