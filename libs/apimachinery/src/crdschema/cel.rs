//! `x-kubernetes-validations`: CEL rules compiled once with the schema (the `cel` crate, its
//! standard library plus the strings, lists and math extensions) and evaluated at every value
//! their node describes, with `self` the value and `oldSelf` its stored counterpart (rules
//! naming `oldSelf` are transition rules: they run only on updates, where the old value is
//! known). The cost limits are described on the [module](super).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::objects::{Key, Map as CelMap};
use cel::{Context, Env, Program, Value as CelValue};
use serde_json::Value;

use super::node::{ListType, Node, Type};
use super::validate::correlate;
use super::{
    ErrorKind, FieldError, MAX_RULE_BYTES, MAX_RULE_NODES, PER_CALL_COST_LIMIT,
    RUNTIME_COST_BUDGET, child, index, show, type_name,
};

/// One compiled rule.
pub(crate) struct Rule {
    source: String,
    program: Program,
    message: Option<String>,
    message_expression: Option<Program>,
    /// `.spec.min` style, relative to the node.
    field_path: Option<String>,
    reason: ErrorKind,
    /// Names `oldSelf`.
    transition: bool,
    /// Parsed nodes, and the deepest nesting of comprehensions (`all`, `map`, ...).
    nodes: u64,
    depth: u32,
}

/// The environment every rule compiles and runs in.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    for extension in [
        cel::extensions::strings,
        cel::extensions::lists,
        cel::extensions::math,
    ] {
        if let Err(e) = env.add_extension(extension) {
            // The extensions ship with the crate and do not clash; a clash only loses them.
            debug_assert!(false, "CEL extension refused: {e}");
        }
    }
    Arc::new(env)
});

/// Compiles a node's `x-kubernetes-validations` (at `path`), reporting rules that do not.
pub(crate) fn compile_rules(raw: &Value, path: &str, errors: &mut Vec<FieldError>) -> Vec<Rule> {
    let Some(list) = raw.as_array() else {
        errors.push(FieldError::invalid(path, &show(raw), "must be a list"));
        return Vec::new();
    };
    list.iter()
        .enumerate()
        .filter_map(|(i, raw)| compile_rule(raw, &index(path, i), errors))
        .collect()
}

/// The errors of the CEL rules of a whole object (`old`: the stored object of an update).
pub(crate) fn validate_root(root: &Node, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut run = Run {
        budget: RUNTIME_COST_BUDGET,
        exhausted: false,
        errors: Vec::new(),
    };
    let Some(map) = obj.as_object() else {
        return run.errors;
    };
    if !root.rules.is_empty() {
        // At the root, `self.metadata` has only the name and generateName.
        let mut visible = map.clone();
        if let Some(meta) = map.get("metadata").and_then(Value::as_object) {
            let kept = meta
                .iter()
                .filter(|(k, _)| *k == "name" || *k == "generateName")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            visible.insert("metadata".into(), Value::Object(kept));
        }
        run.rules(root, &Value::Object(visible), old, "");
    }
    for (key, value) in map {
        if key == "metadata" {
            continue;
        }
        if let Some(prop) = root.properties.get(key) {
            run.walk(prop, value, old.and_then(|o| o.get(key)), key);
        }
    }
    run.errors
}

// === impl Rule ===

fn compile_rule(raw: &Value, at: &str, errors: &mut Vec<FieldError>) -> Option<Rule> {
    let field = |key: &str| child(at, key);
    let source = raw.get("rule").and_then(Value::as_str).unwrap_or("");
    if source.trim().is_empty() {
        errors.push(FieldError::new(&field("rule"), ErrorKind::Required, ""));
        return None;
    }
    let program = match compile_source(source) {
        Ok(p) => p,
        Err(why) => {
            errors.push(FieldError::invalid(
                &field("rule"),
                &show(&source.into()),
                &why,
            ));
            return None;
        }
    };
    let message = raw
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if message.as_deref().is_some_and(|m| m.contains(['\n', '\r'])) {
        let why = "message must not contain line breaks";
        errors.push(FieldError::new(
            &field("message"),
            ErrorKind::Forbidden,
            why,
        ));
    }
    let message_expression = match raw.get("messageExpression").and_then(Value::as_str) {
        None => None,
        Some(expr) => match compile_source(expr) {
            Ok(p) => Some(p),
            Err(why) => {
                let at = field("messageExpression");
                errors.push(FieldError::invalid(&at, &show(&expr.into()), &why));
                None
            }
        },
    };
    let reason = match raw.get("reason").and_then(Value::as_str) {
        None | Some("FieldValueInvalid") => ErrorKind::Invalid,
        Some("FieldValueRequired") => ErrorKind::Required,
        Some("FieldValueForbidden") => ErrorKind::Forbidden,
        Some("FieldValueDuplicate") => ErrorKind::Duplicate,
        Some(other) => {
            let body = format!(
                "{}: supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \
                 \"FieldValueInvalid\", \"FieldValueRequired\"",
                show(&other.into())
            );
            errors.push(FieldError::new(
                &field("reason"),
                ErrorKind::NotSupported,
                body,
            ));
            ErrorKind::Invalid
        }
    };
    let field_path = raw
        .get("fieldPath")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(fp) = &field_path
        && !simple_path(fp)
    {
        let why = "must be a valid path like .spec.field";
        errors.push(FieldError::invalid(
            &field("fieldPath"),
            &show(&fp.as_str().into()),
            why,
        ));
    }
    let (nodes, depth) = measure(program.expression());
    if nodes > MAX_RULE_NODES as u64 {
        let why = format!("the rule has {nodes} parts; at most {MAX_RULE_NODES} are allowed");
        errors.push(FieldError::new(&field("rule"), ErrorKind::Forbidden, why));
    }
    Some(Rule {
        transition: program.references().has_variable("oldSelf"),
        source: source.to_owned(),
        program,
        message,
        message_expression,
        field_path,
        reason,
        nodes,
        depth,
    })
}

fn compile_source(source: &str) -> Result<Program, String> {
    if source.len() > MAX_RULE_BYTES {
        return Err(format!(
            "compilation failed: longer than {MAX_RULE_BYTES} bytes"
        ));
    }
    let compiled = std::panic::catch_unwind(|| ENV.compile(source));
    match compiled {
        Ok(Ok(program)) => Ok(program),
        Ok(Err(e)) => Err(format!("compilation failed: {e}")),
        Err(_) => Err("compilation failed".to_owned()),
    }
}

/// `.a.b` with simple names.
fn simple_path(path: &str) -> bool {
    path.strip_prefix('.').is_some_and(|rest| {
        rest.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '$'))
        })
    })
}

/// The number of nodes of an expression and its deepest nesting of comprehensions.
fn measure(expr: &IdedExpr) -> (u64, u32) {
    let mut nodes = 1;
    let mut depth = 0;
    let mut visit = |e: &IdedExpr, extra: u32| {
        let (n, d) = measure(e);
        nodes += n;
        depth = depth.max(d + extra);
    };
    match &expr.expr {
        Expr::Call(call) => {
            call.target.iter().for_each(|t| visit(t, 0));
            call.args.iter().for_each(|a| visit(a, 0));
        }
        Expr::Comprehension(c) => {
            visit(&c.iter_range, 0);
            visit(&c.accu_init, 0);
            visit(&c.loop_cond, 1);
            visit(&c.loop_step, 1);
            visit(&c.result, 0);
        }
        Expr::List(list) => list.elements.iter().for_each(|e| visit(e, 0)),
        Expr::Map(map) => map.entries.iter().for_each(|e| entry(e, &mut visit)),
        Expr::Struct(s) => s.entries.iter().for_each(|e| entry(e, &mut visit)),
        Expr::Select(select) => visit(&select.operand, 0),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
    (nodes, depth)
}

fn entry(e: &cel::common::ast::IdedEntryExpr, visit: &mut impl FnMut(&IdedExpr, u32)) {
    match &e.expr {
        EntryExpr::StructField(f) => visit(&f.value, 0),
        EntryExpr::MapEntry(m) => {
            visit(&m.key, 0);
            visit(&m.value, 0);
        }
    }
}

// === evaluation ===

/// One validation's evaluation state: the cost budget left and the errors.
struct Run {
    budget: u64,
    exhausted: bool,
    errors: Vec<FieldError>,
}

impl Run {
    /// Runs the rules of `node` and of everything below it.
    fn walk(&mut self, node: &Node, value: &Value, old: Option<&Value>, path: &str) {
        if self.exhausted {
            return;
        }
        self.rules(node, value, old, path);
        match value {
            Value::Object(map) if node.type_ == Some(Type::Object) => {
                for (key, v) in map {
                    let sub = node.properties.get(key).or(node.additional.as_deref());
                    if let Some(sub) = sub {
                        let old = old.and_then(|o| o.get(key));
                        self.walk(sub, v, old, &child(path, key));
                    }
                }
            }
            Value::Array(items) => {
                let Some(item_node) = node.items.as_deref() else {
                    return;
                };
                let old_items = old.and_then(Value::as_array);
                for (i, item) in items.iter().enumerate() {
                    let old_item = match &node.list {
                        ListType::Map(_) => old_items.and_then(|o| correlate(&node.list, item, o)),
                        _ => None,
                    };
                    self.walk(item_node, item, old_item, &index(path, i));
                }
            }
            _ => {}
        }
    }

    fn rules(&mut self, node: &Node, value: &Value, old: Option<&Value>, path: &str) {
        for rule in &node.rules {
            if self.exhausted {
                return;
            }
            if rule.transition && old.is_none() || !rule.transition && old == Some(value) {
                continue;
            }
            let size = json_size(value) + old.map_or(0, json_size);
            let cost = rule
                .nodes
                .saturating_mul(size.max(1).saturating_pow(rule.depth));
            let type_ = schema_type(node, value);
            if cost > PER_CALL_COST_LIMIT {
                let why = format!("call cost exceeds limit for rule: {}", rule.source);
                self.errors.push(FieldError::invalid(path, &type_, &why));
                continue;
            }
            if cost > self.budget {
                self.exhausted = true;
                let why = "validation failed due to running out of cost budget, no further \
                           validation rules will be run";
                self.errors.push(FieldError::invalid(path, &type_, why));
                return;
            }
            self.budget -= cost;
            self.run(node, rule, value, old, path, &type_);
        }
    }

    fn run(
        &mut self,
        node: &Node,
        rule: &Rule,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        type_: &str,
    ) {
        let mut ctx = Context::with_env(ENV.clone());
        ctx.add_variable_from_value("self", to_cel(Some(node), value));
        if let Some(old) = old {
            ctx.add_variable_from_value("oldSelf", to_cel(Some(node), old));
        }
        match execute(&rule.program, &ctx) {
            Ok(CelValue::Bool(true)) => {}
            Ok(CelValue::Bool(false)) => {
                let message = failure_message(rule, &ctx);
                let field = match &rule.field_path {
                    Some(fp) => format!("{path}{fp}").trim_start_matches('.').to_owned(),
                    None => path.to_owned(),
                };
                let body = match rule.reason {
                    ErrorKind::Invalid => format!("{type_}: {message}"),
                    _ => message,
                };
                self.errors.push(FieldError::new(&field, rule.reason, body));
            }
            Ok(_) => {
                let why = format!("rule did not evaluate to a boolean: {}", rule.source);
                self.errors.push(FieldError::invalid(path, type_, &why));
            }
            Err(e) => {
                let why = format!("{e} evaluating rule: {}", rule.source);
                self.errors.push(FieldError::invalid(path, type_, &why));
            }
        }
    }
}

fn execute(program: &Program, ctx: &Context) -> Result<CelValue, String> {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| program.execute(ctx)));
    match ran {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("internal error".to_owned()),
    }
}

/// `message`, else what `messageExpression` gives (a non-empty string), else
/// `failed rule: <rule>`.
fn failure_message(rule: &Rule, ctx: &Context) -> String {
    if let Some(message) = &rule.message {
        return message.clone();
    }
    if let Some(expr) = &rule.message_expression
        && let Ok(CelValue::String(s)) = execute(expr, ctx)
        && !s.trim().is_empty()
        && !s.contains('\n')
    {
        return s.to_string();
    }
    format!("failed rule: {}", rule.source)
}

/// The schema type a rule's error names (`"object"`), Go-quoted.
fn schema_type(node: &Node, value: &Value) -> String {
    let name = match node.type_ {
        Some(Type::Object) => "object",
        Some(Type::Array) => "array",
        Some(Type::String) => "string",
        Some(Type::Integer) => "integer",
        Some(Type::Number) => "number",
        Some(Type::Boolean) => "boolean",
        None => type_name(value),
    };
    format!("\"{name}\"")
}

/// How many JSON values `value` holds (itself included).
fn json_size(value: &Value) -> u64 {
    match value {
        Value::Array(items) => 1 + items.iter().map(json_size).sum::<u64>(),
        Value::Object(map) => 1 + map.values().map(json_size).sum::<u64>(),
        Value::String(s) => 1 + s.len() as u64 / 64,
        _ => 1,
    }
}

/// `value` as CEL sees it: numbers of `number` fields are doubles, other integral numbers
/// ints.
fn to_cel(node: Option<&Node>, value: &Value) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Number(n) => {
            let double = node.is_some_and(|n| n.type_ == Some(Type::Number));
            match (n.as_i64(), n.as_f64()) {
                (Some(i), _) if !double => CelValue::Int(i),
                (_, Some(f)) => CelValue::Float(f),
                _ => CelValue::Null,
            }
        }
        Value::Array(items) => {
            let item = node.and_then(|n| n.items.as_deref());
            CelValue::List(Arc::new(items.iter().map(|v| to_cel(item, v)).collect()))
        }
        Value::Object(map) => {
            let entries: HashMap<Key, CelValue> = map
                .iter()
                .map(|(k, v)| {
                    let sub = node.and_then(|n| n.properties.get(k).or(n.additional.as_deref()));
                    (Key::String(Arc::new(k.clone())), to_cel(sub, v))
                })
                .collect();
            CelValue::Map(CelMap {
                map: Arc::new(entries),
            })
        }
    }
}
