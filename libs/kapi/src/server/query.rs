//! Query parameters: raw pairs, and the list/watch options validated as apiserver does.

use std::time::Duration;

use apimachinery::ApiError;
use apimachinery::table::IncludeObject;

use super::error::invalid_list_options;

/// The decoded query string; repeated keys keep every value, lookups take the first.
#[derive(Clone, Debug, Default)]
pub(crate) struct Params {
    pairs: Vec<(String, String)>,
}

/// `resourceVersionMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RvMatch {
    NotOlderThan,
    Exact,
}

/// The options of a list or watch.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReadParams {
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    /// `limit`, when positive.
    pub(crate) limit: Option<usize>,
    pub(crate) continue_token: Option<String>,
    /// `resourceVersion`, when non-empty (still unparsed: `"0"` means "any").
    pub(crate) resource_version: Option<String>,
    pub(crate) rv_match: Option<RvMatch>,
    pub(crate) allow_bookmarks: bool,
    /// `timeoutSeconds`, when not 0 (a negative one is zero: the watch ends at once).
    pub(crate) timeout: Option<Duration>,
    pub(crate) send_initial_events: Option<bool>,
    pub(crate) include_object: IncludeObject,
}

/// Where a list or watch starts, from `resourceVersion` (and `resourceVersionMatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Unset or `"0"`: the current state.
    Latest,
    /// A revision the answer must not be older than.
    NotOlderThan(u64),
    /// Exactly this revision.
    Exact(u64),
}

// === impl Params ===

impl Params {
    pub(crate) fn parse(raw: Option<&str>) -> Params {
        let pairs = raw
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        Params { pairs }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean the way apiserver converts query strings: `0` and `false` (any case) are
    /// false, every other value (even empty) true.
    pub(crate) fn flag(&self, key: &str) -> Option<bool> {
        self.get(key)
            .map(|v| !(v == "0" || v.eq_ignore_ascii_case("false")))
    }

    pub(crate) fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::bad_request(format!("invalid value for {key}: {v:?} is not an integer"))
            }),
        }
    }

    /// `dryRun`: only `All` is defined.
    pub(crate) fn dry_run(&self) -> Result<bool, ApiError> {
        let mut dry = false;
        for v in self.all("dryRun") {
            if v != "All" {
                return Err(ApiError::bad_request(format!(
                    "dryRun: Unsupported value: {v:?}: supported values: \"All\""
                )));
            }
            dry = true;
        }
        Ok(dry)
    }

    /// `fieldValidation` takes kube-apiserver's values (`Strict` is checked in
    /// `openapi::check_strict`); an unknown value is refused as apiserver does.
    pub(crate) fn check_field_validation(&self) -> Result<(), ApiError> {
        match self.get("fieldValidation") {
            None | Some("") => Ok(()),
            Some(v)
                if ["Ignore", "Warn", "Strict"]
                    .iter()
                    .any(|x| x.eq_ignore_ascii_case(v)) =>
            {
                Ok(())
            }
            Some(v) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {v:?}: supported values: \"Ignore\", \"Warn\", \"Strict\""
            ))),
        }
    }
}

// === impl ReadParams ===

impl ReadParams {
    /// Parses and validates the list or watch options (422 `ListOptions` for invalid
    /// combinations, 400 for unparsable values).
    pub(crate) fn parse(p: &Params, watch: bool) -> Result<ReadParams, ApiError> {
        let non_empty = |k: &str| p.get(k).filter(|v| !v.is_empty()).map(str::to_owned);
        let rv_match = match p.get("resourceVersionMatch") {
            None | Some("") => None,
            Some("NotOlderThan") => Some(RvMatch::NotOlderThan),
            Some("Exact") => Some(RvMatch::Exact),
            Some(v) => {
                return Err(invalid_list_options(
                    "resourceVersionMatch",
                    &format!(
                        "Unsupported value: {v:?}: supported values: \"Exact\", \"NotOlderThan\""
                    ),
                ));
            }
        };
        let include_object = match p.get("includeObject") {
            None | Some("") | Some("Metadata") => IncludeObject::Metadata,
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "includeObject: Unsupported value: {v:?}: supported values: \"None\", \"Metadata\", \"Object\""
                )));
            }
        };
        let params = ReadParams {
            label_selector: non_empty("labelSelector"),
            field_selector: non_empty("fieldSelector"),
            limit: p.int("limit")?.filter(|l| *l > 0).map(|l| l as usize),
            continue_token: non_empty("continue"),
            resource_version: non_empty("resourceVersion"),
            rv_match,
            allow_bookmarks: p.flag("allowWatchBookmarks").unwrap_or(false),
            // As kube-apiserver: 0 means the server's default, a negative timeout has already
            // run out (the watch ends at once).
            timeout: p
                .int("timeoutSeconds")?
                .filter(|t| *t != 0)
                .map(|t| Duration::from_secs(t.max(0) as u64)),
            send_initial_events: p.flag("sendInitialEvents"),
            include_object,
        };
        if watch {
            params.validate_watch()?;
        } else {
            params.validate_list()?;
        }
        Ok(params)
    }

    fn validate_list(&self) -> Result<(), ApiError> {
        if self.send_initial_events.is_some() {
            return Err(invalid_list_options(
                "sendInitialEvents",
                "Forbidden: sendInitialEvents is forbidden for list",
            ));
        }
        let Some(rvm) = self.rv_match else {
            return Ok(());
        };
        if self.resource_version.is_none() {
            return Err(invalid_list_options(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if self.continue_token.is_some() {
            return Err(invalid_list_options(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if rvm == RvMatch::Exact && self.resource_version.as_deref() == Some("0") {
            return Err(invalid_list_options(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
        Ok(())
    }

    fn validate_watch(&self) -> Result<(), ApiError> {
        match (self.send_initial_events, self.rv_match) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(invalid_list_options(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )),
            (Some(_), Some(RvMatch::NotOlderThan)) if !self.allow_bookmarks => {
                Err(invalid_list_options(
                    "allowWatchBookmarks",
                    "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
                ))
            }
            (Some(_), Some(RvMatch::NotOlderThan)) => Ok(()),
            (Some(_), _) => Err(invalid_list_options(
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )),
        }
    }

    /// Where a list starts (legacy rule: `resourceVersion=N` with a `limit` and no match is
    /// `Exact`). 400 when the resourceVersion is not a number.
    pub(crate) fn list_start(&self) -> Result<Start, ApiError> {
        let Some(rv) = self.revision()? else {
            return Ok(Start::Latest);
        };
        Ok(match self.rv_match {
            Some(RvMatch::Exact) => Start::Exact(rv),
            Some(RvMatch::NotOlderThan) => Start::NotOlderThan(rv),
            None if self.limit.is_some() => Start::Exact(rv),
            None => Start::NotOlderThan(rv),
        })
    }

    /// The resourceVersion as a revision: `None` when unset or `"0"`.
    pub(crate) fn revision(&self) -> Result<Option<u64>, ApiError> {
        match self.resource_version.as_deref() {
            None | Some("0") => Ok(None),
            Some(v) => v
                .parse::<u64>()
                .map(Some)
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {v:?}"))),
        }
    }
}

#[cfg(test)]
mod tests;
