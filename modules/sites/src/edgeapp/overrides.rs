//! A target's overriders applied to its copy of a workload (KubeEdge's semantics: `replicas`,
//! `imageOverriders`, `envOverriders`, `commandOverriders`, `argsOverriders`,
//! `resourcesOverriders`), on the raw object so fields this code does not know survive.

use serde_json::{Map, Value};

use super::Problem;
use super::image::{Component, ImageRef, Operator};
use super::types::{CommandArgsOverrider, EnvOverrider, ImageOverrider, Overriders};

/// Applies every overrider of `o` to `obj`, a workload (Deployment, StatefulSet, DaemonSet)
/// whose pod spec is at `spec.template.spec`.
pub(crate) fn apply(obj: &mut Value, o: &Overriders) -> Result<(), Problem> {
    if let Some(replicas) = o.replicas {
        replicas_override(obj, replicas)?;
    }
    for io in &o.image_overriders {
        image_override(obj, io)?;
    }
    for eo in &o.env_overriders {
        env_override(obj, eo)?;
    }
    for co in &o.command_overriders {
        list_override(obj, co, "command")?;
    }
    for ao in &o.args_overriders {
        list_override(obj, ao, "args")?;
    }
    for ro in &o.resources_overriders {
        let container = container_mut(obj, &ro.container_name)?;
        if !ro.value.is_object() {
            return Err(Problem::new(format!(
                "resourcesOverriders for container {:?}: value must be a ResourceRequirements object",
                ro.container_name
            )));
        }
        container.insert("resources".into(), ro.value.clone());
    }
    Ok(())
}

/// Sets `spec.replicas` (a DaemonSet has none: nothing to set).
fn replicas_override(obj: &mut Value, replicas: i64) -> Result<(), Problem> {
    if replicas < 0 {
        return Err(Problem::new(format!(
            "replicas override {replicas} is negative"
        )));
    }
    if obj["kind"] == "DaemonSet" {
        return Ok(());
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("replicas".into(), replicas.into());
    }
    Ok(())
}

/// Changes the image at the predicate's path, or every container's image.
fn image_override(obj: &mut Value, io: &ImageOverrider) -> Result<(), Problem> {
    let component = Component::parse(&io.component)?;
    let op = Operator::parse(&io.operator)?;
    let change = |image: &mut Value| -> Result<(), Problem> {
        let Some(current) = image.as_str() else {
            return Err(Problem::new("the image field is not a string".to_owned()));
        };
        let mut parsed = ImageRef::parse(current)?;
        parsed.apply(component, op, &io.value)?;
        *image = parsed.to_string().into();
        Ok(())
    };
    match &io.predicate {
        Some(p) => change(at_path_mut(obj, &p.path)?),
        None => {
            for container in containers_mut(obj) {
                if let Some(image) = container.get_mut("image") {
                    change(image)?;
                }
            }
            Ok(())
        }
    }
}

/// Adds, removes (by name) or replaces (by name, else appends) environment variables.
fn env_override(obj: &mut Value, eo: &EnvOverrider) -> Result<(), Problem> {
    let op = Operator::parse(&eo.operator)?;
    let name_of = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_owned);
    for v in &eo.value {
        if name_of(v).is_none() {
            return Err(Problem::new(format!(
                "envOverriders for container {:?}: every value needs a name",
                eo.container_name
            )));
        }
    }
    let container = container_mut(obj, &eo.container_name)?;
    let env = list_mut(container, "env");
    match op {
        Operator::Add => env.extend(eo.value.iter().cloned()),
        Operator::Remove => {
            let names: Vec<_> = eo.value.iter().filter_map(name_of).collect();
            env.retain(|v| !name_of(v).is_some_and(|n| names.contains(&n)));
        }
        Operator::Replace => {
            for v in &eo.value {
                match env.iter_mut().find(|e| name_of(e) == name_of(v)) {
                    Some(slot) => *slot = v.clone(),
                    None => env.push(v.clone()),
                }
            }
        }
    }
    Ok(())
}

/// `command` or `args`: `add` appends the items, `remove` drops the items equal to one of them.
fn list_override(obj: &mut Value, co: &CommandArgsOverrider, field: &str) -> Result<(), Problem> {
    let op = Operator::parse(&co.operator)?;
    let container = container_mut(obj, &co.container_name)?;
    let list = list_mut(container, field);
    match op {
        Operator::Add => list.extend(co.value.iter().map(|s| Value::from(s.as_str()))),
        Operator::Remove => {
            list.retain(|v| !v.as_str().is_some_and(|s| co.value.iter().any(|r| r == s)))
        }
        Operator::Replace => {
            return Err(Problem::new(format!(
                "{field}Overriders support add and remove, not replace"
            )));
        }
    }
    Ok(())
}

/// The pod template's containers.
fn containers_mut(obj: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
    obj.pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// The pod template's container named `name`.
fn container_mut<'a>(
    obj: &'a mut Value,
    name: &str,
) -> Result<&'a mut Map<String, Value>, Problem> {
    containers_mut(obj)
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
        .ok_or_else(|| Problem::new(format!("no container named {name:?} in the pod template")))
}

/// The list `field` of `container`, made empty when absent (or not a list).
fn list_mut<'a>(container: &'a mut Map<String, Value>, field: &str) -> &'a mut Vec<Value> {
    let slot = container
        .entry(field.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    slot.as_array_mut().expect("made an array just above")
}

/// The value at a predicate path like `/spec/template/spec/containers/0/image` (leading slash
/// optional, list items by index), which must exist.
fn at_path_mut<'a>(obj: &'a mut Value, path: &str) -> Result<&'a mut Value, Problem> {
    let trimmed = path.trim().trim_matches('/');
    let missing = || {
        Problem::new(format!(
            "predicate path {path:?} names no field of the object"
        ))
    };
    if trimmed.is_empty() {
        return Err(missing());
    }
    let mut at = obj;
    for seg in trimmed.split('/') {
        at = match at {
            Value::Object(m) => m.get_mut(seg).ok_or_else(missing)?,
            Value::Array(items) => {
                let i: usize = seg.parse().map_err(|_| missing())?;
                items.get_mut(i).ok_or_else(missing)?
            }
            _ => return Err(missing()),
        };
    }
    Ok(at)
}
