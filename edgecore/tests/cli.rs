//! The edgecore binary, run as a user runs it.

use std::path::Path;
use std::time::Duration;

use testkit::daemon_cli;

const BIN: &str = env!("CARGO_BIN_EXE_edgecore");
const CONF: &str = include_str!("../../conf/edgecore.yaml");

/// The example config with every file under `{tmp}` and ephemeral monitor and lwproxy ports.
fn test_config() -> String {
    CONF.replace("127.0.0.1:10352", "127.0.0.1:0")
        .replace("127.0.0.1:10550", "127.0.0.1:0")
        .replace("/var/lib/kubeedge", "{tmp}")
        .replace("/etc/kubeedge", "{tmp}/etc")
}

/// Writes a CA and a node certificate where the test config expects them.
fn node_certs(dir: &Path) {
    let ca = pki::Ca::generate("test-ca", std::time::Duration::from_secs(3600)).unwrap();
    let node = ca
        .issue_node("edge-1", std::time::Duration::from_secs(3600))
        .unwrap();
    pki::write_pem(&dir.join("etc/ca/rootCA.crt"), ca.cert_pem()).unwrap();
    pki::write_pem(&dir.join("etc/certs/edgecore.crt"), &node.cert_pem).unwrap();
    pki::write_pem(&dir.join("etc/certs/edgecore.key"), &node.key_pem).unwrap();
}

#[tokio::test]
async fn starts_from_the_example_config_and_stops_on_sigterm() {
    // No cloudhub listens: edgehub keeps retrying in the background, and edgecore still starts,
    // serves and stops.
    daemon_cli::starts_serves_and_stops(Path::new(BIN), &test_config(), node_certs).await;
}

#[test]
fn a_missing_node_certificate_is_named() {
    let config = test_config();
    daemon_cli::refuses_a_bad_key_by_name(Path::new(BIN), &config, "modules.edgeHub", None);
}

#[tokio::test]
async fn a_ca_file_that_is_not_a_certificate_stops_start_up_with_its_path_named() {
    let dir = tempfile::tempdir().unwrap();
    node_certs(dir.path());
    let ca = dir.path().join("etc/ca/rootCA.crt");
    std::fs::write(&ca, "this is not a certificate\n").unwrap();
    let config = test_config().replace("{tmp}", dir.path().to_str().unwrap());
    let path = dir.path().join("edgecore.yaml");
    std::fs::write(&path, config).unwrap();
    let child = tokio::process::Command::new(BIN)
        .args(["--config", path.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Before the fix edgecore started and retried its dial forever: bound the wait.
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("edgecore did not stop on a CA file that is not a certificate")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(ca.to_str().unwrap()),
        "the CA file is not named: {err}"
    );
    assert!(err.contains("no valid CA certificate"), "{err}");
}

#[test]
fn prints_default_and_minimal_configs_it_accepts() {
    daemon_cli::prints_configs_it_accepts(Path::new(BIN), |text| {
        daemon::parse_yaml::<edgecore::Config>(Path::new("stdout"), text)
            .map(drop)
            .map_err(|e| e.to_string())
    });
}

#[test]
fn a_misspelt_key_is_named_with_file_and_line() {
    let config = test_config().replace("    bindAddress:", "    bindAdress:");
    let line = config
        .lines()
        .position(|l| l.contains("bindAdress"))
        .unwrap()
        + 1;
    daemon_cli::refuses_a_bad_key_by_name(
        Path::new(BIN),
        &config,
        "commonConfig.monitorServer",
        Some(line),
    );
}

#[test]
fn a_wrong_kind_is_refused() {
    let config = test_config().replace("kind: EdgeCore", "kind: CloudCore");
    daemon_cli::refuses_a_bad_key_by_name(Path::new(BIN), &config, "kind", None);
}

#[test]
fn a_damaged_database_stops_start_up_with_its_path_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("edgecore.db");
    std::fs::write(&db, vec![0x5a; 8192]).unwrap();
    let config = test_config()
        .replace("{tmp}/edgecore.db", db.to_str().unwrap())
        .replace("{tmp}", dir.path().to_str().unwrap());
    let path = dir.path().join("edgecore.yaml");
    std::fs::write(&path, config).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(db.to_str().unwrap()), "{err}");
    assert!(
        err.contains("onCorrupt: rebuild"),
        "the error says how to recover: {err}"
    );
    assert_eq!(
        std::fs::read(&db).unwrap(),
        vec![0x5a; 8192],
        "the damaged file was left alone"
    );
}

#[tokio::test]
async fn with_on_corrupt_rebuild_a_damaged_database_is_moved_aside_and_start_up_goes_on() {
    let config = test_config().replace("onCorrupt: fail", "onCorrupt: rebuild");
    // The daemon check makes its own temporary directory; plant the damaged file through a
    // config that points at a file we create first.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("edgecore.db");
    std::fs::write(&db, vec![0x5a; 8192]).unwrap();
    let config = config.replace("{tmp}/edgecore.db", db.to_str().unwrap());
    daemon_cli::starts_serves_and_stops(Path::new(BIN), &config, node_certs).await;
    let moved_aside = std::fs::read_dir(dir.path()).unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("edgecore.db.corrupt-")
    });
    assert!(
        moved_aside,
        "the damaged file was kept under a .corrupt- name"
    );
}

#[test]
fn with_root_every_default_path_moves_under_it() {
    let moved = daemon_cli::defaults_move_under_root(Path::new(BIN), daemon::layout::ROOTED);
    // The CA, the node certificate and key, the database, the kubelet root, pod logs, static pods.
    assert!(moved >= 7, "only {moved} paths moved");
}

#[test]
fn the_port_offset_moves_every_default_port() {
    let expected = [
        (
            "bindAddress: 127.0.0.1:10352",
            "bindAddress: 127.0.0.1:10359",
        ),
        ("server: 127.0.0.1:10000", "server: 127.0.0.1:10007"),
        ("server: 127.0.0.1:10001", "server: 127.0.0.1:10008"),
        ("server: 127.0.0.1:10550", "server: 127.0.0.1:10557"),
    ];
    daemon_cli::default_ports_move_by(Path::new(BIN), 7, &expected);
}

#[test]
fn version_help_and_documented_defaults() {
    let bin = Path::new(BIN);
    daemon_cli::prints_its_version(bin, "edgecore", env!("CARGO_PKG_VERSION"));
    daemon_cli::help_names_the_default_config(bin, "/etc/kubeedge/config/edgecore.yaml");
    daemon_cli::documents_every_default(bin);
}

#[test]
fn the_node_certificate_is_not_where_cloudhub_writes_its_own() {
    let hub = edgecore::Config::default().modules.edge_hub;
    assert_eq!(
        hub.tls_cert_file,
        Path::new("/etc/kubeedge/certs/edgecore.crt")
    );
    assert_eq!(
        hub.tls_private_key_file,
        Path::new("/etc/kubeedge/certs/edgecore.key")
    );
}
