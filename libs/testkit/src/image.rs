//! Container images made at test time, with no registry: a docker-archive tar (what
//! `ctr images import` and `docker load` read) whose one layer is the host's static busybox.

use std::io;
use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

/// Where the host's busybox is; Debian's `busybox-static` puts a static build there.
pub const HOST_BUSYBOX: &str = "/bin/busybox";

/// The applets linked to busybox in `/bin` (`trap` is a shell builtin; `tar` is what
/// `kubectl cp` runs in the container; `yes` and `head` write streambench's big log and file).
const APPLETS: &[&str] = &[
    "sh",
    "sleep",
    "echo",
    "cat",
    "ls",
    "date",
    "env",
    "hostname",
    "true",
    "false",
    "wget",
    "nc",
    "httpd",
    "mkdir",
    "touch",
    "test",
    "kill",
    "tar",
    "sha256sum",
    "yes",
    "head",
];
/// The top-level directories of the root filesystem.
const DIRS: &[(&str, u32)] = &[
    ("bin", 0o755),
    ("tmp", 0o1777),
    ("etc", 0o755),
    ("proc", 0o755),
    ("sys", 0o755),
    ("dev", 0o755),
];
/// Every entry's mtime, so the same inputs give the same digests.
const MTIME: u64 = 1_767_225_600; // 2026-01-01T00:00:00Z

/// Writes to `out` a docker-archive image named `reference` (`registry.local/x:1`) that runs
/// `cmd` with `PATH=/bin`, its root filesystem the host's static busybox and its applets.
pub fn busybox_archive(out: &Path, reference: &str, cmd: &[&str]) -> io::Result<()> {
    let layer = busybox_layer()?;
    let layer_digest = sha256_hex(&layer);
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "created": "2026-01-01T00:00:00Z",
        "config": { "Cmd": cmd, "Env": ["PATH=/bin"] },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer_digest}")] },
        "history": [{ "created": "2026-01-01T00:00:00Z", "created_by": "testkit::image" }],
    }))?;
    let config_name = format!("{}.json", sha256_hex(&config));
    let layer_name = format!("{layer_digest}/layer.tar");
    let manifest = serde_json::to_vec(&json!([{
        "Config": config_name,
        "RepoTags": [reference],
        "Layers": [layer_name],
    }]))?;
    let mut archive = tar::Builder::new(std::fs::File::create(out)?);
    append_file(&mut archive, &config_name, 0o644, &config)?;
    append_file(&mut archive, &layer_name, 0o644, &layer)?;
    append_file(&mut archive, "manifest.json", 0o644, &manifest)?;
    archive.into_inner()?.sync_all()
}

/// The layer: the directories, `/bin/busybox` and one symlink per applet.
fn busybox_layer() -> io::Result<Vec<u8>> {
    let busybox = read_static_busybox()?;
    let mut layer = tar::Builder::new(Vec::new());
    for (dir, mode) in DIRS {
        let mut header = header(tar::EntryType::Directory, *mode, 0);
        layer.append_data(&mut header, format!("{dir}/"), io::empty())?;
    }
    append_file(&mut layer, "bin/busybox", 0o755, &busybox)?;
    for applet in APPLETS {
        let mut header = header(tar::EntryType::Symlink, 0o777, 0);
        layer.append_link(&mut header, format!("bin/{applet}"), "busybox")?;
    }
    layer.into_inner()
}

/// The host's busybox, refused unless it is statically linked (a dynamic one cannot run in an
/// image with no libc).
fn read_static_busybox() -> io::Result<Vec<u8>> {
    let bytes = std::fs::read(HOST_BUSYBOX).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot read {HOST_BUSYBOX} ({e}): install the busybox-static package"),
        )
    })?;
    if has_interpreter(&bytes) {
        return Err(io::Error::other(format!(
            "{HOST_BUSYBOX} is dynamically linked: install the busybox-static package"
        )));
    }
    Ok(bytes)
}

/// Whether a 64-bit little-endian ELF file names a program interpreter (is dynamically linked).
fn has_interpreter(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let bytes = |at: usize, len: usize| elf.get(at..at.checked_add(len)?);
    let u16_at = |at| bytes(at, 2)?.try_into().ok().map(u16::from_le_bytes);
    let u32_at = |at| bytes(at, 4)?.try_into().ok().map(u32::from_le_bytes);
    let u64_at = |at| bytes(at, 8)?.try_into().ok().map(u64::from_le_bytes);
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    (0..usize::from(phnum)).any(|i| {
        let at = (phoff as usize).saturating_add(i * usize::from(phentsize));
        u32_at(at) == Some(PT_INTERP)
    })
}

fn append_file<W: io::Write>(
    archive: &mut tar::Builder<W>,
    path: &str,
    mode: u32,
    data: &[u8],
) -> io::Result<()> {
    let mut header = header(tar::EntryType::Regular, mode, data.len() as u64);
    archive.append_data(&mut header, path, data)
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(MTIME);
    header.set_uid(0);
    header.set_gid(0);
    header
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn archive_holds_a_manifest_a_config_and_a_busybox_layer() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("img.tar");
        busybox_archive(&out, "registry.local/t:1", &["/bin/sh", "-c", "true"]).unwrap();
        let mut files = std::collections::HashMap::new();
        for entry in tar::Archive::new(std::fs::File::open(&out).unwrap())
            .entries()
            .unwrap()
        {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            files.insert(name, data);
        }
        let manifest: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
        assert_eq!(manifest[0]["RepoTags"][0], "registry.local/t:1");
        let config_name = manifest[0]["Config"].as_str().unwrap();
        let config: serde_json::Value = serde_json::from_slice(&files[config_name]).unwrap();
        assert_eq!(config["config"]["Cmd"], json!(["/bin/sh", "-c", "true"]));
        let layer = &files[manifest[0]["Layers"][0].as_str().unwrap()];
        assert_eq!(
            config["rootfs"]["diff_ids"][0],
            format!("sha256:{}", sha256_hex(layer))
        );
        let mut names = Vec::new();
        for entry in tar::Archive::new(&layer[..]).entries().unwrap() {
            let entry = entry.unwrap();
            let name = entry.path().unwrap().to_string_lossy().into_owned();
            if name == "bin/sh" {
                assert_eq!(
                    entry.link_name().unwrap().unwrap().to_str(),
                    Some("busybox")
                );
            }
            names.push(name);
        }
        for want in [
            "bin/",
            "tmp/",
            "proc/",
            "bin/busybox",
            "bin/sh",
            "bin/httpd",
            "bin/kill",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
    }

    #[test]
    fn a_dynamic_elf_is_recognised() {
        assert!(!has_interpreter(&std::fs::read(HOST_BUSYBOX).unwrap()));
        // This test binary links glibc dynamically.
        let this = std::env::current_exe().unwrap();
        assert!(has_interpreter(&std::fs::read(this).unwrap()));
        assert!(!has_interpreter(b"not an elf"));
    }
}
