//! `modules.cloudStream`: the kubelet-compatible HTTPS endpoint a real cluster's
//! kube-apiserver reaches the edge nodes' kubelet APIs through (KubeEdge's section name).

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `modules.cloudStream`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Serve the endpoint. Default false: the embedded control plane needs none, only a real
    /// cluster given in `kubeAPIConfig.kubeConfig` does.
    pub enable: bool,
    /// Address the endpoint listens on. Default `0.0.0.0`.
    pub address: IpAddr,
    /// Port the endpoint listens on (0: any). Default 10003 (KubeEdge's).
    pub stream_port: u16,
    /// The endpoint's serving certificate. Default `/etc/kubeedge/certs/stream.crt`; when
    /// neither it nor its key exists, cloudhub's CA issues one at start (for
    /// `advertiseAddress` and `dnsNames`) and writes both.
    pub tls_stream_cert_file: PathBuf,
    /// Its private key. Default `/etc/kubeedge/certs/stream.key`.
    pub tls_stream_private_key_file: PathBuf,
    /// IP addresses of the certificate made at start. Default empty: cloudHub's
    /// `advertiseAddress`.
    pub advertise_address: Vec<IpAddr>,
    /// DNS names of the certificate made at start. Default empty: cloudHub's `dnsNames`.
    pub dns_names: Vec<String>,
    /// The CA that signed kube-apiserver's kubelet client certificate
    /// (`--kubelet-client-certificate`; with kubeadm `/etc/kubernetes/pki/ca.crt`). Every
    /// client must present a certificate it signed. Required when enabled; default empty.
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: PathBuf,
    /// Common names a client certificate may have (kubeadm's is
    /// `kube-apiserver-kubelet-client`); any other gets `403`. Default empty: any certificate
    /// `clientCAFile` signed.
    pub allowed_common_names: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enable: false,
            address: IpAddr::from([0, 0, 0, 0]),
            stream_port: 10003,
            tls_stream_cert_file: "/etc/kubeedge/certs/stream.crt".into(),
            tls_stream_private_key_file: "/etc/kubeedge/certs/stream.key".into(),
            advertise_address: Vec::new(),
            dns_names: Vec::new(),
            client_ca_file: PathBuf::new(),
            allowed_common_names: Vec::new(),
        }
    }
}
