//! What a pod worker starts containers with: the objects their env reads, service-account
//! tokens, and the pod's volumes set up with them.

use super::*;

impl Worker {
    /// The configmaps and secrets the pod reads, and its volumes set up with them.
    pub(super) async fn inputs(&mut self, pod: &Pod, pod_ip: &str) -> Result<Inputs, EdgedError> {
        let mut refs = self.refs(pod).await?;
        self.fill_tokens(pod, &mut refs).await;
        let volumes = self.volumes(pod, &refs, pod_ip)?;
        Ok(Inputs { refs, volumes })
    }

    /// The service-account tokens the pod's projected volumes hold: the ones held, requested
    /// again when due; after a restart, the ones the volumes already hold on disk.
    pub(super) async fn fill_tokens(&mut self, pod: &Pod, refs: &mut Refs) {
        let wanted = tokens::wanted(pod);
        let keys = tokens::keys(&wanted);
        self.tokens.retain(|k, _| keys.contains(k));
        let root = &self.shared.config.root_directory;
        for (key, volume, path) in &wanted {
            if self.tokens.contains_key(key) {
                continue;
            }
            let file = volumes::volume_dir(root, &self.id.uid, "projected", volume).join(path);
            let held = std::fs::read_to_string(&file).ok();
            if let Some(token) = held.and_then(|v| Token::from_jwt(v.trim())) {
                self.tokens.insert(key.clone(), token);
            }
        }
        let now = apimachinery::time::now_unix();
        let mut due = None::<i64>;
        for key in &keys {
            if self.tokens.get(key).is_none_or(|t| now >= t.refresh_at()) {
                match self.request_token(pod, key).await {
                    Ok(token) => {
                        self.tokens.insert(key.clone(), token);
                    }
                    Err(e) => {
                        tracing::info!(account = %key.account, error = %e, "service-account token not issued; retrying");
                        due = Some(due.map_or(now + 10, |d| d.min(now + 10)));
                    }
                }
            }
            if let Some(t) = self.tokens.get(key) {
                refs.tokens
                    .insert(key.clone(), t.value.clone().into_bytes());
                due = Some(due.map_or(t.refresh_at(), |d| d.min(t.refresh_at())));
            }
        }
        self.token_due = due;
    }

    /// A token from the TokenRequest API, bound to the pod.
    pub(super) async fn request_token(
        &self,
        pod: &Pod,
        key: &TokenKey,
    ) -> Result<Token, EdgedError> {
        use k8s_openapi::api::authentication::v1::TokenRequest;
        use k8s_openapi::api::core::v1::ServiceAccount;
        let api: Api<ServiceAccount> =
            Api::namespaced(self.shared.client.clone(), &self.id.namespace);
        let audiences: Vec<&str> = [key.audience.as_str()]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let request: TokenRequest = serde_json::from_value(json!({
            "spec": {
                "audiences": audiences,
                "expirationSeconds": key.expiration,
                "boundObjectRef": {
                    "apiVersion": "v1", "kind": "Pod",
                    "name": pod.metadata.name, "uid": pod.metadata.uid,
                },
            },
        }))
        .expect("a TokenRequest from known fields");
        let answer = api
            .create_token_request(&key.account, &kube::api::PostParams::default(), &request)
            .await?;
        let value = answer.status.map(|s| s.token).unwrap_or_default();
        Token::from_jwt(&value).ok_or_else(|| {
            EdgedError::pod(
                "ContainerCreating",
                "the TokenRequest API answered no usable token",
            )
        })
    }

    /// The configmaps and secrets the pod's env and volumes read.
    pub(super) async fn refs(&self, pod: &Pod) -> Result<Refs, EdgedError> {
        let store = &self.shared.store;
        let ns = &self.id.namespace;
        let json = serde_json::to_value(pod).unwrap_or_default();
        let mut refs = Refs::default();
        let read = apimachinery::podrefs::readable(&json);
        for (resource, name) in read
            .into_iter()
            .filter(|(r, _)| matches!(*r, "configmaps" | "secrets"))
        {
            let Some(obj) = store
                .get(&ObjKey::new(resource, ns.as_str(), name.as_str()))
                .await?
            else {
                continue;
            };
            let value: Value = serde_json::from_slice(&obj.value).unwrap_or_default();
            match resource {
                "configmaps" => refs.configmaps.insert(name, value),
                "secrets" => refs.secrets.insert(name, value),
                _ => None,
            };
        }
        Ok(refs)
    }

    /// Adds the services a starting container's variables name: its namespace's and
    /// `default/kubernetes`.
    pub(super) async fn add_services(&self, refs: &mut Refs) -> Result<(), EdgedError> {
        let store = &self.shared.store;
        let ns = &self.id.namespace;
        let services = store
            .list(objstore::ListOptions {
                resource: "services".into(),
                filter: objstore::Filter {
                    namespace: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            })
            .await?;
        refs.services = services
            .items
            .iter()
            .filter_map(|o| serde_json::from_slice(&o.value).ok())
            .collect();
        if let Some(k) = store
            .get(&ObjKey::new("services", "default", "kubernetes"))
            .await?
        {
            refs.kubernetes = serde_json::from_slice(&k.value).ok();
        }
        Ok(())
    }

    /// Sets the pod's volumes up; returns each volume's host path and whether it is read-only
    /// API data. A volume that cannot be set up becomes every container's waiting reason, and
    /// `None` is returned.
    pub(super) fn volumes(
        &mut self,
        pod: &Pod,
        refs: &Refs,
        pod_ip: &str,
    ) -> Result<Option<BTreeMap<String, VolumePath>>, EdgedError> {
        let at = Placement {
            pod_ip: pod_ip.into(),
            host_ip: self.shared.host_ip.clone(),
        };
        let sources = match volumes::sources(pod, refs, &at) {
            Ok(s) => {
                self.waiting.retain(|_, w| w.0 != "ContainerCreating");
                s
            }
            Err(EdgedError::Pod { reason, message }) => {
                tracing::warn!(%message, "volume cannot be set up");
                let text = format!("MountVolume.SetUp failed: {message}");
                self.events
                    .warning(&Involved::pod(pod), "FailedMount", &text);
                for c in &spec::desired(pod, true).containers {
                    self.waiting
                        .insert(c.clone(), (reason.into(), message.clone()));
                }
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let root = &self.shared.config.root_directory;
        let mut paths = BTreeMap::new();
        for (name, (kind, source)) in sources {
            let path = volumes::set_up(root, &self.id.uid, &name, kind, &source)?;
            paths.insert(name, (path, matches!(source, volumes::Source::Files(_))));
        }
        Ok(Some(paths))
    }
}
