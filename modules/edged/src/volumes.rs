//! A pod's volumes on the host, under `<rootDirectory>/pods/<uid>/volumes/<kind>/<name>`, and
//! the mounts of a container. configMap, secret, downwardAPI and projected volumes are written
//! the way the kubelet's atomic writer does: the files live in a timestamped directory that a
//! `..data` symlink points at, each top-level name is a symlink through `..data`, and an update
//! writes a new directory and swaps `..data` with one `rename`, so a running container sees the
//! old files or the new ones, never a mix.

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use cri::api;
use k8s_openapi::api::core::v1::{Container, DownwardAPIVolumeFile, KeyToPath, Pod, Volume};

use crate::env::{self, Placement, Refs};
use crate::error::EdgedError;

/// The files of one volume: relative path → (content, mode).
pub type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// How a volume is provided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A directory edged owns (emptyDir).
    Dir,
    /// A host path, as is.
    Host(PathBuf),
    /// Files written atomically (configMap, secret, downwardAPI, projected).
    Files(Files),
}

/// The directory volume `name` of pod `uid` lives in.
pub fn volume_dir(root: &Path, uid: &str, kind: &str, name: &str) -> PathBuf {
    root.join("pods")
        .join(uid)
        .join("volumes")
        .join(kind)
        .join(name)
}

/// What each volume of the pod provides, by volume name (pure).
pub fn sources(
    pod: &Pod,
    refs: &Refs,
    at: &Placement,
) -> Result<BTreeMap<String, (&'static str, Source)>, EdgedError> {
    let mut out = BTreeMap::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        out.insert(v.name.clone(), source(pod, v, refs, at)?);
    }
    Ok(out)
}

fn source(
    pod: &Pod,
    v: &Volume,
    refs: &Refs,
    at: &Placement,
) -> Result<(&'static str, Source), EdgedError> {
    let failed = |what: String| {
        EdgedError::pod(
            "ContainerCreating",
            format!("MountVolume.SetUp failed for volume \"{}\": {what}", v.name),
        )
    };
    if v.empty_dir.is_some() {
        return Ok(("empty-dir", Source::Dir));
    }
    if let Some(h) = &v.host_path {
        return Ok(("host-path", Source::Host(PathBuf::from(&h.path))));
    }
    let keyed = |name: &str, secret, items: &Option<Vec<KeyToPath>>, optional, mode| {
        keyed(refs, name, secret, items.as_deref(), mode, optional).map_err(failed)
    };
    let downward = |items: &Option<Vec<DownwardAPIVolumeFile>>, mode| {
        downward(pod, items.as_deref().unwrap_or_default(), mode, at).map_err(failed)
    };
    let mode_of = |m: Option<i32>| m.map_or(0o644, |m| m as u32);
    if let Some(cm) = &v.config_map {
        let mode = mode_of(cm.default_mode);
        let files = keyed(&cm.name, false, &cm.items, cm.optional, mode)?;
        return Ok(("configmap", Source::Files(files)));
    }
    if let Some(sec) = &v.secret {
        let name = sec.secret_name.as_deref().unwrap_or_default();
        let files = keyed(
            name,
            true,
            &sec.items,
            sec.optional,
            mode_of(sec.default_mode),
        )?;
        return Ok(("secret", Source::Files(files)));
    }
    if let Some(d) = &v.downward_api {
        let files = downward(&d.items, mode_of(d.default_mode))?;
        return Ok(("downward-api", Source::Files(files)));
    }
    if let Some(p) = &v.projected {
        let mode = mode_of(p.default_mode);
        let mut files = Files::new();
        for s in p.sources.iter().flatten() {
            if let Some(cm) = &s.config_map {
                files.extend(keyed(&cm.name, false, &cm.items, cm.optional, mode)?);
            }
            if let Some(sec) = &s.secret {
                files.extend(keyed(&sec.name, true, &sec.items, sec.optional, mode)?);
            }
            if let Some(d) = &s.downward_api {
                files.extend(downward(&d.items, mode)?);
            }
            if let Some(t) = &s.service_account_token {
                let key = crate::tokens::key(pod, t);
                let token = refs.tokens.get(&key).ok_or_else(|| {
                    failed(format!(
                        "no token for service account \"{}\" yet (TokenRequest)",
                        key.account
                    ))
                })?;
                files.insert(checked(&t.path).map_err(failed)?, (token.clone(), mode));
            }
        }
        return Ok(("projected", Source::Files(files)));
    }
    Err(failed("this volume type is not supported by edged".into()))
}

/// The files of downward-API items (pod fields; each item's mode or `mode`).
fn downward(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    mode: u32,
    at: &Placement,
) -> Result<Files, String> {
    let mut files = Files::new();
    for item in items {
        if let Some(f) = &item.field_ref {
            let value = env::field_value(pod, &f.field_path, at);
            let mode = item.mode.map_or(mode, |m| m as u32);
            files.insert(checked(&item.path)?, (value.into_bytes(), mode));
        }
    }
    Ok(files)
}

/// The files of a configmap or secret volume: every key, or the listed items.
fn keyed(
    refs: &Refs,
    name: &str,
    secret: bool,
    items: Option<&[KeyToPath]>,
    mode: u32,
    optional: Option<bool>,
) -> Result<Files, String> {
    let kind = if secret { "secret" } else { "configmap" };
    let obj = if secret {
        refs.secrets.get(name)
    } else {
        refs.configmaps.get(name)
    };
    let Some(obj) = obj else {
        return if optional.unwrap_or(false) {
            Ok(Files::new())
        } else {
            Err(format!("{kind} \"{name}\" not found"))
        };
    };
    let mut data = env::data(obj, secret);
    let mut files = Files::new();
    match items {
        None => {
            for (k, v) in data {
                files.insert(checked(&k)?, (v, mode));
            }
        }
        Some(items) => {
            for item in items {
                let Some(v) = data.remove(&item.key) else {
                    if optional.unwrap_or(false) {
                        continue;
                    }
                    return Err(format!("{kind} \"{name}\" has no key \"{}\"", item.key));
                };
                let mode = item.mode.map_or(mode, |m| m as u32);
                files.insert(checked(&item.path)?, (v, mode));
            }
        }
    }
    Ok(files)
}

/// A file name from the API, refused if it could leave the volume.
fn checked(path: &str) -> Result<String, String> {
    match apimachinery::configdata::volume_path_problem(path) {
        Some(problem) => Err(format!("file path {path:?} {problem}")),
        None => Ok(path.to_string()),
    }
}

/// Makes volume `name` exist on disk (writing its files if they changed); returns its path.
pub fn set_up(
    root: &Path,
    uid: &str,
    name: &str,
    kind: &str,
    source: &Source,
) -> Result<PathBuf, EdgedError> {
    let dir = volume_dir(root, uid, kind, name);
    match source {
        Source::Host(path) => Ok(path.clone()),
        Source::Dir => {
            mkdir(&dir)?;
            Ok(dir)
        }
        Source::Files(files) => {
            write_atomic(&dir, files)?;
            Ok(dir)
        }
    }
}

/// The CRI mounts of container `c`, given where each volume is.
pub fn mounts(
    c: &Container,
    paths: &BTreeMap<String, (PathBuf, bool)>,
) -> Result<Vec<api::Mount>, EdgedError> {
    let mut out = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some((host, files)) = paths.get(&m.name) else {
            return Err(EdgedError::pod(
                "CreateContainerConfigError",
                format!("volume mount {:?} names no volume of the pod", m.name),
            ));
        };
        let mut host_path = host.clone();
        if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            let sub = checked(sub).map_err(|e| {
                EdgedError::pod("CreateContainerConfigError", format!("subPath: {e}"))
            })?;
            host_path = host_path.join(sub);
        }
        out.push(api::Mount {
            container_path: m.mount_path.clone(),
            host_path: host_path.to_string_lossy().into_owned(),
            readonly: m.read_only.unwrap_or(false) || *files,
            ..Default::default()
        });
    }
    Ok(out)
}

/// Removes every volume of pod `uid` (after its containers are gone).
pub fn tear_down(root: &Path, uid: &str) -> Result<(), EdgedError> {
    let dir = root.join("pods").join(uid);
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing", &dir, e)),
        _ => Ok(()),
    }
}

/// Writes `files` into `dir` as the kubelet's atomic writer does; does nothing when they are
/// already there.
pub fn write_atomic(dir: &Path, files: &Files) -> Result<(), EdgedError> {
    mkdir(dir)?;
    let data = dir.join("..data");
    if current_files(&data).as_ref() == Some(files) {
        return Ok(());
    }
    let stamp = format!("..{}", unique_suffix());
    let fresh = dir.join(&stamp);
    for (path, (content, mode)) in files {
        let file = fresh.join(path);
        if let Some(parent) = file.parent() {
            mkdir(parent)?;
        }
        std::fs::write(&file, content).map_err(|e| io("writing", &file, e))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(*mode))
            .map_err(|e| io("setting the mode of", &file, e))?;
    }
    mkdir(&fresh)?;
    let old = std::fs::read_link(&data).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(&stamp, &tmp).map_err(|e| io("linking", &tmp, e))?;
    std::fs::rename(&tmp, &data).map_err(|e| io("swapping", &data, e))?;
    let tops: std::collections::BTreeSet<&str> = files
        .keys()
        .map(|p| p.split('/').next().unwrap_or(p))
        .collect();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(top), &link).map_err(|e| io("linking", &link, e))?;
        }
    }
    for entry in std::fs::read_dir(dir)
        .map_err(|e| io("reading", dir, e))?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !tops.contains(name.as_str()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old.filter(|o| o.as_os_str() != stamp.as_str()) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

/// The files under `data` (following the `..data` link), or `None` if there are none yet.
fn current_files(data: &Path) -> Option<Files> {
    let base = std::fs::canonicalize(data).ok()?;
    let mut files = Files::new();
    let mut stack = vec![base.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            let meta = entry.metadata().ok()?;
            if meta.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(&base)
                .ok()?
                .to_string_lossy()
                .into_owned();
            let content = std::fs::read(&path).ok()?;
            files.insert(rel, (content, meta.permissions().mode() & 0o7777));
        }
    }
    Some(files)
}

fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{}_{}.{}",
        t.as_secs(),
        t.subsec_nanos(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn mkdir(dir: &Path) -> Result<(), EdgedError> {
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))
}

fn io(what: &'static str, path: &Path, source: std::io::Error) -> EdgedError {
    EdgedError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn files(pairs: &[(&str, &str)]) -> Files {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), (v.as_bytes().to_vec(), 0o644)))
            .collect()
    }

    #[test]
    fn an_update_swaps_the_data_link_and_drops_removed_keys() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        write_atomic(&dir, &files(&[("a", "1"), ("b", "2")])).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "1");
        let first = std::fs::read_link(dir.join("..data")).unwrap();
        write_atomic(&dir, &files(&[("a", "1"), ("b", "2")])).unwrap();
        assert_eq!(
            std::fs::read_link(dir.join("..data")).unwrap(),
            first,
            "unchanged: not rewritten"
        );
        write_atomic(&dir, &files(&[("a", "3")])).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "3");
        assert!(!dir.join("b").exists());
        assert!(!dir.join(first).exists(), "the old generation is removed");
        assert_eq!(
            std::fs::read_link(dir.join("a")).unwrap(),
            Path::new("..data/a")
        );
    }

    #[test]
    fn items_modes_and_missing_sources_follow_the_pod_spec() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [], "volumes": [
                {"name": "cfg", "configMap": {"name": "cm", "items": [{"key": "k", "path": "dir/k.conf", "mode": 0o600}]}},
                {"name": "opt", "secret": {"secretName": "absent", "optional": true}},
            ]},
        }))
        .unwrap();
        let refs = Refs {
            configmaps: [("cm".into(), json!({"data": {"k": "v", "other": "x"}}))].into(),
            ..Refs::default()
        };
        let s = sources(&pod, &refs, &Placement::default()).unwrap();
        let Source::Files(f) = &s["cfg"].1 else {
            panic!()
        };
        assert_eq!(f.len(), 1);
        assert_eq!(f["dir/k.conf"], (b"v".to_vec(), 0o600));
        assert_eq!(s["opt"].1, Source::Files(Files::new()));

        let e = sources(&pod, &Refs::default(), &Placement::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ContainerCreating: MountVolume.SetUp failed for volume \"cfg\": configmap \"cm\" not found"
        );
    }

    #[test]
    fn a_key_that_would_leave_the_volume_is_refused() {
        let refs = Refs {
            configmaps: [("cm".into(), json!({"data": {"../x": "v"}}))].into(),
            ..Refs::default()
        };
        assert!(keyed(&refs, "cm", false, None, 0o644, None).is_err());
    }
}
