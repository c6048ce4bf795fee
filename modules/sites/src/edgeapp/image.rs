//! Image references as `[registry/]repository[:tag|@digest]`, and the image overrider's
//! operators on each component (KubeEdge's `imageOverriders`).

use std::fmt;

use super::Problem;

/// One image reference, split into the components the overrider changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ImageRef {
    /// `registry.example:5000`, when the first path segment names a host.
    pub registry: Option<String>,
    /// `library/nginx`.
    pub repository: String,
    /// `:1.25` or `@sha256:...`, with its separator.
    pub tag: Option<String>,
}

/// Which part of an image reference an overrider changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Component {
    Registry,
    Repository,
    Tag,
}

/// What an overrider does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operator {
    Add,
    Remove,
    Replace,
}

// === impl ImageRef ===

impl ImageRef {
    /// Splits `image`; an empty reference or an empty repository is refused.
    pub fn parse(image: &str) -> Result<ImageRef, Problem> {
        let image = image.trim();
        let bad = || Problem::new(format!("image {image:?} is not a valid image reference"));
        if image.is_empty() || image.contains(char::is_whitespace) {
            return Err(bad());
        }
        let (rest, digest) = match image.split_once('@') {
            Some((rest, digest)) => (rest, Some(format!("@{digest}"))),
            None => (image, None),
        };
        let (registry, path) = match rest.split_once('/') {
            Some((first, path)) if is_host(first) => (Some(first.to_owned()), path),
            _ => (None, rest),
        };
        let (repository, tag) = match (digest, path.rsplit_once(':')) {
            (Some(d), _) => (path.to_owned(), Some(d)),
            (None, Some((repo, tag))) if !tag.contains('/') => {
                (repo.to_owned(), Some(format!(":{tag}")))
            }
            (None, _) => (path.to_owned(), None),
        };
        if repository.is_empty() || tag.as_deref().is_some_and(|t| t.len() < 2) {
            return Err(bad());
        }
        Ok(ImageRef {
            registry,
            repository,
            tag,
        })
    }

    /// Applies `op` with `value` to `component`.
    pub fn apply(
        &mut self,
        component: Component,
        op: Operator,
        value: &str,
    ) -> Result<(), Problem> {
        let needs_value = matches!(op, Operator::Add | Operator::Replace);
        if needs_value && value.is_empty() {
            return Err(Problem::new(format!(
                "the image overrider's value must not be empty for {op:?}"
            )));
        }
        match (component, op) {
            (Component::Registry, Operator::Add) => {
                self.registry = Some(format!("{}{value}", self.registry.as_deref().unwrap_or("")))
            }
            (Component::Registry, Operator::Replace) => self.registry = Some(value.to_owned()),
            (Component::Registry, Operator::Remove) => self.registry = None,
            (Component::Repository, Operator::Add) => self.repository.push_str(value),
            (Component::Repository, Operator::Replace) => self.repository = value.to_owned(),
            (Component::Repository, Operator::Remove) => {
                return Err(Problem::new(
                    "an image's repository cannot be removed (an image needs one)".to_owned(),
                ));
            }
            (Component::Tag, Operator::Add) => {
                let current = self.tag.clone().unwrap_or_else(|| ":".to_owned());
                self.tag = Some(format!("{current}{value}"));
            }
            (Component::Tag, Operator::Replace) => self.tag = Some(tag_of(value)),
            (Component::Tag, Operator::Remove) => self.tag = None,
        }
        Ok(())
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(registry) = self.registry.as_deref().filter(|r| !r.is_empty()) {
            write!(f, "{registry}/")?;
        }
        write!(
            f,
            "{}{}",
            self.repository,
            self.tag.as_deref().unwrap_or("")
        )
    }
}

// === impl Component ===

impl Component {
    /// `Registry`, `Repository` or `Tag` in any letter case (KubeEdge's own proposal writes
    /// `registry`).
    pub fn parse(s: &str) -> Result<Component, Problem> {
        match s.to_ascii_lowercase().as_str() {
            "registry" => Ok(Component::Registry),
            "repository" => Ok(Component::Repository),
            "tag" => Ok(Component::Tag),
            _ => Err(Problem::new(format!(
                "image component {s:?} is not one of Registry, Repository, Tag"
            ))),
        }
    }
}

// === impl Operator ===

impl Operator {
    /// `add`, `remove` or `replace` in any letter case.
    pub fn parse(s: &str) -> Result<Operator, Problem> {
        match s.to_ascii_lowercase().as_str() {
            "add" => Ok(Operator::Add),
            "remove" => Ok(Operator::Remove),
            "replace" => Ok(Operator::Replace),
            _ => Err(Problem::new(format!(
                "operator {s:?} is not one of add, remove, replace"
            ))),
        }
    }
}

/// Whether an image's first path segment is a registry host (Docker's rule: it has a dot or
/// a port, or is `localhost`).
fn is_host(segment: &str) -> bool {
    segment.contains('.') || segment.contains(':') || segment == "localhost"
}

/// A tag or digest value as its suffix: `1.2` as `:1.2`, `sha256:..` or `@sha256:..` as a
/// digest.
fn tag_of(value: &str) -> String {
    if value.starts_with('@') || value.starts_with(':') {
        value.to_owned()
    } else if value.contains(':') {
        format!("@{value}")
    } else {
        format!(":{value}")
    }
}
