//! A [`ForwardedWrite`] as the cloud may act on it: every field parsed into a typed, checked
//! value before anything is sent to the API. The wire envelope is whatever a node sent; a
//! [`NodeRequest`] is a write to one known resource, each path segment a valid name, the
//! subresource and body type from the known sets, and its path built with escaping, so no
//! field can smuggle another path or a query into the request the cloud makes.

use std::fmt::Write as _;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, PercentEncode, utf8_percent_encode};
use serde_json::Value;

use super::ForwardedWrite;
use crate::catalog::ResourceInfo;
use crate::patch::PatchType;
use crate::status::ApiError;
use crate::validation::{is_dns_label, is_dns_subdomain, path_segment_problem};

/// The longest object name the API accepts (a DNS-1123 subdomain's limit).
const NAME_MAX: usize = 253;

/// A checked write a node asks the cloud to make.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRequest {
    pub verb: Verb,
    /// API group (`""` for core).
    pub group: String,
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// `None` for cluster-scoped resources.
    pub namespace: Option<String>,
    /// `None` for a create of the collection.
    pub name: Option<String>,
    pub subresource: Option<Subresource>,
    pub body_type: BodyType,
    pub body: Option<Value>,
    pub dry_run: bool,
}

/// What a node may ask the API to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Create,
    Update,
    Patch,
    Delete,
}

/// The subresources a forwarded write may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    Status,
    Token,
    Binding,
    Eviction,
    EphemeralContainers,
    Scale,
    Approval,
    Finalize,
}

/// How the body is encoded: a whole object (JSON) or one of the patch types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyType {
    Json,
    Patch(PatchType),
}

/// What the cloud knows of a resource a write names: its scope and subresources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownResource {
    /// `None` when unknown (a custom resource named only by group, version and plural).
    pub namespaced: Option<bool>,
    pub subresources: Vec<String>,
}

// === impl NodeRequest ===

impl NodeRequest {
    /// Parses `write`, with `known` saying which resources exist (group, version, plural).
    /// Anything else is a 400 naming the field that is wrong, or a 404 for an unknown resource.
    pub fn parse(
        write: ForwardedWrite,
        known: impl Fn(&str, &str, &str) -> Option<KnownResource>,
    ) -> Result<NodeRequest, ApiError> {
        let verb = Verb::parse(&write.verb)?;
        check_group_version(&write.group, &write.version)?;
        if !is_dns_label(&write.resource) {
            return Err(bad_field(
                "resource",
                &write.resource,
                "must be a plural resource name",
            ));
        }
        let resource = known(&write.group, &write.version, &write.resource).ok_or_else(|| {
            let what = format!("{}/{} {}", write.group, write.version, write.resource);
            ApiError::new(
                404,
                "NotFound",
                format!("the server could not find the requested resource ({what})"),
            )
        })?;
        let namespace = checked_namespace(&write.namespace, resource.namespaced)?;
        let name = checked_name(&write.name)?;
        let subresource = match &write.subresource {
            None => None,
            Some(s) => Some(Subresource::parse(s, verb, &resource)?),
        };
        if name.is_none() && (verb != Verb::Create || subresource.is_some()) {
            return Err(ApiError::bad_request(format!(
                "a {} of {} needs an object name",
                verb.as_str(),
                write.resource
            )));
        }
        let body_type = BodyType::parse(verb, write.content_type.as_deref())?;
        if let Some(named) = write
            .body
            .as_ref()
            .and_then(|b| b["metadata"]["name"].as_str())
        {
            checked_name(named)?;
        }
        Ok(NodeRequest {
            verb,
            group: write.group,
            version: write.version,
            resource: write.resource,
            namespace,
            name,
            subresource,
            body_type,
            body: write.body,
            dry_run: write.dry_run,
        })
    }

    /// The HTTP method.
    pub fn method(&self) -> &'static str {
        self.verb.method()
    }

    /// The request path, each segment escaped (`?dryRun=All` when set).
    pub fn path(&self) -> String {
        let mut path = match self.group.as_str() {
            "" => format!("/api/{}", escape(&self.version)),
            group => format!("/apis/{}/{}", escape(group), escape(&self.version)),
        };
        let mut push = |segment: &str| {
            // Writing to a String cannot fail.
            let _ = write!(path, "/{}", escape(segment));
        };
        if let Some(ns) = &self.namespace {
            push("namespaces");
            push(ns);
        }
        push(&self.resource);
        if let Some(name) = &self.name {
            push(name);
        }
        if let Some(sub) = self.subresource {
            push(sub.as_str());
        }
        if self.dry_run {
            path.push_str("?dryRun=All");
        }
        path
    }

    /// The body's media type.
    pub fn content_type(&self) -> &'static str {
        match self.body_type {
            BodyType::Json => "application/json",
            BodyType::Patch(kind) => kind.content_type(),
        }
    }

    /// The name the write is about: the path's, else the body's `metadata.name` (a create).
    pub fn object_name(&self) -> &str {
        match &self.name {
            Some(name) => name,
            None => self
                .body
                .as_ref()
                .and_then(|b| b["metadata"]["name"].as_str())
                .unwrap_or(""),
        }
    }
}

// === impl Verb ===

impl Verb {
    fn parse(verb: &str) -> Result<Verb, ApiError> {
        Ok(match verb {
            "create" => Verb::Create,
            "update" => Verb::Update,
            "patch" => Verb::Patch,
            "delete" => Verb::Delete,
            other => {
                return Err(bad_field(
                    "verb",
                    other,
                    "must be create, update, patch or delete",
                ));
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }

    pub fn method(self) -> &'static str {
        match self {
            Verb::Create => "POST",
            Verb::Update => "PUT",
            Verb::Patch => "PATCH",
            Verb::Delete => "DELETE",
        }
    }
}

// === impl Subresource ===

impl Subresource {
    /// `sub` as a subresource of `resource` that `verb` may write.
    fn parse(sub: &str, verb: Verb, resource: &KnownResource) -> Result<Subresource, ApiError> {
        let parsed = match sub {
            "status" => Subresource::Status,
            "token" => Subresource::Token,
            "binding" => Subresource::Binding,
            "eviction" => Subresource::Eviction,
            "ephemeralcontainers" => Subresource::EphemeralContainers,
            "scale" => Subresource::Scale,
            "approval" => Subresource::Approval,
            "finalize" => Subresource::Finalize,
            other => {
                return Err(bad_field(
                    "subresource",
                    other,
                    "is not a writable subresource",
                ));
            }
        };
        let custom_ok = resource.namespaced.is_none()
            && matches!(parsed, Subresource::Status | Subresource::Scale);
        if !custom_ok && !resource.subresources.iter().any(|s| s == sub) {
            return Err(bad_field(
                "subresource",
                sub,
                "is not served for this resource",
            ));
        }
        let verbs: &[Verb] = match parsed {
            Subresource::Token | Subresource::Binding | Subresource::Eviction => &[Verb::Create],
            Subresource::Finalize => &[Verb::Update],
            _ => &[Verb::Update, Verb::Patch],
        };
        if !verbs.contains(&verb) {
            return Err(ApiError::method_not_supported(verb.as_str(), sub));
        }
        Ok(parsed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Token => "token",
            Subresource::Binding => "binding",
            Subresource::Eviction => "eviction",
            Subresource::EphemeralContainers => "ephemeralcontainers",
            Subresource::Scale => "scale",
            Subresource::Approval => "approval",
            Subresource::Finalize => "finalize",
        }
    }
}

// === impl BodyType ===

impl BodyType {
    /// A patch names its patch type; every other verb sends JSON.
    fn parse(verb: Verb, content_type: Option<&str>) -> Result<BodyType, ApiError> {
        let given = content_type.unwrap_or("application/json");
        let media = given.split(';').next().unwrap_or_default().trim();
        match (verb, PatchType::from_content_type(given)) {
            (Verb::Patch, Some(kind)) => Ok(BodyType::Patch(kind)),
            (Verb::Patch, None) => Err(ApiError::unsupported_media_type(given)),
            (_, _) if media.eq_ignore_ascii_case("application/json") => Ok(BodyType::Json),
            _ => Err(ApiError::unsupported_media_type(given)),
        }
    }
}

// === impl KnownResource ===

impl KnownResource {
    /// A built-in or CRD resource, as the catalog describes it.
    pub fn of(info: &ResourceInfo) -> KnownResource {
        KnownResource {
            namespaced: Some(info.namespaced),
            subresources: info.subresources.clone(),
        }
    }
}

/// Kubernetes' rule for an object name in a path, and what fits in one: a valid path segment
/// name of printable ASCII with no `?` or `#`, at most 253 characters. Empty is `None`.
pub fn checked_name(name: &str) -> Result<Option<String>, ApiError> {
    if name.is_empty() {
        return Ok(None);
    }
    let why = if name.len() > NAME_MAX {
        Some(format!("must be no more than {NAME_MAX} characters"))
    } else if let Some(problem) = path_segment_problem(name) {
        Some(problem)
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'\\'))
    {
        Some("may contain only printable characters other than '?', '#' and '\\'".into())
    } else {
        None
    };
    match why {
        Some(why) => Err(bad_field("name", name, &why)),
        None => Ok(Some(name.to_owned())),
    }
}

/// A namespace must be a DNS-1123 label; it is required for namespaced resources and refused
/// for cluster-scoped ones (`namespaced` unknown: either is taken).
pub fn checked_namespace(
    namespace: &str,
    namespaced: Option<bool>,
) -> Result<Option<String>, ApiError> {
    match (namespace.is_empty(), namespaced) {
        (true, Some(true)) => Err(ApiError::bad_request(
            "a namespaced resource needs a namespace",
        )),
        (false, Some(false)) => Err(bad_field(
            "namespace",
            namespace,
            "must be empty for a cluster-scoped resource",
        )),
        (true, _) => Ok(None),
        (false, _) if !is_dns_label(namespace) => Err(bad_field(
            "namespace",
            namespace,
            "must be a DNS-1123 label (lowercase alphanumerics and '-', at most 63 characters)",
        )),
        (false, _) => Ok(Some(namespace.to_owned())),
    }
}

fn check_group_version(group: &str, version: &str) -> Result<(), ApiError> {
    if !group.is_empty() && !is_dns_subdomain(group) {
        return Err(bad_field("group", group, "must be a DNS-1123 subdomain"));
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let valid = version.strip_prefix('v').is_some_and(|rest| {
        let (major, pre) = match rest.find(|c: char| !c.is_ascii_digit()) {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        let pre_ok = pre.is_empty()
            || ["alpha", "beta"]
                .iter()
                .any(|tag| pre.strip_prefix(tag).is_some_and(digits));
        digits(major) && pre_ok
    });
    match valid {
        true => Ok(()),
        false => Err(bad_field(
            "version",
            version,
            "must be a Kubernetes API version (v1, v1beta1, v2alpha1)",
        )),
    }
}

fn bad_field(field: &str, value: &str, why: &str) -> ApiError {
    let shown: String = value.chars().take(80).collect();
    ApiError::bad_request(format!("forwarded write: {field} {shown:?} {why}"))
}

/// Everything but RFC 3986's unreserved characters and the two Kubernetes names use
/// (`:`, `@`) is percent-encoded in a path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':')
    .remove(b'@');

fn escape(segment: &str) -> PercentEncode<'_> {
    utf8_percent_encode(segment, SEGMENT)
}

#[cfg(test)]
mod tests;
