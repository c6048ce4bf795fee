//! POST: a new object gets its name (or one generated from `generateName`), uid,
//! creationTimestamp, generation and resourceVersion; it is refused when it exists, when its
//! namespace is missing or terminating, and when its strategy's parent (a custom resource's
//! CRD) refuses it. What the kind adds comes from its [`Strategy`](super::vocab::Strategy).

use apimachinery::ApiError;
use apimachinery::time::now_rfc3339;
use objstore::{Mutation, ObjKey, StoredObject};
use serde_json::{Value, json};

use super::vocab::{Core, Parents, Target, name_mismatch, namespace_key, parse};
use super::{meta, strategy, validate};

/// Generated names are tried this many times before the create fails (kube-apiserver retries
/// name generation the same way).
const GENERATE_ATTEMPTS: usize = 8;
/// `generateName` is cut to this length before the random suffix.
const GENERATE_BASE_MAX: usize = 58;
const GENERATE_SUFFIX_LEN: usize = 5;
/// kube's alphabet for generated names: no vowels, no look-alikes.
const GENERATE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Creates `body` as `target`'s kind; returns the stored object.
pub(super) async fn create(core: &Core, target: Target, body: Value) -> Result<Value, ApiError> {
    let kind = strategy::of(&target.info);
    let obj = prepare(&target, body)?;
    let generate = meta::name(&obj).is_empty();
    let mut last = None;
    for _ in 0..GENERATE_ATTEMPTS {
        let mut obj = obj.clone();
        if generate {
            let name = generated_name(meta::str_of(&obj, "generateName"));
            meta::set(&mut obj, "name", Value::String(name));
        }
        let name = meta::name(&obj).to_owned();
        validate::check_name(&target.info, kind.name_rule(), &name)?;
        let t = target.clone();
        let written = core
            .mutate(
                parents(&t),
                t.key_named(&name),
                move |current, revision, parents| step(&t, obj, current, revision, parents),
            )
            .await;
        match written {
            Err(e) if generate && e.reason == "AlreadyExists" => last = Some(e),
            Err(e) => return Err(e),
            Ok(applied) => {
                if !target.dry_run {
                    kind.after_write(core, meta::name(&applied.output)).await;
                }
                return Ok(applied.output);
            }
        }
    }
    Err(last.unwrap_or_else(|| ApiError::internal("no name could be generated")))
}

/// Checks the body and fills in what the server owns. Pure: runs outside or inside a store
/// closure (server-side apply creates from within a patch).
pub(super) fn prepare(target: &Target, mut obj: Value) -> Result<Value, ApiError> {
    let info = &target.info;
    let kind = strategy::of(info);
    validate::check_type(info, &mut obj)?;
    validate::check_namespace(info, &target.namespace, &mut obj)?;
    if !meta::resource_version(&obj).is_empty() {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    if !target.name.is_empty() {
        let body_name = meta::name(&obj);
        if !body_name.is_empty() && body_name != target.name {
            return Err(name_mismatch(body_name, &target.name));
        }
        meta::set(&mut obj, "name", Value::String(target.name.clone()));
    }
    if meta::name(&obj).is_empty() && meta::str_of(&obj, "generateName").is_empty() {
        return Err(validate::invalid(
            info,
            "",
            "metadata.name",
            "Required value: name or generateName is required".into(),
        ));
    }
    meta::set(&mut obj, "resourceVersion", Value::Null);
    meta::set(&mut obj, "deletionTimestamp", Value::Null);
    meta::set(&mut obj, "deletionGracePeriodSeconds", Value::Null);
    meta::set(
        &mut obj,
        "uid",
        Value::String(uuid::Uuid::new_v4().to_string()),
    );
    meta::set(&mut obj, "creationTimestamp", Value::String(now_rfc3339()));
    let generation = if kind.tracks_generation() {
        json!(1)
    } else {
        Value::Null
    };
    meta::set(&mut obj, "generation", generation);
    if info.custom && target.has_status_subresource() {
        // With a status subresource, a custom resource's status is only written through it.
        meta::set_top(&mut obj, "status", None);
    }
    let name = meta::name(&obj);
    if !name.is_empty() {
        // The name is checked before anything derived from it (a namespace's name label).
        validate::check_name(info, kind.name_rule(), name)?;
    }
    kind.canonicalize(target, &mut obj)?;
    kind.prepare_create(target, &mut obj)?;
    validate::check_metadata(info, &obj)?;
    Ok(obj)
}

/// The objects a create must read in its transaction: the namespace, and the strategy's
/// parent (the CRD of a custom resource).
pub(super) fn parents(target: &Target) -> Vec<ObjKey> {
    let mut keys = Vec::new();
    if target.info.namespaced {
        keys.push(namespace_key(&target.namespace));
    }
    keys.extend(strategy::of(&target.info).create_parent(target));
    keys
}

/// The store step of a create: refuses what exists or has no place to go, stores the rest.
pub(super) fn step(
    target: &Target,
    mut obj: Value,
    current: Option<&StoredObject>,
    revision: u64,
    parents: &Parents,
) -> Result<(Mutation, Value), ApiError> {
    let kind = strategy::of(&target.info);
    let mut parents = parents.iter();
    if target.info.namespaced {
        let ns = parents.next().and_then(Option::as_ref);
        check_namespace_open(target, meta::name(&obj), ns)?;
    }
    if kind.create_parent(target).is_some() {
        kind.check_parent(parents.next().and_then(Option::as_ref))?;
    }
    if current.is_some() {
        let info = &target.info;
        return Err(ApiError::already_exists(
            &info.group,
            &info.plural,
            meta::name(&obj),
        ));
    }
    let mutation = target.write(&mut obj, revision)?;
    Ok((mutation, obj))
}

/// Refuses a create into a namespace that is missing (404) or terminating (403), as the
/// NamespaceLifecycle admission does for every namespaced kind.
fn check_namespace_open(
    target: &Target,
    name: &str,
    ns: Option<&StoredObject>,
) -> Result<(), ApiError> {
    let Some(ns) = ns else {
        return Err(ApiError::not_found("", "namespaces", &target.namespace));
    };
    let ns = parse(ns)?;
    let terminating = meta::deleting(&ns)
        || ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating");
    if terminating {
        let why = format!(
            "unable to create new content in namespace {} because it is being terminated",
            target.namespace
        );
        let info = &target.info;
        return Err(ApiError::forbidden(&info.group, &info.plural, name, &why));
    }
    Ok(())
}

/// `generateName` plus five random characters.
fn generated_name(base: &str) -> String {
    let mut cut = base.len().min(GENERATE_BASE_MAX);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    let random = uuid::Uuid::new_v4();
    let mut name = base[..cut].to_owned();
    // Bytes 10..16 of a v4 uuid are all random.
    for b in &random.as_bytes()[10..10 + GENERATE_SUFFIX_LEN] {
        let i = usize::from(*b) % GENERATE_ALPHABET.len();
        name.push(char::from(GENERATE_ALPHABET[i]));
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_keep_the_base_and_add_five_characters() {
        let name = generated_name("web-");
        assert_eq!(name.len(), 9);
        assert!(name.starts_with("web-"));
        assert!(name[4..].bytes().all(|b| GENERATE_ALPHABET.contains(&b)));
        assert_eq!(generated_name(&"x".repeat(80)).len(), 63);
        assert_ne!(generated_name("a-"), generated_name("a-"));
    }
}
