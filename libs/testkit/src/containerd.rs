//! A private containerd for tests. Each [`Containerd`] has its own root, state, socket, runc
//! root, CNI bridge, CNI network name and /24 subnet, all derived from one temporary directory
//! and a per-instance tag, so tests in parallel (threads or processes) do not collide. At start
//! it imports a busybox pause image and a busybox workload image built on the spot; no registry
//! is needed.
//!
//! Teardown leaves nothing on the host: [`Containerd::stop`] first stops and removes every pod
//! over CRI, then (as `Drop` does when `stop` was not called) stops containerd, kills our
//! leftover shims, `runc delete -f`s our containers, unmounts everything under the root, deletes
//! the bridge, our iptables rules and CNI result files, and removes the root.

mod host;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use cri::Cri;
use tempfile::TempDir;

use crate::image;

/// The sandbox ("pause") image: a shell that exits 0 on SIGTERM.
pub const PAUSE_IMAGE: &str = "registry.local/pause:3.9";
/// A busybox workload image whose default command runs until SIGTERM.
pub const BUSYBOX_IMAGE: &str = "registry.local/busybox:1.36";
/// The containerd namespace the CRI plugin uses.
pub const NAMESPACE: &str = "k8s.io";
/// A shell loop that runs until SIGTERM and then exits 0 at once.
pub const WAIT_FOR_TERM: &str = "trap 'exit 0' TERM; while true; do sleep 1 & wait; done";

const CNI_BIN_DIR: &str = "/usr/lib/cni";
/// How long containerd may take to answer CRI with its runtime and network ready.
const STARTUP: Duration = Duration::from_secs(20);
/// How long stopping and removing the pods over CRI may take at `stop`.
const CRI_CLEANUP: Duration = Duration::from_secs(30);
/// How long containerd has to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// A containerd running on a private root; see the module docs.
pub struct Containerd {
    /// `Some` until teardown removes it.
    dir: Option<TempDir>,
    root: PathBuf,
    net: PodNet,
    tools: Tools,
    child: Option<Child>,
}

/// What one harness may leave on the host, to check after teardown that it left nothing.
#[derive(Clone, Debug)]
pub struct Footprint {
    root: PathBuf,
    net: PodNet,
}

/// The CNI network of one harness: names and subnet no other live harness uses.
#[derive(Clone, Debug)]
struct PodNet {
    /// The CNI network name; the CNI result cache names its files after it.
    name: String,
    bridge: String,
    /// The first three octets of the /24.
    prefix: [u8; 3],
}

/// The absolute paths of the programs the harness runs.
struct Tools {
    containerd: PathBuf,
    ctr: PathBuf,
    runc: PathBuf,
}

// === impl Containerd ===

impl Containerd {
    /// `Ok` if this machine can run the harness, else every reason it cannot.
    pub fn available() -> Result<(), String> {
        Tools::find().map(drop)
    }

    /// Starts containerd on a fresh root and imports [`PAUSE_IMAGE`] and [`BUSYBOX_IMAGE`].
    pub async fn start() -> anyhow::Result<Containerd> {
        let tools = Tools::find().map_err(anyhow::Error::msg)?;
        ip_forward_before();
        let dir = tempfile::Builder::new()
            .prefix("kecri-")
            .tempdir()
            .context("creating the harness root")?;
        let root = dir.path().canonicalize()?;
        let mut harness = Containerd {
            dir: Some(dir),
            net: PodNet::pick(),
            tools,
            child: None,
            root,
        };
        // From here on an error drops `harness`, which undoes what was done.
        harness.write_config()?;
        harness.spawn()?;
        harness.wait_ready().await?;
        harness.import_images().await?;
        Ok(harness)
    }

    /// The gRPC socket.
    pub fn socket(&self) -> PathBuf {
        self.root.join("containerd.sock")
    }

    /// The CRI endpoint, `unix:///…/containerd.sock`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// The private directory everything lives under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The pods' /24 subnet: its network address and prefix length.
    pub fn subnet(&self) -> (Ipv4Addr, u8) {
        let [a, b, c] = self.net.prefix;
        (Ipv4Addr::new(a, b, c, 0), 24)
    }

    /// The CNI bridge (created by the first pod).
    pub fn bridge(&self) -> &str {
        &self.net.bridge
    }

    /// containerd's process id (0 after a restart that failed to spawn it).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// A new CRI client on this containerd.
    pub async fn connect(&self) -> anyhow::Result<Cri> {
        Ok(Cri::connect(&self.endpoint()).await?)
    }

    /// What teardown must leave clean; [`Footprint::leftovers`] checks it afterwards.
    pub fn footprint(&self) -> Footprint {
        Footprint {
            root: self.root.clone(),
            net: self.net.clone(),
        }
    }

    /// Imports a docker-archive (see [`image::busybox_archive`]) into the CRI namespace.
    pub fn import(&self, archive: &Path) -> anyhow::Result<()> {
        let out = Command::new(&self.tools.ctr)
            .arg("-a")
            .arg(self.socket())
            .args(["-n", NAMESPACE, "images", "import"])
            .arg(archive)
            .stdin(Stdio::null())
            .output()
            .context("running ctr")?;
        if !out.status.success() {
            bail!(
                "ctr images import {} failed: {}",
                archive.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Kills containerd (SIGKILL) and starts it again on the same root; pods keep running.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("killing containerd")?;
            child.wait().context("reaping containerd")?;
        }
        self.spawn()?;
        self.wait_ready().await
    }

    /// Stops and removes every container and pod sandbox over CRI (best effort, bounded), then
    /// tears everything down as `Drop` does.
    pub async fn stop(self) {
        if self.child.is_some() {
            match tokio::time::timeout(CRI_CLEANUP, self.remove_pods()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => warn(format_args!("removing pods over CRI: {e:#}")),
                Err(_) => warn(format_args!(
                    "removing pods over CRI took over {CRI_CLEANUP:?}"
                )),
            }
        }
        // Teardown blocks (it waits for processes); `Drop` runs it.
        let _ = tokio::task::spawn_blocking(move || drop(self)).await;
    }

    fn write_config(&self) -> anyhow::Result<()> {
        for sub in ["net.d", "runc-root", "cni-ipam", "images"] {
            std::fs::create_dir_all(self.root.join(sub))?;
        }
        let config = containerd_config(&self.root, &self.tools.runc);
        std::fs::write(self.root.join("config.toml"), config)?;
        let conflist = self.net.conflist(&self.root.join("cni-ipam"));
        std::fs::write(self.root.join("net.d/10-pods.conflist"), conflist)?;
        Ok(())
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let child = Command::new(&self.tools.containerd)
            .arg("--config")
            .arg(self.root.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("spawning containerd")?;
        self.child = Some(child);
        Ok(())
    }

    /// Polls until containerd answers CRI with RuntimeReady and NetworkReady, or fails early
    /// if it exits.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + STARTUP;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().transpose()) {
                bail!(
                    "containerd exited ({status:?}) at start\n{}",
                    self.log_tail()
                );
            }
            let Err(e) = self.runtime_ready().await else {
                return Ok(());
            };
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "containerd not ready after {STARTUP:?}: {e:#}\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn runtime_ready(&self) -> anyhow::Result<()> {
        let status = self.connect().await?.status().await?;
        let conditions = status.status.map(|s| s.conditions).unwrap_or_default();
        for wanted in ["RuntimeReady", "NetworkReady"] {
            let ready = conditions.iter().any(|c| c.r#type == wanted && c.status);
            anyhow::ensure!(ready, "{wanted} is not true: {conditions:?}");
        }
        Ok(())
    }

    /// Builds and imports the two images, then waits until CRI lists them.
    async fn import_images(&self) -> anyhow::Result<()> {
        let pause = ["/bin/sh", "-c", WAIT_FOR_TERM];
        let busybox = ["/bin/sh", "-c", WAIT_FOR_TERM];
        for (reference, cmd) in [(PAUSE_IMAGE, pause), (BUSYBOX_IMAGE, busybox)] {
            let file = self
                .root
                .join("images")
                .join(format!("{}.tar", tag(reference)));
            image::busybox_archive(&file, reference, &cmd)?;
            self.import(&file)?;
        }
        let cri = self.connect().await?;
        let deadline = tokio::time::Instant::now() + STARTUP;
        for reference in [PAUSE_IMAGE, BUSYBOX_IMAGE] {
            while cri.image_status(reference).await?.is_none() {
                if tokio::time::Instant::now() >= deadline {
                    bail!("CRI does not list {reference} after import");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    async fn remove_pods(&self) -> anyhow::Result<()> {
        let cri = self.connect().await?;
        for container in cri.list_containers(None).await? {
            if let Err(e) = cri.stop_container(&container.id, 2).await {
                warn(format_args!("{e}"));
            }
            cri.remove_container(&container.id).await?;
        }
        for sandbox in cri.list_pod_sandboxes(None).await? {
            cri.stop_pod_sandbox(&sandbox.id).await?;
            cri.remove_pod_sandbox(&sandbox.id).await?;
        }
        Ok(())
    }

    /// Everything after CRI, in the order that leaves nothing behind; never panics.
    fn teardown(&mut self) {
        let Some(dir) = self.dir.take() else { return };
        self.stop_daemon();
        let socket = self.socket();
        host::kill_shims(&socket);
        host::delete_runc_containers(&self.tools.runc, &self.root.join("runc-root"));
        host::remove_shim_sockets(&socket, &self.root.join("state"));
        host::unmount_under(&self.root);
        host::delete_bridge(&self.net.bridge);
        host::remove_iptables_rules(&self.net.matchers());
        host::remove_cni_results(&self.net.name);
        host::restore_ip_forward(ip_forward_before());
        host::remove_empty_shared_dirs();
        if let Err(e) = dir.close() {
            warn(format_args!("removing {}: {e}", self.root.display()));
        }
    }

    /// SIGTERM, then SIGKILL after [`TERM_GRACE`].
    fn stop_daemon(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        host::signal(child.id(), rustix::process::Signal::TERM);
        let deadline = std::time::Instant::now() + TERM_GRACE;
        while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(child.try_wait(), Ok(None)) {
            warn(format_args!(
                "containerd ignored SIGTERM for {TERM_GRACE:?}; killing it"
            ));
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log_path(&self) -> PathBuf {
        self.root.join("containerd.log")
    }

    /// The last lines of containerd's log, for error messages.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        format!("last lines of {}:\n{tail}", self.log_path().display())
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.teardown();
    }
}

// === impl Footprint ===

impl Footprint {
    /// What is still on the host: processes naming the root, mounts under it, the root itself,
    /// the bridge, iptables rules and CNI result files of this network. Empty after teardown.
    pub fn leftovers(&self) -> Vec<String> {
        let root = self.root.to_string_lossy();
        let mut found = Vec::new();
        for (pid, cmdline) in host::processes() {
            if cmdline.iter().any(|arg| arg.contains(root.as_ref())) {
                found.push(format!("process {pid}: {}", cmdline.join(" ")));
            }
        }
        found.extend(host::mounts_under(&self.root).map(|m| format!("mount {}", m.display())));
        if self.root.exists() {
            found.push(format!("directory {root}"));
        }
        if host::link_exists(&self.net.bridge) {
            found.push(format!("bridge {}", self.net.bridge));
        }
        found.extend(host::iptables_rules(&self.net.matchers()).map(|(t, r)| format!("{t}: {r}")));
        found.extend(host::cni_results(&self.net.name).map(|p| format!("{}", p.display())));
        found
    }
}

// === impl PodNet ===

impl PodNet {
    /// A tag from the process id and a counter, rehashed while its bridge or /24 is in use.
    fn pick() -> PodNet {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        loop {
            let mut hasher = DefaultHasher::new();
            (std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)).hash(&mut hasher);
            let hash = hasher.finish();
            let net = PodNet {
                name: format!("kecri-{:08x}", hash as u32),
                bridge: format!("kecri{:08x}", hash as u32),
                prefix: [10, 200 + (hash >> 32) as u8 % 51, (hash >> 40) as u8],
            };
            if !host::link_exists(&net.bridge) && !host::route_exists(net.prefix) {
                return net;
            }
        }
    }

    /// bridge + host-local (state under `ipam_dir`) + portmap + loopback.
    fn conflist(&self, ipam_dir: &Path) -> String {
        let [a, b, c] = self.prefix;
        let conflist = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": self.name,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": true,
                    "ipMasq": false,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": ipam_dir,
                        "ranges": [[{ "subnet": format!("{a}.{b}.{c}.0/24") }]],
                        "routes": [{ "dst": "0.0.0.0/0" }],
                    },
                },
                { "type": "portmap", "capabilities": { "portMappings": true } },
                { "type": "loopback" },
            ],
        });
        serde_json::to_string_pretty(&conflist).expect("a json! value always serializes")
    }

    /// Substrings that mark an iptables rule as this network's: the bridge, the network name
    /// (in portmap's comments) and the subnet's addresses.
    fn matchers(&self) -> Vec<String> {
        let [a, b, c] = self.prefix;
        vec![
            self.bridge.clone(),
            self.name.clone(),
            format!(" {a}.{b}.{c}."),
        ]
    }
}

// === impl Tools ===

impl Tools {
    /// The programs, files and privileges the harness needs, each missing one named with the
    /// Debian package that brings it.
    fn find() -> Result<Tools, String> {
        let mut missing = Vec::new();
        if !rustix::process::geteuid().is_root() {
            missing.push("root (the harness mounts, creates bridges and runs runc)".to_string());
        }
        let mut program = |name: &str, package: &str| {
            host::which(name).unwrap_or_else(|| {
                missing.push(format!("`{name}` on PATH (package {package})"));
                PathBuf::new()
            })
        };
        let tools = Tools {
            containerd: program("containerd", "containerd"),
            ctr: program("ctr", "containerd"),
            runc: program("runc", "runc"),
        };
        for (file, package) in [
            (
                format!("{CNI_BIN_DIR}/bridge"),
                "containernetworking-plugins",
            ),
            (image::HOST_BUSYBOX.to_string(), "busybox-static"),
        ] {
            if !Path::new(&file).exists() {
                missing.push(format!("{file} (package {package})"));
            }
        }
        if missing.is_empty() {
            Ok(tools)
        } else {
            Err(format!(
                "the containerd test harness needs: {}",
                missing.join("; ")
            ))
        }
    }
}

/// containerd's config: everything under `root`, CRI with our pause image, runc with a private
/// root, CNI from `root/net.d`.
fn containerd_config(root: &Path, runc: &Path) -> String {
    let root = root.display();
    let runc = runc.display();
    format!(
        r#"version = 2
root = "{root}/root"
state = "{root}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{root}/containerd.sock"

[ttrpc]
  address = "{root}/containerd.sock.ttrpc"

[debug]
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  # root here cannot lower oom_score_adj; without this every RunPodSandbox fails
  restrict_oom_score_adj = true

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  BinaryName = "{runc}"
  Root = "{root}/runc-root"
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{root}/net.d"
  max_conf_num = 1
"#
    )
}

/// `/proc/sys/net/ipv4/ip_forward` as the first harness of this process found it, before any
/// CNI bridge plugin could turn it on.
fn ip_forward_before() -> Option<&'static str> {
    static BEFORE: OnceLock<Option<String>> = OnceLock::new();
    BEFORE.get_or_init(host::ip_forward).as_deref()
}

/// `registry.local/pause:3.9` → `pause-3.9`.
fn tag(reference: &str) -> String {
    let name = reference.rsplit('/').next().unwrap_or(reference);
    name.replace(':', "-")
}

fn warn(message: std::fmt::Arguments<'_>) {
    eprintln!("testkit::containerd: warning: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_nets_differ_and_fit_linux_names() {
        let (a, b) = (PodNet::pick(), PodNet::pick());
        assert_ne!(a.bridge, b.bridge);
        assert_ne!(a.name, b.name);
        for net in [a, b] {
            assert!(net.bridge.len() <= 15, "{}", net.bridge);
            assert!((200..=250).contains(&net.prefix[1]), "{:?}", net.prefix);
        }
    }

    #[test]
    fn config_puts_everything_under_the_root() {
        let config = containerd_config(Path::new("/tmp/r"), Path::new("/usr/sbin/runc"));
        assert!(config.contains(r#"address = "/tmp/r/containerd.sock""#));
        assert!(config.contains(r#"Root = "/tmp/r/runc-root""#));
        assert!(config.contains("restrict_oom_score_adj = true"));
        assert!(config.contains(r#"conf_dir = "/tmp/r/net.d""#));
        let conflist = PodNet::pick().conflist(Path::new("/tmp/r/cni-ipam"));
        let value: serde_json::Value = serde_json::from_str(&conflist).unwrap();
        assert_eq!(value["plugins"][0]["ipam"]["dataDir"], "/tmp/r/cni-ipam");
    }
}
