//! cri: a CRI v1 client for a container runtime (containerd) on a unix socket. One tonic channel
//! carries both the runtime and the image service; each method is one call that returns the
//! response's useful part, and a failed call names its CRI operation in [`CriError::Call`]. The
//! generated types are re-exported as [`api`].
#![forbid(unsafe_code)]

mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
mod runtime;

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

pub use error::CriError;
pub use k8s_cri::v1 as api;
pub use runtime::Runtime;

use api::image_service_client::ImageServiceClient;
use api::runtime_service_client::RuntimeServiceClient;

/// The largest response accepted, as kubelet does (a long container list, exec output).
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// How long connecting and the first `Version` call may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A CRI runtime and image client over one channel; cheap to clone.
#[derive(Clone)]
pub struct Cri {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

// === impl Cri ===

impl Cri {
    /// Connects to `unix:///path/x.sock` (or a bare absolute path) and checks that the runtime
    /// answers `Version`.
    pub async fn connect(endpoint: &str) -> Result<Cri, CriError> {
        let path = socket_path(endpoint)?;
        let connect_error = |source: Box<dyn std::error::Error + Send + Sync>| CriError::Connect {
            endpoint: endpoint.to_string(),
            source,
        };
        let connector = tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        });
        // The URI is never dialled: the connector above opens the socket.
        let channel = Endpoint::from_static("http://localhost")
            .connect_timeout(CONNECT_TIMEOUT)
            .connect_with_connector(connector)
            .await
            .map_err(|e| connect_error(e.into()))?;
        let cri = Cri {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            images: ImageServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES),
        };
        let version = tokio::time::timeout(CONNECT_TIMEOUT, cri.version())
            .await
            .map_err(|e| connect_error(e.into()))?
            .map_err(|e| connect_error(e.into()))?;
        tracing::debug!(
            endpoint,
            runtime = %version.runtime_name,
            version = %version.runtime_version,
            "connected to the CRI runtime"
        );
        Ok(cri)
    }

    /// The runtime's name and versions.
    pub async fn version(&self) -> Result<api::VersionResponse, CriError> {
        let request = api::VersionRequest::default();
        answer("Version", self.runtime.clone().version(request).await)
    }

    /// The runtime's conditions (RuntimeReady, NetworkReady).
    pub async fn status(&self) -> Result<api::StatusResponse, CriError> {
        let request = api::StatusRequest { verbose: false };
        answer("Status", self.runtime.clone().status(request).await)
    }

    /// Creates and starts a pod sandbox; returns its id.
    pub async fn run_pod_sandbox(
        &self,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String, CriError> {
        let request = api::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.to_string(),
        };
        let response = self.runtime.clone().run_pod_sandbox(request).await;
        Ok(answer("RunPodSandbox", response)?.pod_sandbox_id)
    }

    /// Stops every container of the sandbox and tears its network down.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let request = api::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        answer(
            "StopPodSandbox",
            self.runtime.clone().stop_pod_sandbox(request).await,
        )?;
        Ok(())
    }

    /// Removes the sandbox and its containers.
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let request = api::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        answer(
            "RemovePodSandbox",
            self.runtime.clone().remove_pod_sandbox(request).await,
        )?;
        Ok(())
    }

    /// The sandbox's state, network (IP) and metadata.
    pub async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus, CriError> {
        let request = api::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        };
        let response = self.runtime.clone().pod_sandbox_status(request).await;
        required(
            "PodSandboxStatus",
            answer("PodSandboxStatus", response)?.status,
        )
    }

    /// The sandboxes the runtime knows, narrowed by `filter`.
    pub async fn list_pod_sandboxes(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>, CriError> {
        let request = api::ListPodSandboxRequest { filter };
        let response = self.runtime.clone().list_pod_sandbox(request).await;
        Ok(answer("ListPodSandbox", response)?.items)
    }

    /// Creates a container in the sandbox; returns its id.
    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let request = api::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let response = self.runtime.clone().create_container(request).await;
        Ok(answer("CreateContainer", response)?.container_id)
    }

    /// Starts a created container.
    pub async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let request = api::StartContainerRequest {
            container_id: id.to_string(),
        };
        answer(
            "StartContainer",
            self.runtime.clone().start_container(request).await,
        )?;
        Ok(())
    }

    /// Sends SIGTERM (or the image's stop signal), then SIGKILL after `timeout_secs`.
    pub async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), CriError> {
        let request = api::StopContainerRequest {
            container_id: id.to_string(),
            timeout: timeout_secs,
        };
        answer(
            "StopContainer",
            self.runtime.clone().stop_container(request).await,
        )?;
        Ok(())
    }

    /// Removes a container, stopping it first if it runs.
    pub async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let request = api::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        answer(
            "RemoveContainer",
            self.runtime.clone().remove_container(request).await,
        )?;
        Ok(())
    }

    /// The containers the runtime knows, narrowed by `filter`.
    pub async fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>, CriError> {
        let request = api::ListContainersRequest { filter };
        let response = self.runtime.clone().list_containers(request).await;
        Ok(answer("ListContainers", response)?.containers)
    }

    /// The container's state, exit code, timestamps and log path.
    pub async fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError> {
        let request = api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let response = self.runtime.clone().container_status(request).await;
        required(
            "ContainerStatus",
            answer("ContainerStatus", response)?.status,
        )
    }

    /// Runs `cmd` in the container and waits (at most `timeout_secs`, 0 for no limit).
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> Result<api::ExecSyncResponse, CriError> {
        let request = api::ExecSyncRequest {
            container_id: id.to_string(),
            cmd,
            timeout: timeout_secs,
        };
        answer("ExecSync", self.runtime.clone().exec_sync(request).await)
    }

    /// Prepares a streaming exec; returns the streaming server's URL for it.
    pub async fn exec(&self, request: api::ExecRequest) -> Result<String, CriError> {
        let response = self.runtime.clone().exec(request).await;
        Ok(answer("Exec", response)?.url)
    }

    /// Prepares a streaming attach; returns the streaming server's URL for it.
    pub async fn attach(&self, request: api::AttachRequest) -> Result<String, CriError> {
        let response = self.runtime.clone().attach(request).await;
        Ok(answer("Attach", response)?.url)
    }

    /// Prepares a port forward into a sandbox; returns the streaming server's URL for it.
    pub async fn port_forward(&self, request: api::PortForwardRequest) -> Result<String, CriError> {
        let response = self.runtime.clone().port_forward(request).await;
        Ok(answer("PortForward", response)?.url)
    }

    /// The image if the runtime holds it, `None` if it does not.
    pub async fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        let request = api::ImageStatusRequest {
            image: Some(image_spec(image)),
            verbose: false,
        };
        let response = self.images.clone().image_status(request).await;
        Ok(answer("ImageStatus", response)?.image)
    }

    /// Pulls the image; returns its reference (digest).
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        let request = api::PullImageRequest {
            image: Some(image_spec(image)),
            auth,
            sandbox_config,
        };
        let response = self.images.clone().pull_image(request).await;
        Ok(answer("PullImage", response)?.image_ref)
    }

    /// Every image the runtime holds.
    pub async fn list_images(&self) -> Result<Vec<api::Image>, CriError> {
        let request = api::ListImagesRequest { filter: None };
        let response = self.images.clone().list_images(request).await;
        Ok(answer("ListImages", response)?.images)
    }

    /// Usage of the containers the filter selects (CPU, memory, writable layer).
    pub async fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> Result<Vec<api::ContainerStats>, CriError> {
        let request = api::ListContainerStatsRequest { filter };
        let response = self.runtime.clone().list_container_stats(request).await;
        Ok(answer("ListContainerStats", response)?.stats)
    }

    /// Usage of the sandboxes the filter selects (CPU, memory, network, their containers).
    pub async fn list_pod_sandbox_stats(
        &self,
        filter: Option<api::PodSandboxStatsFilter>,
    ) -> Result<Vec<api::PodSandboxStats>, CriError> {
        let request = api::ListPodSandboxStatsRequest { filter };
        let response = self.runtime.clone().list_pod_sandbox_stats(request).await;
        Ok(answer("ListPodSandboxStats", response)?.stats)
    }

    /// Makes the runtime reopen the container's log file, after rotation renamed it; fails
    /// when the container does not run.
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), CriError> {
        let request = api::ReopenContainerLogRequest {
            container_id: id.to_string(),
        };
        let response = self.runtime.clone().reopen_container_log(request).await;
        answer("ReopenContainerLog", response)?;
        Ok(())
    }
}

/// The socket path of `unix:///path` or of a bare absolute path.
fn socket_path(endpoint: &str) -> Result<PathBuf, CriError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(CriError::BadEndpoint(endpoint.to_string()))
    }
}

/// The message of a call's response, or the call's status named by its operation.
fn answer<T>(
    op: &'static str,
    response: Result<tonic::Response<T>, tonic::Status>,
) -> Result<T, CriError> {
    response
        .map(tonic::Response::into_inner)
        .map_err(|source| CriError::Call { op, source })
}

/// A response field the runtime must set (the status of a status call).
fn required<T>(op: &'static str, field: Option<T>) -> Result<T, CriError> {
    field.ok_or_else(|| CriError::Call {
        op,
        source: tonic::Status::internal("the runtime's response carries no status"),
    })
}

fn image_spec(image: &str) -> api::ImageSpec {
    api::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_is_a_unix_url_or_an_absolute_path() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            socket_path("/tmp/x.sock").unwrap(),
            PathBuf::from("/tmp/x.sock")
        );
        for bad in ["tcp://127.0.0.1:1", "unix://relative.sock", "x.sock", ""] {
            assert!(
                matches!(socket_path(bad), Err(CriError::BadEndpoint(_))),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn connect_to_a_missing_socket_fails_with_connect() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("unix://{}/none.sock", dir.path().display());
        let err = Cri::connect(&endpoint)
            .await
            .err()
            .expect("no runtime there");
        assert!(matches!(&err, CriError::Connect { .. }), "{err:?}");
        assert!(err.to_string().contains("none.sock"), "{err}");
    }
}
