//! The cloudcore binary, run as a user runs it.

use std::path::Path;

use testkit::daemon_cli;

const BIN: &str = env!("CARGO_BIN_EXE_cloudcore");
const CONF: &str = include_str!("../../conf/cloudcore.yaml");

#[tokio::test]
async fn starts_from_the_example_config_and_stops_on_sigterm() {
    daemon_cli::starts_serves_and_stops(Path::new(BIN), &test_config(), |_| {}).await;
}

/// The example config, on loopback with ephemeral ports and files under `{tmp}`.
fn test_config() -> String {
    CONF.replace("127.0.0.1:9091", "127.0.0.1:0")
        .replace("/etc/kubeedge", "{tmp}/etc")
        .replace("/var/lib/kubeedge", "{tmp}/var")
        .replace("127.0.0.1:6443", "127.0.0.1:0")
        .replace("0.0.0.0", "127.0.0.1")
        .replace("port: 10000", "port: 0")
        .replace("port: 10001", "port: 0")
        .replace("port: 10002", "port: 0")
}

#[test]
fn prints_default_and_minimal_configs_it_accepts() {
    daemon_cli::prints_configs_it_accepts(Path::new(BIN), |text| {
        daemon::parse_yaml::<cloudcore::Config>(Path::new("stdout"), text)
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
    let config = test_config().replace("kind: CloudCore", "kind: EdgeCore");
    daemon_cli::refuses_a_bad_key_by_name(Path::new(BIN), &config, "kind", None);
}

#[test]
fn with_root_every_default_path_moves_under_it() {
    let moved = daemon_cli::defaults_move_under_root(Path::new(BIN), daemon::layout::ROOTED);
    // cloudhub's CA and server certificate, the control plane's database, CA, certificate,
    // admin token and admin kubeconfig.
    assert!(moved >= 10, "only {moved} paths moved");
}

#[test]
fn the_port_offset_moves_every_default_port() {
    let expected = [
        ("bindAddress: 127.0.0.1:9091", "bindAddress: 127.0.0.1:9098"),
        ("bindAddress: 127.0.0.1:6443", "bindAddress: 127.0.0.1:6450"),
        ("port: 10000", "port: 10007"),
        ("port: 10001", "port: 10008"),
    ];
    daemon_cli::default_ports_move_by(Path::new(BIN), 7, &expected);
}

#[test]
fn version_help_and_documented_defaults() {
    let bin = Path::new(BIN);
    daemon_cli::prints_its_version(bin, "cloudcore", env!("CARGO_PKG_VERSION"));
    daemon_cli::help_names_the_default_config(bin, "/etc/kubeedge/config/cloudcore.yaml");
    daemon_cli::documents_every_default(bin);
}
