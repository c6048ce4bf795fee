//! How the embedded API server reaches a node's kubelet API: a stream cloudhub opens over the
//! node's own session (no other port, certificate or setting). Bound to cloudhub once it is up;
//! until then, and for a node with no session, the dial is refused at once by name.

use std::sync::{Arc, OnceLock};

use kapi::nodes::{DialError, NodeDialer, NodeStream};

/// The nodes' kubelet APIs through cloudhub's tunnels.
#[derive(Default)]
pub(crate) struct HubDialer {
    hub: OnceLock<cloudhub::Handle>,
}

impl HubDialer {
    /// Dials through `hub` from now on.
    pub(crate) fn bind(&self, hub: cloudhub::Handle) {
        let _ = self.hub.set(hub);
    }
}

#[async_trait::async_trait]
impl NodeDialer for HubDialer {
    async fn dial(&self, node: &str) -> Result<Box<dyn NodeStream>, DialError> {
        let not_connected = || DialError::NotConnected {
            node: node.to_owned(),
        };
        let hub = self.hub.get().ok_or_else(not_connected)?;
        match hub.open_tunnel(node).await {
            Ok(stream) => Ok(Box::new(stream)),
            Err(cloudhub::TunnelError::NotConnected { .. }) => Err(not_connected()),
            Err(e @ cloudhub::TunnelError::Open { .. }) => Err(DialError::Failed {
                node: node.to_owned(),
                reason: std::error::Error::source(&e)
                    .map(ToString::to_string)
                    .unwrap_or_else(|| e.to_string()),
            }),
        }
    }
}

/// A dialer shared by the API server and the metrics pipeline.
pub(crate) fn new() -> Arc<HubDialer> {
    Arc::new(HubDialer::default())
}
