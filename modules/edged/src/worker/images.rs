//! A pod worker's images: present, pulled per the policy, or backed off after failed pulls.

use super::*;

impl Worker {
    /// The image is present, or pulled per the policy; an offline node never fails a pod whose
    /// image is present, whatever the policy says.
    pub(super) async fn ensure_image(
        &mut self,
        image: &str,
        policy: Option<&str>,
        auth: Option<cri::api::AuthConfig>,
        involved: &Involved,
    ) -> Result<(), EdgedError> {
        let cri = &self.shared.cri;
        let present = cri.image_status(image).await?.is_some();
        let policy = policy.unwrap_or_else(|| default_pull_policy(image));
        let online = self.shared.online();
        if present && policy != "Always" {
            // Pulled since by another pod, or loaded by hand: no back-off to keep.
            self.pulls.remove(image);
        }
        match (policy, present) {
            ("Never", true) | ("IfNotPresent", true) => return Ok(()),
            ("Never", false) => {
                return Err(EdgedError::pod(
                    "ErrImageNeverPull",
                    format!("container image \"{image}\" is not present with pull policy of Never"),
                ));
            }
            (_, true) if !online => {
                tracing::info!(
                    image,
                    "offline: using the image present on the node instead of pulling it"
                );
                let message = format!(
                    "Container image \"{image}\" already present on machine; not pulled: the node is offline"
                );
                self.events.normal(involved, "Pulled", &message);
                return Ok(());
            }
            _ => {}
        }
        let now = self.shared.clock.now();
        if let Some((_, until, why)) = self.pulls.get(image)
            && now < *until
        {
            if present {
                return Ok(());
            }
            // As the kubelet words it since 1.30: the back-off with the last pull's error.
            return Err(EdgedError::pod(
                "ImagePullBackOff",
                format!("Back-off pulling image \"{image}\": ErrImagePull: {why}"),
            ));
        }
        let pulled = tokio::time::timeout(PULL_TIMEOUT, cri.pull_image(image, auth, None)).await;
        match pulled {
            Ok(Ok(_)) => {
                self.pulls.remove(image);
                Ok(())
            }
            failed => {
                let failures = self.pulls.get(image).map_or(1, |f| f.0 + 1);
                let wait = (plan::BACKOFF_INITIAL * 2u32.pow((failures - 1).min(5)))
                    .min(plan::BACKOFF_MAX);
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the pull timed out".into(),
                };
                let pull = (failures, now + wait, why.clone());
                self.pulls.insert(image.to_string(), pull);
                if present {
                    tracing::warn!(image, error = %why, "pull failed; using the image present on the node");
                    let message = format!(
                        "Failed to pull image \"{image}\": {why}; using the image present on machine"
                    );
                    self.events.warning(involved, "Failed", &message);
                    return Ok(());
                }
                Err(EdgedError::pod(
                    "ErrImagePull",
                    format!("failed to pull image \"{image}\": {why}"),
                ))
            }
        }
    }
}

/// `Always` for an untagged or `:latest` image, else `IfNotPresent` (the API's defaulting).
pub(super) fn default_pull_policy(image: &str) -> &'static str {
    let name = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match name.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn pull_policy_defaults_follow_the_tag() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("registry.local:5000/busybox"), "Always");
        assert_eq!(
            default_pull_policy("registry.local/busybox:1.36"),
            "IfNotPresent"
        );
        assert_eq!(default_pull_policy("busybox@sha256:abc"), "IfNotPresent");
    }
}
