//! The admin kubeconfig, so `kubectl --kubeconfig <file>` and the `kube` crate just work.

use std::net::SocketAddr;
use std::path::Path;

use base64::Engine;
use serde_json::json;

/// The kubeconfig YAML for `server` (an address clients dial), trusting `ca_pem`, with `token`.
pub fn render(server: SocketAddr, ca_pem: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubeedge", "cluster": {"server": format!("https://{server}"), "certificate-authority-data": ca}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "kubeedge", "context": {"cluster": "kubeedge", "user": "admin"}}],
        "current-context": "kubeedge",
    });
    serde_yaml_ng::to_string(&doc).expect("a kubeconfig serializes")
}

/// Writes the kubeconfig (mode 0600: it holds the admin token).
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

/// The address clients should dial for a listener bound to `bound` (an unspecified address
/// becomes loopback).
pub fn dial_address(bound: SocketAddr) -> SocketAddr {
    match bound.ip().is_unspecified() {
        true => SocketAddr::new([127, 0, 0, 1].into(), bound.port()),
        false => bound,
    }
}
