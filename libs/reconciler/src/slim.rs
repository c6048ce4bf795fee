//! What the shared pod cache keeps of a pod: what the scheduler and the workload and endpoint
//! controllers read, and nothing else (the cache holds every pod of the cluster once).

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

/// A pod without what no controller reads: its metadata without managed fields; of its spec
/// the node, scheduler, node selector, affinity, tolerations, overhead, and each container's
/// name, ports and resources; its status without the container states and images.
pub fn slim_pod(mut p: Pod) -> Pod {
    p.metadata.managed_fields = None;
    if let Some(spec) = p.spec.take() {
        p.spec = Some(PodSpec {
            node_name: spec.node_name,
            scheduler_name: spec.scheduler_name,
            node_selector: spec.node_selector,
            affinity: spec.affinity,
            tolerations: spec.tolerations,
            overhead: spec.overhead,
            containers: spec.containers.into_iter().map(slim_container).collect(),
            init_containers: spec
                .init_containers
                .map(|cs| cs.into_iter().map(slim_container).collect()),
            ..PodSpec::default()
        });
    }
    if let Some(status) = p.status.as_mut() {
        for cs in status.container_statuses.iter_mut().flatten() {
            cs.last_state = None;
            cs.state = None;
            cs.image = String::new();
            cs.image_id = String::new();
        }
        status.init_container_statuses = None;
    }
    p
}

/// A container's name, ports and resources.
fn slim_container(c: Container) -> Container {
    Container {
        name: c.name,
        ports: c.ports,
        resources: c.resources,
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_slim_pod_keeps_what_the_scheduler_reads_and_drops_the_rest() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "managedFields": [{"manager": "kubectl"}]},
            "spec": {
                "schedulerName": "default-scheduler",
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "containers": [{"name": "c", "image": "app:1", "command": ["run"],
                                "env": [{"name": "A", "value": "1"}],
                                "ports": [{"containerPort": 80, "hostPort": 8080}],
                                "resources": {"requests": {"cpu": "100m"}}}],
                "initContainers": [{"name": "i", "image": "init:1",
                                    "resources": {"requests": {"memory": "1Gi"}}}],
                "volumes": [{"name": "v", "emptyDir": {}}],
            },
        }))
        .unwrap();
        let slim = serde_json::to_value(slim_pod(pod)).unwrap();
        assert_eq!(
            slim["spec"],
            json!({
                "schedulerName": "default-scheduler",
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
                                "resources": {"requests": {"cpu": "100m"}}}],
                "initContainers": [{"name": "i", "resources": {"requests": {"memory": "1Gi"}}}],
            })
        );
        assert!(slim["metadata"].get("managedFields").is_none());
    }
}
