//! `keadm revoke NODE` (on the cloud side): removes an edge node for good. It records the
//! revocation ([`bootstrap::revoke`]): every certificate issued for the node until now is
//! refused from then on (cloudhub closes and refuses its sessions, the certificate service its
//! renewals, edgecontroller does not register its Node again). Then it deletes the node's join
//! record (`kubectl delete csr kubeedge-node-NODE`) and its Node, so that the name may join
//! again with a new token and `keadm join`; that join gets a certificate the revocation does
//! not cover.

use bootstrap::{Timestamp, revoke, store};
use clap::Args;

use crate::step;
use crate::tokens::{KubeArgs, client};

#[derive(Args, Debug, Clone)]
pub struct RevokeArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    /// The node to revoke.
    pub node: String,
}

pub async fn run(args: &RevokeArgs) -> anyhow::Result<()> {
    let node = &args.node;
    if !pki::valid_node_name(node) {
        anyhow::bail!("{node:?} is not a valid node name");
    }
    let client = client(&args.kube).await?;
    let now = Timestamp::now();
    revoke::revoke_node(&client, node, now).await?;
    step(format!(
        "node {node:?} revoked at {now}: its certificates issued until now are refused (sessions closed within seconds, renewals refused)"
    ));
    let (record, node_existed) = revoke::delete_records(&client, node).await?;
    if record {
        step(format!(
            "deleted csr {} (its join record)",
            store::record_name(node)
        ));
    }
    if node_existed {
        step(format!("deleted node {node}"));
    }
    step(format!(
        "to join {node:?} again: `keadm gettoken` here, then `keadm reset` and `keadm join` on the machine"
    ));
    Ok(())
}
