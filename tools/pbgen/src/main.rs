//! Writes `libs/kpb/src/generated.rs`: a `Conv` impl for every k8s-openapi struct that has a
//! protobuf message of the same name and module in k8s-pb, field by field, and the table of
//! kinds the protobuf codec serves.
//!
//! Both crates are generated from the same Go types, so their Rust field names agree (after
//! `r#`/trailing `_` are removed). Fields only one side has are left out and reported.
//!
//! Usage: `cargo run -p pbgen -- <k8s-openapi>/src/v1_33 <k8s-pb>/src libs/kpb/src/generated.rs`
//! (`tools/pbgen/run.sh` finds the two source trees through `cargo metadata`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use pbgen::rs_files;
use quote::ToTokens;

/// A field's type, as far as the conversion cares.
#[derive(Clone, Debug, PartialEq)]
enum Shape {
    Leaf(String),
    Opt(Box<Shape>),
    Vec(Box<Shape>),
    Map(Box<Shape>),
    Boxed(Box<Shape>),
}

impl Shape {
    fn leaf(&self) -> &str {
        match self {
            Shape::Leaf(l) => l,
            Shape::Opt(s) | Shape::Vec(s) | Shape::Map(s) | Shape::Boxed(s) => s.leaf(),
        }
    }
}

/// How k8s-pb declares a field.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Label {
    Optional { boxed: bool },
    Repeated,
    Map,
}

struct OaStruct {
    module: String,
    name: String,
    fields: Vec<(String, String, Shape)>, // (normalized, ident, shape)
}

struct Resource {
    api_version: String,
    kind: String,
    list_kind: Option<String>,
}

/// Primitive leaves (the identity conversion) and the hand-written ones in `libs/kpb`.
const HAND_WRITTEN: &[&str] = &[
    "String",
    "bool",
    "i32",
    "i64",
    "f64",
    "k8s_openapi::ByteString",
    "k8s_openapi::apimachinery::pkg::apis::meta::v1::Time",
    "k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime",
    "k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1",
    "k8s_openapi::apimachinery::pkg::api::resource::Quantity",
    "k8s_openapi::apimachinery::pkg::util::intstr::IntOrString",
    "k8s_openapi::apimachinery::pkg::runtime::RawExtension",
    "k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSON",
    "k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray",
    "k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrBool",
    "k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrStringArray",
    "k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceSubresourceStatus",
];

/// Fields that are pointers in the Go types, where a zero value means something (so a
/// decoded zero is kept). Every other optional scalar that decodes to its zero value is
/// dropped, as Go's `omitempty` drops it from the JSON a real API server stores.
const POINTERS: &[&str] = &[
    "replicas",
    "termination_grace_period_seconds",
    "grace_period_seconds",
    "active_deadline_seconds",
    "automount_service_account_token",
    "run_as_user",
    "run_as_group",
    "run_as_non_root",
    "fs_group",
    "privileged",
    "allow_privilege_escalation",
    "read_only_root_filesystem",
    "storage_class_name",
    "backoff_limit",
    "backoff_limit_per_index",
    "max_failed_indexes",
    "parallelism",
    "completions",
    "suspend",
    "revision_history_limit",
    "progress_deadline_seconds",
    "ttl_seconds_after_finished",
    "starting_deadline_seconds",
    "successful_jobs_history_limit",
    "failed_jobs_history_limit",
    "priority",
    "enable_service_links",
    "share_process_namespace",
    "host_users",
    "set_hostname_as_fqdn",
    "preemption_policy",
    "optional",
    "default_mode",
    "mode",
    "expiration_seconds",
    "immutable",
    "allow_volume_expansion",
    "orphan_dependents",
    "propagation_policy",
    "max_unavailable",
    "max_surge",
    "min_available",
    "partition",
    "min_replicas",
    "allocate_load_balancer_node_ports",
    "publish_not_ready_addresses",
    "ready",
    "serving",
    // JSONSchemaProps' bounds (`minimum: 0` is a bound, not an absence).
    "maximum",
    "minimum",
    "multiple_of",
    "max_items",
    "min_items",
    "max_length",
    "min_length",
    "max_properties",
    "min_properties",
    "x_kubernetes_preserve_unknown_fields",
    "terminating",
    "port",
    "unhealthy_pod_eviction_policy",
    "toleration_seconds",
];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [oa_dir, pb_dir, out] = args.as_slice() else {
        bail!("usage: pbgen <k8s-openapi src/v1_XX> <k8s-pb src> <output.rs>");
    };
    let (oa, resources) = read_openapi(Path::new(oa_dir))?;
    let pb = read_pb(Path::new(pb_dir))?;
    let code = generate(&oa, &resources, &pb);
    std::fs::write(out, code).with_context(|| format!("writing {out}"))?;
    Ok(())
}

fn module_of(root: &Path, dir: &Path) -> String {
    dir.strip_prefix(root)
        .unwrap()
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("::")
}

/// A field's name for matching: no `r#`, no underscores (prost turns `nonResourceURLs` into
/// `non_resource_ur_ls` and `uID` into `u_id`; k8s-openapi gives `non_resource_urls`, `uid`).
fn normalize(ident: &str) -> String {
    match ident.trim_start_matches("r#").replace('_', "") {
        // JSONSchemaProps' `$ref`.
        n if n == "refpath" => "ref".to_owned(),
        n => n,
    }
}

type OaIndex = BTreeMap<String, OaStruct>;

fn read_openapi(root: &Path) -> Result<(OaIndex, BTreeMap<String, Resource>)> {
    let mut files = Vec::new();
    rs_files(root, &mut files)?;
    let mut structs = BTreeMap::new();
    let mut resources: BTreeMap<String, Resource> = BTreeMap::new();
    for f in files {
        if f.file_name().is_some_and(|n| n == "mod.rs") {
            continue;
        }
        let module = module_of(root, f.parent().unwrap());
        let src = std::fs::read_to_string(&f)?;
        let file = syn::parse_file(&src).with_context(|| format!("parsing {}", f.display()))?;
        for item in file.items {
            match item {
                syn::Item::Struct(s) => {
                    let syn::Fields::Named(named) = &s.fields else {
                        continue;
                    };
                    if !s.generics.params.is_empty() {
                        continue;
                    }
                    let mut fields = Vec::new();
                    for field in &named.named {
                        let ident = field.ident.as_ref().unwrap().to_string();
                        let shape = oa_shape(&field.ty);
                        fields.push((normalize(&ident), ident, shape));
                    }
                    let name = s.ident.to_string();
                    let key = format!("{module}::{name}");
                    structs.insert(
                        key,
                        OaStruct {
                            module: module.clone(),
                            name,
                            fields,
                        },
                    );
                }
                syn::Item::Impl(i) => {
                    let Some((_, trait_path, _)) = &i.trait_ else {
                        continue;
                    };
                    let trait_name = trait_path.segments.last().unwrap().ident.to_string();
                    let self_ty = i.self_ty.to_token_stream().to_string().replace(' ', "");
                    let key = format!("{module}::{self_ty}");
                    let consts = pbgen::str_consts(&i);
                    match trait_name.as_str() {
                        "Resource" => {
                            let r = resources.entry(key).or_insert(Resource {
                                api_version: String::new(),
                                kind: String::new(),
                                list_kind: None,
                            });
                            r.api_version = consts.get("API_VERSION").cloned().unwrap_or_default();
                            r.kind = consts.get("KIND").cloned().unwrap_or_default();
                        }
                        "ListableResource" => {
                            let r = resources.entry(key).or_insert(Resource {
                                api_version: String::new(),
                                kind: String::new(),
                                list_kind: None,
                            });
                            r.list_kind = consts.get("LIST_KIND").cloned();
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
    }
    Ok((structs, resources))
}

fn last_generic(seg: &syn::PathSegment) -> Option<&syn::Type> {
    let syn::PathArguments::AngleBracketed(a) = &seg.arguments else {
        return None;
    };
    a.args.iter().rev().find_map(|g| match g {
        syn::GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

fn oa_shape(ty: &syn::Type) -> Shape {
    let syn::Type::Path(p) = ty else {
        return Shape::Leaf(ty.to_token_stream().to_string());
    };
    let seg = p.path.segments.last().unwrap();
    let name = seg.ident.to_string();
    let inner = last_generic(seg);
    match (name.as_str(), inner) {
        ("Option", Some(t)) => Shape::Opt(Box::new(oa_shape(t))),
        ("Vec", Some(t)) => Shape::Vec(Box::new(oa_shape(t))),
        ("BTreeMap", Some(t)) => Shape::Map(Box::new(oa_shape(t))),
        ("Box", Some(t)) => Shape::Boxed(Box::new(oa_shape(t))),
        _ => {
            let full = p.path.to_token_stream().to_string().replace(' ', "");
            let full = match full.as_str() {
                "std::string::String" | "String" => "String".to_owned(),
                other => other.replacen("crate::", "k8s_openapi::", 1),
            };
            Shape::Leaf(full)
        }
    }
}

/// One k8s-pb message: its Rust name and its fields (normalized name → (ident, label)).
struct PbMessage {
    name: String,
    fields: BTreeMap<String, PbField>,
}

struct PbField {
    ident: String,
    label: Label,
    /// The message type of a singular message field (its last path segment).
    message: Option<String>,
}

/// k8s-pb's messages by `module::name`, the name lowercased: prost renames `HTTPGetAction`
/// to `HttpGetAction`, k8s-openapi keeps Go's casing.
type PbIndex = BTreeMap<String, PbMessage>;

fn pb_key(module: &str, name: &str) -> String {
    format!("{module}::{}", name.to_lowercase())
}

fn read_pb(root: &Path) -> Result<PbIndex> {
    let mut files = Vec::new();
    rs_files(root, &mut files)?;
    let mut out = BTreeMap::new();
    for f in files {
        if f.file_name().is_none_or(|n| n != "mod.rs") {
            continue;
        }
        let module = module_of(root, f.parent().unwrap());
        let src = std::fs::read_to_string(&f)?;
        let file = syn::parse_file(&src).with_context(|| format!("parsing {}", f.display()))?;
        for item in file.items {
            let syn::Item::Struct(s) = item else { continue };
            let syn::Fields::Named(named) = &s.fields else {
                continue;
            };
            let mut fields = BTreeMap::new();
            for field in &named.named {
                let ident = field.ident.as_ref().unwrap().to_string();
                let Some(attr) = field.attrs.iter().find(|a| a.path().is_ident("prost")) else {
                    continue;
                };
                let tokens = attr.meta.to_token_stream().to_string();
                let label = if tokens.contains("repeated") {
                    Label::Repeated
                } else if tokens.contains("btree_map") || tokens.contains("hash_map") {
                    Label::Map
                } else {
                    Label::Optional {
                        boxed: tokens.contains("boxed"),
                    }
                };
                let message = (tokens.contains("message")
                    && label == Label::Optional { boxed: false })
                .then(|| inner_name(&field.ty))
                .flatten();
                fields.insert(
                    normalize(&ident),
                    PbField {
                        ident,
                        label,
                        message,
                    },
                );
            }
            let name = s.ident.to_string();
            out.insert(pb_key(&module, &name), PbMessage { name, fields });
        }
    }
    Ok(out)
}

/// The last segment of the type inside an `Option`.
fn inner_name(ty: &syn::Type) -> Option<String> {
    let syn::Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    match last_generic(seg) {
        Some(inner) => inner_name(inner),
        None => Some(seg.ident.to_string()),
    }
}

/// The expressions converting one field each way, or why the shapes do not fit.
fn field_exprs(
    module: &str,
    ident: &str,
    src: &str,
    shape: &Shape,
    label: Label,
) -> Result<(String, String), String> {
    let keep_zero = POINTERS.contains(&ident);
    let opt = if keep_zero {
        "map(from_pb)"
    } else {
        "and_then(from_pb_nz)"
    };
    let (to, from) = match (shape, label) {
        (Shape::Leaf(_), Label::Optional { boxed: false }) => (
            format!("Some(to_pb(v.{ident}))"),
            format!("from_pb({src}.unwrap_or_default())"),
        ),
        (Shape::Leaf(_), Label::Optional { boxed: true }) => (
            format!("Some(Box::new(to_pb(v.{ident})))"),
            format!("from_pb(*{src}.unwrap_or_default())"),
        ),
        (Shape::Boxed(_), Label::Optional { boxed: true }) => (
            format!("Some(Box::new(to_pb(*v.{ident})))"),
            format!("Box::new(from_pb(*{src}.unwrap_or_default()))"),
        ),
        (Shape::Opt(s), Label::Optional { boxed }) => match (s.as_ref(), boxed) {
            (Shape::Leaf(_), false) => (format!("v.{ident}.map(to_pb)"), format!("{src}.{opt}")),
            (Shape::Leaf(_), true) => (
                format!("v.{ident}.map(|e| Box::new(to_pb(e)))"),
                format!("{src}.map(|e| from_pb(*e))"),
            ),
            (Shape::Boxed(_), true) => (
                format!("v.{ident}.map(|e| Box::new(to_pb(*e)))"),
                format!("{src}.map(|e| Box::new(from_pb(*e)))"),
            ),
            (Shape::Boxed(_), false) => (
                format!("v.{ident}.map(|e| to_pb(*e))"),
                format!("{src}.map(|e| Box::new(from_pb(e)))"),
            ),
            _ => return Err(format!("{shape:?} against {label:?}")),
        },
        (Shape::Vec(s), Label::Repeated) if matches!(**s, Shape::Leaf(_)) => (
            format!("v.{ident}.into_iter().map(to_pb).collect()"),
            format!("{src}.into_iter().map(from_pb).collect()"),
        ),
        (Shape::Opt(o), Label::Repeated) if matches!(&**o, Shape::Vec(s) if matches!(**s, Shape::Leaf(_))) => {
            (
                format!("v.{ident}.into_iter().flatten().map(to_pb).collect()"),
                format!("non_empty({src}.into_iter().map(from_pb).collect())"),
            )
        }
        (Shape::Map(s), Label::Map) if matches!(**s, Shape::Leaf(_)) => (
            format!("v.{ident}.into_iter().map(|(k, e)| (k, to_pb(e))).collect()"),
            format!("{src}.into_iter().map(|(k, e)| (k, from_pb(e))).collect()"),
        ),
        (Shape::Opt(o), Label::Map) if matches!(&**o, Shape::Map(s) if matches!(**s, Shape::Leaf(_))) => {
            (
                format!("v.{ident}.into_iter().flatten().map(|(k, e)| (k, to_pb(e))).collect()"),
                format!("non_empty_map({src}.into_iter().map(|(k, e)| (k, from_pb(e))).collect())"),
            )
        }
        // `map<string, ExtraValue>`, where ExtraValue is `repeated string items`.
        (Shape::Opt(o), Label::Map) if matches!(&**o, Shape::Map(v) if matches!(&**v, Shape::Vec(l) if l.leaf() == "String")) => {
            (
                format!(
                    "v.{ident}.into_iter().flatten().map(|(k, items)| (k, k8s_pb::{module}::ExtraValue {{ items }})).collect()"
                ),
                format!("non_empty_map({src}.into_iter().map(|(k, e)| (k, e.items)).collect())"),
            )
        }
        _ => return Err(format!("{shape:?} against {label:?}")),
    };
    Ok((to, from))
}

/// The initializers of one message's literal (to protobuf), and on the way back the `let`s
/// that open embedded messages and the k8s-openapi field initializers.
#[derive(Default)]
struct Emitted {
    lets: String,
    from: String,
    dropped: Vec<String>,
}

struct Ctx<'a> {
    oa: &'a OaIndex,
    pb: &'a PbIndex,
    ok: &'a BTreeSet<String>,
    key: &'a str,
}

/// Emits the fields of `msg` (a message of the struct `ctx.key`, or one Go embeds in it, whose
/// fields JSON inlines) read from `from_src`; returns the message literal's initializers.
fn emit_message(
    ctx: &Ctx,
    msg: &PbMessage,
    from_src: &str,
    used: &mut BTreeSet<String>,
    out: &mut Emitted,
) -> Result<String, String> {
    let s = &ctx.oa[ctx.key];
    let mut inits = String::new();
    for (norm, f) in &msg.fields {
        let direct = s
            .fields
            .iter()
            .find(|(n, _, _)| n == norm && !used.contains(n));
        if let Some((_, ident, shape)) = direct {
            used.insert(norm.clone());
            let leaf = shape.leaf();
            if !HAND_WRITTEN.contains(&leaf)
                && !ctx.ok.contains(leaf.trim_start_matches("k8s_openapi::"))
            {
                return Err(format!("field {ident}: {leaf} does not convert"));
            }
            let (t, fr) = field_exprs(
                &s.module,
                ident,
                &format!("{from_src}.{}", f.ident),
                shape,
                f.label,
            )
            .map_err(|e| format!("field {ident}: {e}"))?;
            writeln!(inits, "{}: {t},", f.ident).unwrap();
            writeln!(out.from, "{ident}: {fr},").unwrap();
            continue;
        }
        // A Go embedded struct: the field is named after its type, and JSON inlines it.
        // (`ProbeHandler handler` in Probe is the one whose name is a suffix of its type's.)
        let embedded = f
            .message
            .as_ref()
            .filter(|m| normalize(&m.to_lowercase()).ends_with(norm.as_str()))
            .and_then(|m| ctx.pb.get(&pb_key(&s.module, m)))
            .filter(|sub| {
                sub.fields
                    .keys()
                    .any(|n| !used.contains(n) && s.fields.iter().any(|(on, _, _)| on == n))
            });
        if let Some(sub) = embedded {
            let var = format!("e_{}", f.ident.trim_start_matches("r#"));
            writeln!(
                out.lets,
                "let {var} = {from_src}.{}.unwrap_or_default();",
                f.ident
            )
            .unwrap();
            let sub_inits = emit_message(ctx, sub, &var, used, out)?;
            writeln!(
                inits,
                "{}: Some(k8s_pb::{}::{} {{ {sub_inits} ..Default::default() }}),",
                f.ident, s.module, sub.name
            )
            .unwrap();
            continue;
        }
        out.dropped
            .push(format!("{}.{norm} (not in k8s-openapi)", ctx.key));
    }
    Ok(inits)
}

/// The `Conv` impl of one struct, or why it cannot have one.
fn emit_struct(ctx: &Ctx) -> Result<(String, Vec<String>), String> {
    let s = &ctx.oa[ctx.key];
    let msg = ctx
        .pb
        .get(&pb_key(&s.module, &s.name))
        .ok_or("no message of this name in k8s-pb")?;
    let mut used = BTreeSet::new();
    let mut out = Emitted::default();
    let to = emit_message(ctx, msg, "p", &mut used, &mut out)?;
    for (norm, ident, _) in &s.fields {
        if !used.contains(norm) {
            out.dropped
                .push(format!("{}.{ident} (not in k8s-pb)", ctx.key));
        }
    }
    let oa_path = format!("k8s_openapi::{}::{}", s.module, s.name);
    let pb_path = format!("k8s_pb::{}::{}", s.module, msg.name);
    // Fields k8s-openapi has and the message lacks take their default (the struct has one
    // only then: not every k8s-openapi type implements Default).
    let rest = if s.fields.iter().any(|(n, _, _)| !used.contains(n)) {
        "..Default::default()"
    } else {
        ""
    };
    let to_v = if used.is_empty() { "_v" } else { "v" };
    let from_p = if used.is_empty() { "_p" } else { "p" };
    let code = format!(
        "impl Conv for {oa_path} {{\n    type Pb = {pb_path};\n\n    fn to_pb(self) -> Self::Pb {{\n        let {to_v} = self;\n        Self::Pb {{ {to} ..Default::default() }}\n    }}\n\n    fn from_pb({from_p}: Self::Pb) -> Self {{\n        {lets}\n        Self {{ {from} {rest} }}\n    }}\n}}\n",
        lets = out.lets,
        from = out.from,
    );
    Ok((code, out.dropped))
}

fn generate(oa: &OaIndex, resources: &BTreeMap<String, Resource>, pb: &PbIndex) -> String {
    // Which structs convert: those with a message whose every shared field fits and whose
    // leaves convert (to a fixpoint, since leaves are other structs).
    let mut ok: BTreeSet<String> = oa
        .iter()
        .filter(|(_, s)| pb.contains_key(&pb_key(&s.module, &s.name)))
        .map(|(k, _)| k.clone())
        .collect();
    let mut why: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let before = ok.len();
        for key in ok.clone() {
            let ctx = Ctx {
                oa,
                pb,
                ok: &ok,
                key: &key,
            };
            if let Err(e) = emit_struct(&ctx) {
                why.insert(key.clone(), e);
                ok.remove(&key);
            }
        }
        if ok.len() == before {
            break;
        }
    }

    let mut out = String::new();
    out.push_str(
        "// @generated by tools/pbgen from k8s-openapi and k8s-pb; do not edit by hand.\n\
         // Regenerate with `bash tools/pbgen/run.sh`.\n\n\
         #![allow(clippy::needless_update, clippy::redundant_closure, clippy::default_trait_access)]\n\n\
         use crate::conv::{Conv, from_pb, from_pb_nz, non_empty, non_empty_map, to_pb};\n\
         use crate::registry::{Entry, decode, encode};\n\n",
    );
    let mut dropped = Vec::new();
    for key in &ok {
        let ctx = Ctx {
            oa,
            pb,
            ok: &ok,
            key,
        };
        let (code, d) = emit_struct(&ctx).expect("checked above");
        out.push_str(&code);
        dropped.extend(d);
    }

    // Lists of the resources, and the table of kinds.
    let mut entries = String::new();
    for (key, r) in resources {
        if !ok.contains(key) || r.kind.is_empty() {
            continue;
        }
        let s = &oa[key];
        let oa_path = format!("k8s_openapi::{}::{}", s.module, s.name);
        writeln!(
            entries,
            "    Entry {{ api_version: {:?}, kind: {:?}, encode: encode::<{oa_path}>, decode: decode::<{oa_path}> }},",
            r.api_version, r.kind
        )
        .unwrap();
        let Some(list_kind) = &r.list_kind else {
            continue;
        };
        let Some(list) = pb.get(&pb_key(&s.module, list_kind)) else {
            dropped.push(format!("{}::{list_kind} (no list message)", s.module));
            continue;
        };
        let pb_list = format!("k8s_pb::{}::{}", s.module, list.name);
        writeln!(
            out,
            "impl Conv for k8s_openapi::List<{oa_path}> {{\n    type Pb = {pb_list};\n\
             \n    fn to_pb(self) -> Self::Pb {{\n        Self::Pb {{\n            metadata: Some(to_pb(self.metadata)),\n            items: self.items.into_iter().map(to_pb).collect(),\n        }}\n    }}\n\
             \n    fn from_pb(p: Self::Pb) -> Self {{\n        Self {{\n            metadata: p.metadata.map(from_pb).unwrap_or_default(),\n            items: p.items.into_iter().map(from_pb).collect(),\n        }}\n    }}\n}}\n"
        )
        .unwrap();
        writeln!(
            entries,
            "    Entry {{ api_version: {:?}, kind: {:?}, encode: encode::<k8s_openapi::List<{oa_path}>>, decode: decode::<k8s_openapi::List<{oa_path}>> }},",
            r.api_version, list_kind
        )
        .unwrap();
    }
    writeln!(
        out,
        "/// Every kind with a protobuf form, by `apiVersion` and `kind`.\npub(crate) static ENTRIES: &[Entry] = &[\n{entries}];"
    )
    .unwrap();

    eprintln!("{} structs convert", ok.len());
    for k in oa.keys().filter(|k| !ok.contains(*k)) {
        let w = why
            .get(k)
            .map_or("no message of this name in k8s-pb", String::as_str);
        eprintln!("skipped {k}: {w}");
    }
    for d in &dropped {
        eprintln!("field left out: {d}");
    }
    out
}
