//! Registry credentials for an image pull, taken from the pod's `imagePullSecrets` the way the
//! kubelet's keyring picks them (`pkg/credentialprovider`). Pure: the secrets come in as the
//! JSON objects the API returns, and nothing here does I/O.
//!
//! Each key of a secret's `auths` map names a registry, optionally with a scheme, a port, an
//! API version (`/v1/`, `/v2/`, ignored) and a repository path. A key matches an image when:
//! - the ports are equal (both absent, or the same number);
//! - the hosts have as many dot-separated labels, and each label of the key matches the
//!   image's, where `*` stands for any run of characters within one label (`*.example.com`
//!   matches `a.example.com` but neither `example.com` nor `a.b.example.com`; `reg-*.local`
//!   matches `reg-1.local`);
//! - the key's path, if any, is a whole-segment prefix of the image's repository path
//!   (`registry.local/team` matches `registry.local/team/app`, not `registry.local/teamx`).
//!
//! Images without a registry, and keys for `docker.io`, `index.docker.io` or
//! `https://index.docker.io/v1/`, all mean Docker Hub, where a one-segment name is under
//! `library/`. Among the matching keys of all secrets the most specific wins: the longer path,
//! then an exact host over a wildcard; on a tie the pod's order of secrets decides. The kubelet
//! merges the secrets the same way and tries every match in that order until a pull succeeds;
//! edged sends only the first of them.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use cri::api::AuthConfig;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value};

/// The registry images without one come from, as this module names it.
const DOCKER_HUB: &str = "docker.io";
/// Docker Hub's other name, used by `docker login` in its config keys.
const DOCKER_HUB_INDEX: &str = "index.docker.io";
/// Base64 as Secrets and `auth` fields carry it; padding is accepted but not required.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The credentials to pull `image` (as a pod spec writes it) with, from the pod's pull
/// `secrets` in the pod's order; `None` when no secret has an entry for the image's registry.
///
/// Only secrets of type `kubernetes.io/dockerconfigjson` (`data[".dockerconfigjson"]`, an
/// `{"auths": {..}}` document) and `kubernetes.io/dockercfg` (`data[".dockercfg"]`, the map
/// itself) count. An entry's `username`/`password` are used as they are; when the username is
/// absent they come from `auth` (base64 `user:password`). `identitytoken` and `registrytoken`
/// are passed on. Malformed secrets and entries, and entries with no credential in them, are
/// skipped.
///
/// `server_address` is left empty, as the kubelet leaves it: containerd drops credentials whose
/// `server_address` does not parse as a URL with the very host it is talking to, which for
/// Docker Hub is `registry-1.docker.io` and, behind a mirror, the mirror.
pub(crate) fn auth_for(image: &str, secrets: &[Value]) -> Option<AuthConfig> {
    let image = ImageRef::parse(image)?;
    let mut best: Option<(Rank, AuthConfig)> = None;
    for auths in secrets.iter().filter_map(registry_auths) {
        for (key, entry) in &auths {
            let Some(rank) = RegistryKey::parse(key).and_then(|k| k.rank(&image)) else {
                continue;
            };
            if best.as_ref().is_some_and(|(held, _)| *held >= rank) {
                continue;
            }
            if let Some(auth) = credential(entry) {
                best = Some((rank, auth));
            }
        }
    }
    best.map(|(_, auth)| auth)
}

/// The names of the pod's `imagePullSecrets`, in its order, without empty names.
pub(crate) fn pull_secret_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|spec| spec.image_pull_secrets.iter().flatten())
        .filter(|r| !r.name.is_empty())
        .map(|r| r.name.clone())
        .collect()
}

/// An image reference as registries see it.
#[derive(Debug, PartialEq)]
struct ImageRef {
    /// The registry, lowercase, with its port if any; Docker Hub is [`DOCKER_HUB`].
    host: String,
    /// The repository path without tag or digest, e.g. `library/busybox`.
    path: String,
}

/// One `auths` key, normalised.
#[derive(Debug, PartialEq)]
struct RegistryKey {
    /// The registry host pattern, lowercase, with its port if any.
    host: String,
    /// The repository path segments the key is limited to (none: the whole registry).
    path: Vec<String>,
}

/// How specifically a key matches an image; greater is more specific.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    /// Segments of repository path the key names.
    path_segments: usize,
    /// The key names the host exactly rather than by a wildcard.
    exact_host: bool,
}

// === impl ImageRef ===

impl ImageRef {
    /// Splits `image` as Docker does: the first segment is a registry when it has a `.` or a
    /// `:`, is `localhost`, or is not lowercase; otherwise the image is on Docker Hub.
    fn parse(image: &str) -> Option<ImageRef> {
        let name = image.trim();
        let name = name.split_once('@').map_or(name, |(name, _digest)| name);
        let (host, rest) = match name.split_once('/') {
            Some((first, rest)) if is_registry(first) => (canonical_host(first), rest),
            _ => (DOCKER_HUB.to_string(), name),
        };
        let rest = match rest.rfind(':') {
            Some(i) if !rest[i..].contains('/') => &rest[..i],
            _ => rest,
        };
        if rest.is_empty() || rest.split('/').any(str::is_empty) {
            return None;
        }
        let path = if host == DOCKER_HUB && !rest.contains('/') {
            format!("library/{rest}")
        } else {
            rest.to_string()
        };
        Some(ImageRef { host, path })
    }
}

// === impl RegistryKey ===

impl RegistryKey {
    /// Parses a key such as `registry.local:5000`, `https://index.docker.io/v1/` or
    /// `registry.local/team`; `None` when it names no host.
    fn parse(key: &str) -> Option<RegistryKey> {
        let key = key.trim();
        let key = key.split_once("://").map_or(key, |(_scheme, rest)| rest);
        let key = key.split(['?', '#']).next().unwrap_or_default();
        let (host, path) = key.split_once('/').unwrap_or((key, ""));
        let host = host.rsplit_once('@').map_or(host, |(_user, host)| host);
        if host.is_empty() {
            return None;
        }
        let mut path: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if path.first().is_some_and(|s| s == "v1" || s == "v2") {
            path.remove(0);
        }
        Some(RegistryKey {
            host: canonical_host(host),
            path,
        })
    }

    /// How specifically this key matches `image`; `None` when it does not.
    fn rank(&self, image: &ImageRef) -> Option<Rank> {
        let (key_host, key_port) = split_port(&self.host);
        let (image_host, image_port) = split_port(&image.host);
        if key_port != image_port {
            return None;
        }
        let key_labels: Vec<&str> = key_host.split('.').collect();
        let image_labels: Vec<&str> = image_host.split('.').collect();
        if key_labels.len() != image_labels.len() {
            return None;
        }
        if !key_labels
            .iter()
            .zip(&image_labels)
            .all(|(k, i)| glob(k, i))
        {
            return None;
        }
        let mut image_path = image.path.split('/');
        if !self
            .path
            .iter()
            .all(|k| image_path.next() == Some(k.as_str()))
        {
            return None;
        }
        Some(Rank {
            path_segments: self.path.len(),
            exact_host: !key_host.contains('*'),
        })
    }
}

/// The `auths` map of a pull secret; `None` for a secret of another type or a malformed one.
fn registry_auths(secret: &Value) -> Option<Map<String, Value>> {
    let (data_key, nested) = match secret.get("type")?.as_str()? {
        "kubernetes.io/dockerconfigjson" => (".dockerconfigjson", true),
        "kubernetes.io/dockercfg" => (".dockercfg", false),
        _ => return None,
    };
    let encoded = secret.get("data")?.get(data_key)?.as_str()?;
    let mut config: Value = serde_json::from_slice(&BASE64.decode(encoded.trim()).ok()?).ok()?;
    let auths = if nested {
        config.get_mut("auths")?.take()
    } else {
        config
    };
    match auths {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// The credentials in one `auths` entry; `None` when it holds none that can be used.
fn credential(entry: &Value) -> Option<AuthConfig> {
    let field = |name: &str| {
        entry
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut auth = AuthConfig {
        username: field("username"),
        password: field("password"),
        identity_token: field("identitytoken"),
        registry_token: field("registrytoken"),
        ..AuthConfig::default()
    };
    if auth.username.is_empty()
        && let Some((username, password)) = decode_auth(&field("auth"))
    {
        auth.username = username;
        auth.password = password;
    }
    let usable = !auth.username.is_empty()
        || !auth.identity_token.is_empty()
        || !auth.registry_token.is_empty();
    usable.then_some(auth)
}

/// Splits an `auth` field (base64 `user:password`); trailing NULs are dropped from the password
/// as containerd drops them.
fn decode_auth(auth: &str) -> Option<(String, String)> {
    if auth.is_empty() {
        return None;
    }
    let decoded = String::from_utf8(BASE64.decode(auth.trim()).ok()?).ok()?;
    let (username, password) = decoded.split_once(':')?;
    Some((
        username.to_string(),
        password.trim_matches('\0').to_string(),
    ))
}

/// Whether the first segment of an image name is a registry rather than a Docker Hub user.
fn is_registry(segment: &str) -> bool {
    segment.contains(['.', ':'])
        || segment == "localhost"
        || segment.chars().any(|c| c.is_ascii_uppercase())
}

/// `host` in lowercase, with Docker Hub's other name folded into [`DOCKER_HUB`].
fn canonical_host(host: &str) -> String {
    let host = host.to_ascii_lowercase();
    match host.strip_prefix(DOCKER_HUB_INDEX) {
        Some(port) if port.is_empty() || port.starts_with(':') => format!("{DOCKER_HUB}{port}"),
        _ => host,
    }
}

/// Splits `host:port` (`[v6]:port` included); the port is `None` when there is none.
fn split_port(host: &str) -> (&str, Option<&str>) {
    match host.rsplit_once(':') {
        Some((name, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!name.contains(':') || name.ends_with(']')) =>
        {
            (name, Some(port))
        }
        _ => (host, None),
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters. (A `?` in a
/// key would start a URL query, as it does for the kubelet, so it is no wildcard here.)
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and the text position it is currently taken to end at.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    star = Some((sp, st + 1));
                    pi = sp + 1;
                    ti = st + 1;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    /// A `kubernetes.io/dockerconfigjson` secret holding `auths`.
    fn config_json(auths: Value) -> Value {
        let config = json!({ "auths": auths }).to_string();
        json!({
            "type": "kubernetes.io/dockerconfigjson",
            "data": { ".dockerconfigjson": b64(&config) },
        })
    }

    /// A `kubernetes.io/dockerconfigjson` secret with one user for each of `keys`, the user
    /// named after the key.
    fn users(keys: &[&str]) -> Value {
        let auths: Map<String, Value> = keys
            .iter()
            .map(|k| (k.to_string(), json!({"username": k, "password": "pw"})))
            .collect();
        config_json(Value::Object(auths))
    }

    /// The username `auth_for` picks for `image`, if any.
    fn user_for(image: &str, secrets: &[Value]) -> Option<String> {
        auth_for(image, secrets).map(|a| a.username)
    }

    #[test]
    fn image_references_split_into_registry_and_repository() {
        let cases = [
            ("busybox", "docker.io", "library/busybox"),
            ("busybox:1.36", "docker.io", "library/busybox"),
            ("team/app", "docker.io", "team/app"),
            (
                "docker.io/library/nginx@sha256:abcd",
                "docker.io",
                "library/nginx",
            ),
            ("index.docker.io/team/app:v1", "docker.io", "team/app"),
            (
                "registry.local:5000/team/app:1.2",
                "registry.local:5000",
                "team/app",
            ),
            ("Registry.Local/app", "registry.local", "app"),
            ("localhost/app", "localhost", "app"),
            ("localhost:5000/app:v1@sha256:ef", "localhost:5000", "app"),
            ("[::1]:5000/app", "[::1]:5000", "app"),
        ];
        for (image, host, path) in cases {
            let want = ImageRef {
                host: host.into(),
                path: path.into(),
            };
            assert_eq!(ImageRef::parse(image), Some(want), "{image}");
        }
        for bad in ["", "registry.local/", "a//b", "@sha256:ab", ":tag"] {
            assert_eq!(ImageRef::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn keys_lose_scheme_api_version_and_trailing_slashes() {
        let cases = [
            ("https://index.docker.io/v1/", "docker.io", vec![]),
            (
                "http://registry.local:5000/v2/",
                "registry.local:5000",
                vec![],
            ),
            ("Registry.Local/team/", "registry.local", vec!["team"]),
            (
                "https://registry.local/v1/team/app",
                "registry.local",
                vec!["team", "app"],
            ),
            ("user@registry.local?x=1", "registry.local", vec![]),
        ];
        for (key, host, path) in cases {
            let want = RegistryKey {
                host: host.into(),
                path: path.into_iter().map(String::from).collect(),
            };
            assert_eq!(RegistryKey::parse(key), Some(want), "{key}");
        }
        assert_eq!(RegistryKey::parse("https:///team"), None);
        assert_eq!(RegistryKey::parse(""), None);
    }

    #[test]
    fn every_name_of_docker_hub_matches_an_unqualified_image() {
        for key in [
            "docker.io",
            "index.docker.io",
            "https://index.docker.io/v1/",
        ] {
            let secrets = [users(&[key])];
            for image in ["busybox", "team/app:1", "docker.io/library/busybox"] {
                assert_eq!(
                    user_for(image, &secrets).as_deref(),
                    Some(key),
                    "{key} {image}"
                );
            }
            assert_eq!(user_for("quay.io/team/app", &secrets), None, "{key}");
        }
    }

    #[test]
    fn a_private_registry_matches_by_host_and_port() {
        let secrets = [users(&["registry.local:5000"])];
        assert!(user_for("registry.local:5000/team/app:1.2", &secrets).is_some());
        assert!(user_for("registry.local/team/app", &secrets).is_none());
        assert!(user_for("registry.local:5001/team/app", &secrets).is_none());
        assert!(user_for("other.local:5000/team/app", &secrets).is_none());
        assert!(user_for("busybox", &secrets).is_none());
        let no_port = [users(&["https://registry.local"])];
        assert!(user_for("registry.local/app", &no_port).is_some());
        assert!(user_for("registry.local:5000/app", &no_port).is_none());
    }

    #[test]
    fn a_key_with_a_path_matches_only_images_under_that_path() {
        let secrets = [users(&["registry.local/team"])];
        assert!(user_for("registry.local/team/app", &secrets).is_some());
        assert!(user_for("registry.local/team/sub/app:1", &secrets).is_some());
        assert!(user_for("registry.local/teamx/app", &secrets).is_none());
        assert!(user_for("registry.local/other/app", &secrets).is_none());
        let hub = [users(&["docker.io/library"])];
        assert!(user_for("busybox", &hub).is_some());
        assert!(user_for("team/app", &hub).is_none());
    }

    #[test]
    fn the_longest_matching_path_wins() {
        let secrets = [users(&[
            "registry.local",
            "registry.local/team/app",
            "registry.local/team",
        ])];
        let user = |image| user_for(image, &secrets);
        assert_eq!(
            user("registry.local/team/app:1").unwrap(),
            "registry.local/team/app"
        );
        assert_eq!(
            user("registry.local/team/web").unwrap(),
            "registry.local/team"
        );
        assert_eq!(user("registry.local/other").unwrap(), "registry.local");
    }

    #[test]
    fn a_wildcard_matches_one_label_and_loses_to_an_exact_host() {
        let wild = [users(&["*.example.com"])];
        assert!(user_for("a.example.com/app", &wild).is_some());
        assert!(user_for("example.com/app", &wild).is_none());
        assert!(user_for("a.b.example.com/app", &wild).is_none());
        assert!(user_for("a.example.org/app", &wild).is_none());
        let partial = [users(&["reg-*.example.*"])];
        assert!(user_for("reg-1.example.com/app", &partial).is_some());
        assert!(user_for("reg.example.com/app", &partial).is_none());
        let both = [users(&["*.example.com", "a.example.com"])];
        assert_eq!(
            user_for("a.example.com/app", &both).unwrap(),
            "a.example.com"
        );
        assert_eq!(
            user_for("b.example.com/app", &both).unwrap(),
            "*.example.com"
        );
        let deeper = [users(&["a.example.com", "*.example.com/team"])];
        assert_eq!(
            user_for("a.example.com/team/x", &deeper).unwrap(),
            "*.example.com/team"
        );
    }

    #[test]
    fn secrets_count_in_the_pods_order_when_equally_specific() {
        let first = config_json(json!({"registry.local": {"username": "first"}}));
        let second = config_json(json!({"registry.local": {"username": "second"}}));
        let narrower = config_json(json!({"registry.local/team": {"username": "narrower"}}));
        let secrets = [first, second, narrower];
        assert_eq!(user_for("registry.local/app", &secrets).unwrap(), "first");
        assert_eq!(
            user_for("registry.local/team/app", &secrets).unwrap(),
            "narrower"
        );
    }

    #[test]
    fn auth_fills_username_and_password_only_when_absent() {
        let secrets = [config_json(json!({
            "a.local": {"auth": b64("alice:s3cr:et")},
            "b.local": {"username": "bob", "password": "pw", "auth": b64("eve:other")},
            "c.local": {"auth": b64("carol:pw\0\0")},
        }))];
        let a = auth_for("a.local/app", &secrets).unwrap();
        assert_eq!(
            (a.username.as_str(), a.password.as_str()),
            ("alice", "s3cr:et")
        );
        assert!(a.auth.is_empty() && a.server_address.is_empty());
        let b = auth_for("b.local/app", &secrets).unwrap();
        assert_eq!((b.username.as_str(), b.password.as_str()), ("bob", "pw"));
        let c = auth_for("c.local/app", &secrets).unwrap();
        assert_eq!(c.password, "pw");
    }

    #[test]
    fn tokens_are_passed_on() {
        let secrets = [config_json(json!({
            "registry.local": {"identitytoken": "id-tok", "registrytoken": "reg-tok"},
        }))];
        let auth = auth_for("registry.local/app", &secrets).unwrap();
        assert_eq!(auth.identity_token, "id-tok");
        assert_eq!(auth.registry_token, "reg-tok");
        assert!(auth.username.is_empty());
    }

    #[test]
    fn a_legacy_dockercfg_secret_holds_the_map_directly() {
        let cfg = json!({"https://registry.local": {"auth": b64("old:pw"), "email": "x@y"}});
        let secret = json!({
            "type": "kubernetes.io/dockercfg",
            "data": { ".dockercfg": b64(&cfg.to_string()) },
        });
        assert_eq!(user_for("registry.local/app", &[secret]).unwrap(), "old");
    }

    #[test]
    fn malformed_secrets_and_entries_are_skipped() {
        let good = users(&["registry.local"]);
        let encoded = |text: &str| json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64(text)}});
        let bad = [
            json!(null),
            json!("a string"),
            json!({"type": "Opaque", "data": {".dockerconfigjson": b64("{}")}}),
            json!({"type": "kubernetes.io/dockerconfigjson"}),
            json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockercfg": b64("{}")}}),
            json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "%%%"}}),
            json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": 7}}),
            encoded("not json"),
            encoded("[1, 2]"),
            encoded(r#"{"auths": "registry.local"}"#),
            encoded(r#"{"registry.local": {"username": "x"}}"#),
            config_json(json!({
                "registry.local": {},
                "registry.local/team": {"auth": "%%%"},
                "registry.local/team/app": {"auth": b64("no-colon")},
                "registry.local/team/app/x": "not an object",
                "": {"username": "no host"},
            })),
        ];
        for secret in &bad {
            assert_eq!(
                user_for("registry.local/team/app/x", std::slice::from_ref(secret)),
                None,
                "{secret}"
            );
        }
        let mut secrets = bad.to_vec();
        secrets.push(good);
        assert_eq!(
            user_for("registry.local/team/app/x", &secrets).unwrap(),
            "registry.local"
        );
        assert_eq!(auth_for("", &secrets), None);
    }

    #[test]
    fn unpadded_base64_is_accepted() {
        let config =
            json!({"auths": {"registry.local": {"auth": b64("u:p").trim_end_matches('=')}}});
        let data = b64(&config.to_string());
        let secret = json!({
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": data.trim_end_matches('=')},
        });
        assert_eq!(user_for("registry.local/app", &[secret]).unwrap(), "u");
    }

    #[test]
    fn globs_match_within_a_label() {
        assert!(glob("*", "anything"));
        assert!(glob("*", ""));
        assert!(glob("a*c", "abbbc"));
        assert!(glob("a*b*c", "a-b-x-c"));
        assert!(glob("?x", "?x"));
        assert!(!glob("?x", "yx"), "a ? is no wildcard");
        assert!(!glob("a*c", "abd"));
        assert!(!glob("abc", "ab"));
    }

    #[test]
    fn pull_secret_names_keep_the_pods_order() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "imagePullSecrets": [{"name": "b"}, {"name": ""}, {"name": "a"}],
            },
        }))
        .unwrap();
        assert_eq!(pull_secret_names(&pod), ["b", "a"]);
        assert!(pull_secret_names(&Pod::default()).is_empty());
    }
}
