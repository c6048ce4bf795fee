//! Writes `libs/kapi/src/server/order/table.rs`: the field order of every Kubernetes Go type,
//! read from k8s-pb's messages (prost declares their fields in the `.proto` order, which
//! go-to-protobuf writes in Go declaration order), and the kinds that name a top-level type.
//!
//! A field is given by its normalized name (lowercase letters and digits only: prost's
//! `pod_ip` and the JSON key `podIP` both become `podip`), the type of its value when that is
//! a message (for a list: of each element; for a map: of each value), and whether it is a map.
//!
//! Usage: `cargo run -p pbgen --bin goorder -- <k8s-pb>/src libs/kapi/src/server/order/table.rs`

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use pbgen::rs_files;
use quote::ToTokens;

/// One message: its fields in declaration order.
struct Message {
    fields: Vec<Field>,
}

struct Field {
    name: String,
    /// The message type of the value (full module path), if any.
    ty: Option<String>,
    map: bool,
}

/// A field of a hand-listed type: its JSON name and the type of its value.
type ExtraField = (&'static str, Option<&'static str>);

/// Types the protobuf files do not hold (kube serves them as JSON only), in Go order:
/// (type, [(field, type of its value, map)]).
const EXTRA: &[(&str, &[ExtraField])] = &[
    (
        "apimachinery::pkg::apis::meta::v1::Table",
        &[
            (
                "metadata",
                Some("apimachinery::pkg::apis::meta::v1::ListMeta"),
            ),
            (
                "columnDefinitions",
                Some("apimachinery::pkg::apis::meta::v1::TableColumnDefinition"),
            ),
            ("rows", Some("apimachinery::pkg::apis::meta::v1::TableRow")),
        ],
    ),
    (
        "apimachinery::pkg::apis::meta::v1::TableColumnDefinition",
        &[
            ("name", None),
            ("type", None),
            ("format", None),
            ("description", None),
            ("priority", None),
        ],
    ),
    (
        "apimachinery::pkg::apis::meta::v1::TableRow",
        &[
            ("cells", None),
            (
                "conditions",
                Some("apimachinery::pkg::apis::meta::v1::TableRowCondition"),
            ),
            ("object", None),
        ],
    ),
    (
        "apimachinery::pkg::apis::meta::v1::TableRowCondition",
        &[
            ("type", None),
            ("status", None),
            ("reason", None),
            ("message", None),
        ],
    ),
];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [pb_dir, out] = args.as_slice() else {
        bail!("usage: goorder <k8s-pb src> <output.rs>");
    };
    let (mut messages, kinds) = read(Path::new(pb_dir))?;
    for (name, fields) in EXTRA {
        let fields = fields
            .iter()
            .map(|(f, ty)| Field {
                name: normalize(f),
                ty: ty.map(str::to_owned),
                map: false,
            })
            .collect();
        messages.insert((*name).to_owned(), Message { fields });
    }
    std::fs::write(out, render(&messages, &kinds)).with_context(|| format!("writing {out}"))?;
    Ok(())
}

/// Lowercase letters and digits of a name.
fn normalize(name: &str) -> String {
    name.trim_start_matches("r#")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

type Kinds = BTreeMap<(String, String), String>;

fn read(root: &Path) -> Result<(BTreeMap<String, Message>, Kinds)> {
    let mut files = Vec::new();
    rs_files(root, &mut files)?;
    let mut messages = BTreeMap::new();
    let mut kinds = Kinds::new();
    for f in files {
        let module: Vec<String> = f
            .parent()
            .unwrap_or(root)
            .strip_prefix(root)?
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let src = std::fs::read_to_string(&f)?;
        let file = syn::parse_file(&src).with_context(|| format!("parsing {}", f.display()))?;
        for item in file.items {
            match item {
                syn::Item::Struct(s) => {
                    if let Some(m) = message(&module, &s) {
                        messages.insert(path_of(&module, &s.ident.to_string()), m);
                    }
                }
                syn::Item::Impl(i) => {
                    if let Some((api_version, kind, ty)) = resource(&module, &i) {
                        kinds.insert((api_version, kind), ty);
                    }
                }
                _ => {}
            }
        }
    }
    Ok((messages, kinds))
}

fn path_of(module: &[String], name: &str) -> String {
    let mut p = module.join("::");
    if !p.is_empty() {
        p.push_str("::");
    }
    p.push_str(name);
    p
}

fn message(module: &[String], s: &syn::ItemStruct) -> Option<Message> {
    let syn::Fields::Named(named) = &s.fields else {
        return None;
    };
    let mut fields = Vec::new();
    for field in &named.named {
        let prost = field
            .attrs
            .iter()
            .find(|a| a.path().is_ident("prost"))?
            .meta
            .to_token_stream()
            .to_string();
        let map = prost.contains("map =");
        let ty = if prost.contains("message") {
            element(module, &field.ty)
        } else {
            None
        };
        fields.push(Field {
            name: normalize(&field.ident.as_ref()?.to_string()),
            ty,
            map,
        });
    }
    Some(Message { fields })
}

/// The full path of the message type inside `Option`/`Vec`/`Box`/a map's value.
fn element(module: &[String], ty: &syn::Type) -> Option<String> {
    let syn::Type::Path(p) = ty else {
        return None;
    };
    let last = p.path.segments.last()?;
    if let syn::PathArguments::AngleBracketed(a) = &last.arguments {
        let inner = a.args.iter().rev().find_map(|g| match g {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        })?;
        return element(module, inner);
    }
    let mut at: Vec<String> = module.to_vec();
    let segments: Vec<String> = p
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    let (name, prefix) = segments.split_last()?;
    for s in prefix {
        match s.as_str() {
            "super" => {
                at.pop();
            }
            "crate" => at.clear(),
            other => at.push(other.to_owned()),
        }
    }
    Some(path_of(&at, name))
}

fn resource(module: &[String], i: &syn::ItemImpl) -> Option<(String, String, String)> {
    let (_, trait_path, _) = i.trait_.as_ref()?;
    if trait_path.segments.last()?.ident != "Resource" {
        return None;
    }
    let consts = pbgen::str_consts(i);
    let ty = i.self_ty.to_token_stream().to_string().replace(' ', "");
    Some((
        consts.get("API_VERSION")?.clone(),
        consts.get("KIND")?.clone(),
        path_of(module, &ty),
    ))
}

fn render(messages: &BTreeMap<String, Message>, kinds: &Kinds) -> String {
    let index: BTreeMap<&str, usize> = messages
        .keys()
        .enumerate()
        .map(|(i, k)| (k.as_str(), i))
        .collect();
    let mut out = String::new();
    out.push_str(
        "// @generated by tools/pbgen (bin goorder) from k8s-pb; do not edit by hand.\n\
         // Regenerate with `bash tools/pbgen/run.sh`.\n\n\
         use super::{F, NONE, Ty};\n\n\
         pub(super) static TYPES: &[Ty] = &[\n",
    );
    for (name, m) in messages {
        let _ = write!(out, "    Ty {{ name: {name:?}, fields: &[");
        for f in &m.fields {
            let ty =
                f.ty.as_deref()
                    .and_then(|t| index.get(t))
                    .map_or("NONE".to_owned(), |i| i.to_string());
            let _ = write!(out, "F({:?}, {ty}, {}), ", f.name, f.map);
        }
        out.push_str("] },\n");
    }
    out.push_str("];\n\npub(super) static KINDS: &[(&str, &str, u16)] = &[\n");
    for ((api_version, kind), ty) in kinds {
        if let Some(i) = index.get(ty.as_str()) {
            let _ = writeln!(out, "    ({api_version:?}, {kind:?}, {i}),");
        }
    }
    out.push_str("];\n");
    out
}
