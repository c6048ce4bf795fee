//! The CRI client on a real containerd started by the test (testkit's private harness): a pod
//! runs, logs in CRI format, gets an IP in the harness's subnet that the host reaches, execs,
//! survives a containerd restart, and stops and is removed; teardown leaves nothing behind.
//! These tests fail, not skip, when containerd, runc, the CNI plugins or busybox-static are
//! missing: CI installs them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use cri::{Cri, api};
use testkit::containerd::{BUSYBOX_IMAGE, Containerd, PAUSE_IMAGE, WAIT_FOR_TERM};
use testkit::{eventually, http_get};

const MISSING_IMAGE: &str = "registry.local/missing:1";

#[tokio::test]
async fn pod_runs_logs_serves_execs_and_survives_a_containerd_restart() -> anyhow::Result<()> {
    Containerd::available().map_err(anyhow::Error::msg)?;
    let mut containerd = Containerd::start().await?;
    let footprint = containerd.footprint();
    let cri = containerd.connect().await?;

    let logs = containerd.root().join("pods/default_web_uid-web");
    std::fs::create_dir_all(&logs)?;
    let pod = sandbox_config("web", &logs);
    let sandbox = timed("RunPodSandbox", cri.run_pod_sandbox(pod.clone(), "")).await?;
    let hello_script = format!("echo hello; {WAIT_FOR_TERM}");
    let hello = run_container(&cri, &sandbox, &pod, "hello", &hello_script).await?;
    let web_script = format!("echo pong > /tmp/ping; httpd -f -p 8080 -h /tmp & {WAIT_FOR_TERM}");
    let web = run_container(&cri, &sandbox, &pod, "web", &web_script).await?;
    assert_running(&cri, &[&hello, &web]).await?;
    assert_first_log_line(&logs.join("hello.log"), "stdout F hello").await?;
    let ip = pod_ip_in_subnet(&cri, &sandbox, &containerd).await?;
    serves_pong(SocketAddr::new(ip, 8080)).await;

    let echo = cri
        .exec_sync(&hello, argv(&["echo", "exec works"]), 5)
        .await?;
    assert_eq!(
        (echo.exit_code, &echo.stdout[..]),
        (0, &b"exec works\n"[..])
    );
    let hostname = cri.exec_sync(&hello, argv(&["hostname"]), 5).await?;
    assert_eq!(String::from_utf8_lossy(&hostname.stdout).trim(), "web");

    let restarted = Instant::now();
    containerd.restart().await?;
    eprintln!(
        "containerd restart (SIGKILL) answered again in {:?}",
        restarted.elapsed()
    );
    let cri = containerd.connect().await?;
    assert_running(&cri, &[&hello, &web]).await?;
    serves_pong(SocketAddr::new(ip, 8080)).await;

    stop_and_remove(&cri, &hello, &sandbox).await?;

    containerd.stop().await;
    assert_eq!(footprint.leftovers(), Vec::<String>::new());
    Ok(())
}

#[tokio::test]
async fn missing_image_is_absent_and_pulling_it_fails() -> anyhow::Result<()> {
    Containerd::available().map_err(anyhow::Error::msg)?;
    let containerd = Containerd::start().await?;
    let footprint = containerd.footprint();
    let cri = containerd.connect().await?;

    let version = cri.version().await?;
    assert_eq!(
        (
            version.runtime_name.as_str(),
            version.runtime_api_version.as_str()
        ),
        ("containerd", "v1")
    );
    let tags: Vec<String> = cri
        .list_images()
        .await?
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .collect();
    for image in [PAUSE_IMAGE, BUSYBOX_IMAGE] {
        assert!(tags.iter().any(|t| t == image), "{image} not in {tags:?}");
        assert!(cri.image_status(image).await?.is_some());
    }
    assert!(cri.image_status(MISSING_IMAGE).await?.is_none());

    // No registry is reachable: containerd looks registry.local up and fails at once. Measured
    // here: an error within 5 ms ("lookup registry.local: no such host"), never the timeout; a
    // machine whose DNS hangs would end in the timeout arm instead, which is also accepted.
    let started = Instant::now();
    let pull = cri.pull_image(MISSING_IMAGE, None, None);
    match tokio::time::timeout(Duration::from_secs(30), pull).await {
        Ok(Err(e)) => {
            eprintln!("PullImage failed after {:?}: {e}", started.elapsed());
            assert!(e.to_string().contains(MISSING_IMAGE), "{e}");
        }
        Ok(Ok(image_ref)) => panic!("pulled {MISSING_IMAGE} as {image_ref} with no registry"),
        Err(_) => eprintln!("PullImage still pending after 30 s"),
    }

    containerd.stop().await;
    assert_eq!(footprint.leftovers(), Vec::<String>::new());
    Ok(())
}

#[tokio::test]
async fn stats_cover_a_busy_container_and_a_reopened_log_gets_the_new_lines() -> anyhow::Result<()>
{
    Containerd::available().map_err(anyhow::Error::msg)?;
    let containerd = Containerd::start().await?;
    let footprint = containerd.footprint();
    let cri = containerd.connect().await?;

    let logs = containerd.root().join("pods/default_busy_uid-busy");
    std::fs::create_dir_all(&logs)?;
    let pod = sandbox_config("busy", &logs);
    let sandbox = cri.run_pod_sandbox(pod.clone(), "").await?;
    let script =
        "trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); echo line $i; sleep 0.05; done";
    let busy = run_container(&cri, &sandbox, &pod, "busy", script).await?;
    let log = logs.join("busy.log");
    assert_first_log_line(&log, "stdout F line 1").await?;

    let cpu_of = |stats: &[api::ContainerStats]| {
        let cpu = stats
            .iter()
            .find(|s| s.attributes.as_ref().is_some_and(|a| a.id == busy));
        cpu.and_then(|s| s.cpu)
            .and_then(|c| c.usage_core_nano_seconds)
    };
    let stats = cri.list_container_stats(None).await?;
    let used = cpu_of(&stats)
        .context("no CPU usage for the running container")?
        .value;
    assert!(used > 0, "{stats:?}");
    let memory = stats[0].memory.context("no memory usage")?;
    assert!(
        memory.working_set_bytes.is_some_and(|w| w.value > 0),
        "{memory:?}"
    );
    match cri.list_pod_sandbox_stats(None).await {
        Ok(pods) => eprintln!(
            "ListPodSandboxStats answered {} sandboxes: {pods:?}",
            pods.len()
        ),
        Err(e) => eprintln!("ListPodSandboxStats: {e} ({:?})", e.code()),
    }

    let rotated = logs.join("busy.log.1");
    std::fs::rename(&log, &rotated)?;
    cri.reopen_container_log(&busy).await?;
    eventually("lines in the reopened log", Duration::from_secs(5), || {
        std::future::ready(std::fs::read_to_string(&log).is_ok_and(|t| t.contains("stdout F line")))
    })
    .await;
    // containerd switched files between two lines: none lost, none written to the old file.
    let numbers = |path: &Path| -> anyhow::Result<Vec<u64>> {
        let text = std::fs::read_to_string(path)?;
        let numbers = text
            .lines()
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok());
        Ok(numbers.collect())
    };
    let (old, new) = (numbers(&rotated)?, numbers(&log)?);
    assert_eq!(new[0], old[old.len() - 1] + 1, "{old:?} then {new:?}");

    cri.stop_container(&busy, 10).await?;
    let err = cri.reopen_container_log(&busy).await.unwrap_err();
    eprintln!("ReopenContainerLog of a stopped container: {err}");
    containerd.stop().await;
    assert_eq!(footprint.leftovers(), Vec::<String>::new());
    Ok(())
}

/// Creates and starts a busybox container running `sh -c script`, logging to `<name>.log`.
async fn run_container(
    cri: &Cri,
    sandbox: &str,
    pod: &api::PodSandboxConfig,
    name: &str,
    script: &str,
) -> anyhow::Result<String> {
    let config = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: BUSYBOX_IMAGE.to_string(),
            ..Default::default()
        }),
        command: argv(&["/bin/sh", "-c", script]),
        log_path: format!("{name}.log"),
        linux: Some(api::LinuxContainerConfig::default()),
        ..Default::default()
    };
    let id = timed(
        "CreateContainer",
        cri.create_container(sandbox, config, pod.clone()),
    )
    .await?;
    timed("StartContainer", cri.start_container(&id)).await?;
    Ok(id)
}

/// Stops `container` (fast: it honours SIGTERM), removes it, then stops and removes the sandbox
/// and with it the other containers.
async fn stop_and_remove(cri: &Cri, container: &str, sandbox: &str) -> anyhow::Result<()> {
    let stopping = Instant::now();
    timed("StopContainer", cri.stop_container(container, 10)).await?;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "SIGTERM was not honoured"
    );
    let status = cri.container_status(container).await?;
    assert_eq!(status.state, api::ContainerState::ContainerExited as i32);
    assert_eq!(status.exit_code, 0);
    cri.remove_container(container).await?;
    assert!(
        cri.container_status(container)
            .await
            .unwrap_err()
            .is_not_found()
    );
    timed("StopPodSandbox", cri.stop_pod_sandbox(sandbox)).await?;
    timed("RemovePodSandbox", cri.remove_pod_sandbox(sandbox)).await?;
    assert!(cri.list_pod_sandboxes(None).await?.is_empty());
    assert!(cri.list_containers(None).await?.is_empty());
    Ok(())
}

async fn assert_running(cri: &Cri, containers: &[&str]) -> anyhow::Result<()> {
    for id in containers {
        let status = cri.container_status(id).await?;
        let running = api::ContainerState::ContainerRunning as i32;
        assert_eq!(status.state, running, "{status:?}");
    }
    Ok(())
}

/// The log file's first line is `<RFC 3339 time> <rest>`, CRI's log format.
async fn assert_first_log_line(log: &Path, rest: &str) -> anyhow::Result<()> {
    eventually(
        "the container's first log line",
        Duration::from_secs(5),
        || std::future::ready(std::fs::read_to_string(log).is_ok_and(|text| text.contains('\n'))),
    )
    .await;
    let text = std::fs::read_to_string(log)?;
    let line = text.lines().next().unwrap_or_default();
    let (timestamp, after) = line.split_once(' ').context("no space in the log line")?;
    assert_eq!(after, rest, "{text:?}");
    let looks_rfc3339 = timestamp.len() > 20 && timestamp.as_bytes()[10] == b'T';
    assert!(looks_rfc3339, "{timestamp}");
    Ok(())
}

/// The sandbox is ready and its IP is in the harness's /24.
async fn pod_ip_in_subnet(
    cri: &Cri,
    sandbox: &str,
    containerd: &Containerd,
) -> anyhow::Result<IpAddr> {
    let status = cri.pod_sandbox_status(sandbox).await?;
    assert_eq!(status.state, api::PodSandboxState::SandboxReady as i32);
    let ip: Ipv4Addr = status.network.context("sandbox network")?.ip.parse()?;
    let (subnet, prefix) = containerd.subnet();
    assert_eq!(prefix, 24);
    assert_eq!(
        ip.octets()[..3],
        subnet.octets()[..3],
        "{ip} not in {subnet}/24"
    );
    Ok(IpAddr::V4(ip))
}

fn sandbox_config(name: &str, logs: &Path) -> api::PodSandboxConfig {
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.to_string(),
            uid: format!("uid-{name}"),
            namespace: "default".to_string(),
            attempt: 0,
        }),
        hostname: name.to_string(),
        log_directory: logs.to_string_lossy().into_owned(),
        linux: Some(api::LinuxPodSandboxConfig {
            security_context: Some(api::LinuxSandboxSecurityContext::default()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `GET /ping` answers `pong` (httpd may still be starting).
async fn serves_pong(addr: SocketAddr) {
    eventually(&format!("httpd answers on {addr}"), Duration::from_secs(5), || async move {
        matches!(http_get(addr, "/ping").await, Ok((200, body)) if body == "pong\n")
    })
    .await;
}

async fn timed<T>(op: &str, call: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = call.await;
    eprintln!("{op} took {:?}", started.elapsed());
    out
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}
