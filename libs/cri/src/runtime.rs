//! [`Runtime`]: the CRI calls edged makes, as a trait, so the pod workers run against the real
//! client ([`Cri`]) or an in-memory runtime ([`crate::fake::FakeRuntime`], feature `fake`).
//! Each method has the meaning of the CRI call of the same name.

use crate::{Cri, CriError, api};

/// A container runtime as edged uses it.
#[async_trait::async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// The runtime's name and versions.
    async fn version(&self) -> Result<api::VersionResponse, CriError>;
    /// Creates and starts a pod sandbox; returns its id.
    async fn run_pod_sandbox(
        &self,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String, CriError>;
    /// Stops every container of the sandbox and tears its network down.
    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError>;
    /// Removes the sandbox and its containers.
    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError>;
    /// The sandbox's state, network (IP) and metadata.
    async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus, CriError>;
    /// The sandboxes the runtime knows, narrowed by `filter`.
    async fn list_pod_sandboxes(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>, CriError>;
    /// Creates a container in the sandbox; returns its id.
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError>;
    /// Starts a created container.
    async fn start_container(&self, id: &str) -> Result<(), CriError>;
    /// Stops a container, killing it after `timeout_secs`.
    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), CriError>;
    /// Removes a container.
    async fn remove_container(&self, id: &str) -> Result<(), CriError>;
    /// The containers the runtime knows, narrowed by `filter`.
    async fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>, CriError>;
    /// A container's state, exit code, times and image.
    async fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError>;
    /// Runs `cmd` in the container and waits for it (at most `timeout_secs`).
    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> Result<api::ExecSyncResponse, CriError>;
    /// Prepares a streaming exec of `request.cmd` in the container; returns the URL of the
    /// runtime's streaming server that serves it (the client's upgrade request goes there).
    async fn exec(&self, request: api::ExecRequest) -> Result<String, CriError>;
    /// Prepares a streaming attach to the container's main process; returns the streaming URL.
    async fn attach(&self, request: api::AttachRequest) -> Result<String, CriError>;
    /// Prepares a port forward into the sandbox's network namespace; returns the streaming URL.
    async fn port_forward(&self, request: api::PortForwardRequest) -> Result<String, CriError>;
    /// The image, if the runtime has it.
    async fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError>;
    /// Pulls the image; returns its reference.
    async fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError>;
    /// Usage of the containers the filter selects (CPU, memory, writable layer).
    async fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> Result<Vec<api::ContainerStats>, CriError>;
    /// Usage of the sandboxes the filter selects (CPU, memory, network, their containers).
    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<api::PodSandboxStatsFilter>,
    ) -> Result<Vec<api::PodSandboxStats>, CriError>;
    /// Makes the runtime reopen the container's log file (after it was renamed by rotation).
    async fn reopen_container_log(&self, id: &str) -> Result<(), CriError>;
}

#[async_trait::async_trait]
impl Runtime for Cri {
    async fn version(&self) -> Result<api::VersionResponse, CriError> {
        Cri::version(self).await
    }

    async fn run_pod_sandbox(
        &self,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String, CriError> {
        Cri::run_pod_sandbox(self, config, runtime_handler).await
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        Cri::stop_pod_sandbox(self, id).await
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        Cri::remove_pod_sandbox(self, id).await
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus, CriError> {
        Cri::pod_sandbox_status(self, id).await
    }

    async fn list_pod_sandboxes(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>, CriError> {
        Cri::list_pod_sandboxes(self, filter).await
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError> {
        Cri::create_container(self, sandbox_id, config, sandbox_config).await
    }

    async fn start_container(&self, id: &str) -> Result<(), CriError> {
        Cri::start_container(self, id).await
    }

    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), CriError> {
        Cri::stop_container(self, id, timeout_secs).await
    }

    async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        Cri::remove_container(self, id).await
    }

    async fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>, CriError> {
        Cri::list_containers(self, filter).await
    }

    async fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError> {
        Cri::container_status(self, id).await
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> Result<api::ExecSyncResponse, CriError> {
        Cri::exec_sync(self, id, cmd, timeout_secs).await
    }

    async fn exec(&self, request: api::ExecRequest) -> Result<String, CriError> {
        Cri::exec(self, request).await
    }

    async fn attach(&self, request: api::AttachRequest) -> Result<String, CriError> {
        Cri::attach(self, request).await
    }

    async fn port_forward(&self, request: api::PortForwardRequest) -> Result<String, CriError> {
        Cri::port_forward(self, request).await
    }

    async fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        Cri::image_status(self, image).await
    }

    async fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        Cri::pull_image(self, image, auth, sandbox_config).await
    }

    async fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> Result<Vec<api::ContainerStats>, CriError> {
        Cri::list_container_stats(self, filter).await
    }

    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<api::PodSandboxStatsFilter>,
    ) -> Result<Vec<api::PodSandboxStats>, CriError> {
        Cri::list_pod_sandbox_stats(self, filter).await
    }

    async fn reopen_container_log(&self, id: &str) -> Result<(), CriError> {
        Cri::reopen_container_log(self, id).await
    }
}
