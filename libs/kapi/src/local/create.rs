//! POST: a new object gets its name (or one generated from `generateName`), uid,
//! creationTimestamp, generation and resourceVersion; it is refused when it exists, when its
//! namespace is missing or terminating, and when its strategy's parent (a custom resource's
//! CRD) refuses it. What the kind adds comes from its [`Strategy`](super::vocab::Strategy).
//! The creating manager owns every field of the object as created (an `Update` entry in
//! `metadata.managedFields`), unless a server-side apply made the object and its entries.

use std::sync::{Arc, Mutex, PoisonError};

use apimachinery::ApiError;
use apimachinery::time::now_rfc3339;
use objstore::{Applied, Mutation, NewObject, ObjKey, StoredObject};
use serde_json::{Value, json};

use super::vocab::{Core, Parents, Target, name_mismatch, namespace_key, parse, store_error};
use super::{meta, owners, strategy, validate};

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
    let mut obj = prepare(&target, body)?;
    kind.admit(core, &target, &mut obj).await?;
    if !target.owner.applying {
        owners::record(&target, owners::main_scope(&target), None, &mut obj);
    }
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
        let written = match kind.ledger() {
            Some(_) => allocating(core, &target, obj).await,
            None => {
                let t = target.clone();
                core.mutate(
                    parents(&t),
                    t.key_named(&name),
                    move |current, revision, parents| step(&t, obj, current, revision, parents),
                )
                .await
            }
        };
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
    check_place(target, &obj, current, parents)?;
    let mutation = target.write(&mut obj, revision)?;
    Ok((mutation, obj))
}

/// Refuses a create whose namespace is missing or terminating, whose parent refuses it, or
/// whose object exists.
fn check_place(
    target: &Target,
    obj: &Value,
    current: Option<&StoredObject>,
    parents: &Parents,
) -> Result<(), ApiError> {
    let kind = strategy::of(&target.info);
    let mut parents = parents.iter();
    if target.info.namespaced {
        let ns = parents.next().and_then(Option::as_ref);
        check_namespace_open(target, meta::name(obj), ns)?;
    }
    if kind.create_parent(target).is_some() {
        kind.check_parent(parents.next().and_then(Option::as_ref))?;
    }
    if current.is_some() {
        let info = &target.info;
        return Err(ApiError::already_exists(
            &info.group,
            &info.plural,
            meta::name(obj),
        ));
    }
    Ok(())
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

/// What a write of a kind with a ledger read in its transaction before its own step: the
/// parents (a create's), the objects the ledger's entries may belong to, and the ledger. The
/// step allocates through it ([`Held::allocate`]); the ledger it leaves is stored after the
/// object, only when the object was.
#[derive(Default)]
pub(super) struct Held {
    parents: Vec<Option<StoredObject>>,
    owners: Vec<(ObjKey, Option<StoredObject>)>,
    ledger: Option<StoredObject>,
    /// The ledger the own step decided to store.
    allocated: Option<Value>,
}

impl Held {
    /// Allocates what `obj` needs from the ledger (a Service's cluster IP and node ports). An
    /// update (`updating`: the object's uid) first releases what the object held, so that it
    /// keeps its values, takes new ones for what it gained (a ClusterIP Service made
    /// NodePort), and frees those it dropped.
    pub(super) fn allocate(
        &mut self,
        core: &Core,
        target: &Target,
        obj: &mut Value,
        updating: Option<&str>,
    ) -> Result<(), ApiError> {
        let before = self.ledger.as_ref().map(parse).transpose()?;
        let mut held = before.clone();
        let mut owners = self.owners.clone();
        if let Some(uid) = updating {
            let own = format!("{}/{}/{uid}", target.namespace, target.name);
            if let Some(ledger) = held.as_mut() {
                release(ledger, &own);
            }
            owners.retain(|(k, _)| k.namespace != target.namespace || k.name != target.name);
        }
        let kind = strategy::of(&target.info);
        let allocated = kind.allocate(core, target, obj, held, &owners)?;
        // An update that keeps its values leaves the ledger as it was.
        self.allocated = allocated.filter(|l| !target.dry_run && Some(l) != before.as_ref());
        Ok(())
    }
}

/// One item of a ledger write's batch.
type Item = (
    ObjKey,
    Box<dyn FnOnce(Option<&StoredObject>, u64) -> Result<(Mutation, Value), ApiError> + Send>,
);

/// A write of a kind that allocates from a ledger, in one transaction: `parents`, the objects
/// of the kind whose allocations the ledger names, and the ledger are read; `own` (the write
/// of `key`) allocates through the [`Held`] it is given; the ledger is stored after it.
pub(super) async fn with_ledger<F>(
    core: &Core,
    target: &Target,
    parents: Vec<ObjKey>,
    key: ObjKey,
    own: F,
) -> Result<Applied<Value>, ApiError>
where
    F: FnOnce(Option<&StoredObject>, u64, &mut Held) -> Result<(Mutation, Value), ApiError>
        + Send
        + 'static,
{
    let ledger = strategy::of(&target.info)
        .ledger()
        .ok_or_else(|| ApiError::internal("a ledger write of a kind without a ledger"))?;
    let owners = owner_keys(core, target, &ledger).await?;
    let reads: Arc<Mutex<Held>> = Arc::default();
    let mut items: Vec<Item> = Vec::new();
    for key in parents {
        let reads = reads.clone();
        items.push((
            key,
            Box::new(move |current, _| {
                lock(&reads).parents.push(current.cloned());
                Ok((Mutation::Keep, Value::Null))
            }),
        ));
    }
    for key in owners {
        let (reads, k) = (reads.clone(), key.clone());
        items.push((
            key,
            Box::new(move |current, _| {
                lock(&reads).owners.push((k, current.cloned()));
                Ok((Mutation::Keep, Value::Null))
            }),
        ));
    }
    let r = reads.clone();
    items.push((
        ledger.clone(),
        Box::new(move |current, _| {
            lock(&r).ledger = current.cloned();
            Ok((Mutation::Keep, Value::Null))
        }),
    ));
    let r = reads.clone();
    items.push((
        key,
        Box::new(move |current, revision| {
            let mut held = std::mem::take(&mut *lock(&r));
            let written = own(current, revision, &mut held);
            *lock(&r) = held;
            written
        }),
    ));
    items.push((
        ledger,
        Box::new(move |_, revision| {
            let Some(value) = lock(&reads).allocated.take() else {
                return Ok((Mutation::Keep, Value::Null));
            };
            let bytes = serde_json::to_vec(&value)
                .map_err(|e| ApiError::internal(format!("encoding the allocations: {e}")))?;
            let put = NewObject {
                resource_version: revision.to_string(),
                value: bytes.into(),
                ..NewObject::default()
            };
            Ok((Mutation::Put(put), Value::Null))
        }),
    ));
    let mut results = core.store.mutate_many(items).await.map_err(store_error)?;
    results.pop();
    results
        .pop()
        .ok_or_else(|| ApiError::internal("the object store answered no result"))?
}

/// A create that allocates (a Service's cluster IP and node ports) before it is stored.
async fn allocating(core: &Core, target: &Target, obj: Value) -> Result<Applied<Value>, ApiError> {
    let (t, c) = (target.clone(), core.clone());
    let key = target.key_named(meta::name(&obj));
    with_ledger(
        core,
        target,
        parents(target),
        key,
        move |current, revision, held| {
            let mut obj = obj;
            // A create that cannot happen allocates nothing (and answers why it cannot).
            check_place(&t, &obj, current, &held.parents)?;
            held.allocate(&c, &t, &mut obj, None)?;
            step(&t, obj, current, revision, &held.parents)
        },
    )
    .await
}

/// Drops the entries of `owner` (`namespace/name/uid`) from every map of a ledger.
fn release(ledger: &mut Value, owner: &str) {
    for map in ledger
        .as_object_mut()
        .into_iter()
        .flat_map(|m| m.values_mut())
    {
        if let Some(map) = map.as_object_mut() {
            map.retain(|_, o| o.as_str() != Some(owner));
        }
    }
}

/// The objects of `target`'s kind an allocation may release: those stored, and those the
/// ledger names (deleted ones among them).
async fn owner_keys(
    core: &Core,
    target: &Target,
    ledger: &ObjKey,
) -> Result<Vec<ObjKey>, ApiError> {
    let resource = target.info.store_resource();
    let mut keys: Vec<ObjKey> = core
        .list(&resource, None)
        .await?
        .iter()
        .map(|o| o.key.clone())
        .collect();
    if let Some(held) = core.get(ledger).await? {
        keys.extend(ledger_owners(&held).filter_map(|owner| {
            let mut parts = owner.splitn(3, '/');
            let (ns, name) = (parts.next()?, parts.next()?);
            Some(ObjKey::new(resource.clone(), ns, name))
        }));
    }
    keys.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    keys.dedup();
    Ok(keys)
}

/// The owners (`namespace/name/uid`) a ledger's entries name, in any of its maps.
fn ledger_owners(ledger: &Value) -> impl Iterator<Item = &str> {
    ledger
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(Value::as_object)
        .flat_map(|m| m.values())
        .filter_map(Value::as_str)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
