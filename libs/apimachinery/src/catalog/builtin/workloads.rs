//! Workloads: replication controllers and pod templates (core/v1), apps/v1, batch/v1,
//! autoscaling (v2 and v1) and policy/v1.

use super::super::{Column, ResourceInfo};
use super::template_columns;

pub(super) fn all() -> Vec<ResourceInfo> {
    vec![
        podtemplates(),
        replicationcontrollers(),
        deployments(),
        replicasets(),
        statefulsets(),
        daemonsets(),
        controllerrevisions(),
        jobs(),
        cronjobs(),
        horizontalpodautoscalers("v2"),
        horizontalpodautoscalers("v1"),
        poddisruptionbudgets(),
    ]
}

fn podtemplates() -> ResourceInfo {
    ResourceInfo::new("", "v1", "PodTemplate", "podtemplates", true).columns(vec![
        Column::name(),
        Column::new("Containers", "Names of each container in the template."),
        Column::new(
            "Images",
            "Images referenced by each container in the template.",
        ),
        Column::new("Pod Labels", "The labels of the pod template."),
    ])
}

fn replicationcontrollers() -> ResourceInfo {
    let mut columns = replica_columns("Replicas is the number of desired replicas.");
    columns.extend(template_columns(Some(
        "Selector is a label query over pods that should match the Replicas count.",
    )));
    ResourceInfo::new(
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        true,
    )
    .short_names(&["rc"])
    .categories(&["all"])
    .subresources(&["status", "scale"])
    .selectable(&["status.replicas"])
    .columns(columns)
}

fn deployments() -> ResourceInfo {
    let mut columns = vec![
        Column::name(),
        Column::new("Ready", "Number of the pod with ready state"),
        Column::new(
            "Up-to-date",
            "Total number of non-terminating pods targeted by this deployment that have the desired template spec.",
        ),
        Column::new(
            "Available",
            "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.",
        ),
        Column::age(),
    ];
    columns.extend(template_columns(Some(
        "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
    )));
    ResourceInfo::new("apps", "v1", "Deployment", "deployments", true)
        .short_names(&["deploy"])
        .categories(&["all"])
        .subresources(&["status", "scale"])
        .columns(columns)
}

fn replicasets() -> ResourceInfo {
    let mut columns = replica_columns(
        "Replicas is the number of desired pods. This is a pointer to distinguish between explicit zero and unspecified.",
    );
    columns.extend(template_columns(Some(
        "Selector is a label query over pods that should match the replica count.",
    )));
    ResourceInfo::new("apps", "v1", "ReplicaSet", "replicasets", true)
        .short_names(&["rs"])
        .categories(&["all"])
        .subresources(&["status", "scale"])
        .selectable(&["status.replicas"])
        .columns(columns)
}

/// `Desired`, `Current`, `Ready` between `Name` and `Age` (replica sets and controllers).
fn replica_columns(desired: &str) -> Vec<Column> {
    vec![
        Column::name(),
        Column::new("Desired", desired).type_("integer"),
        Column::new(
            "Current",
            "Replicas is the most recently observed number of replicas.",
        )
        .type_("integer"),
        Column::new(
            "Ready",
            "The number of ready replicas for this replica set.",
        )
        .type_("integer"),
        Column::age(),
    ]
}

fn statefulsets() -> ResourceInfo {
    let mut columns = vec![
        Column::name(),
        Column::new("Ready", "Number of the pod with ready state"),
        Column::age(),
    ];
    columns.extend(template_columns(None));
    ResourceInfo::new("apps", "v1", "StatefulSet", "statefulsets", true)
        .short_names(&["sts"])
        .categories(&["all"])
        .subresources(&["status", "scale"])
        .columns(columns)
}

fn daemonsets() -> ResourceInfo {
    let count = |name: &str, description: &str| Column::new(name, description).type_("integer");
    let mut columns = vec![
        Column::name(),
        count(
            "Desired",
            "The total number of nodes that should be running the daemon pod.",
        ),
        count(
            "Current",
            "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
        ),
        count(
            "Ready",
            "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.",
        ),
        count(
            "Up-to-date",
            "The total number of nodes that are running updated daemon pod.",
        ),
        count(
            "Available",
            "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available.",
        ),
        Column::new(
            "Node Selector",
            "NodeSelector is a selector which must be true for the pod to fit on a node.",
        ),
        Column::age(),
    ];
    columns.extend(template_columns(Some(
        "A label query over pods that are managed by the daemon set.",
    )));
    ResourceInfo::new("apps", "v1", "DaemonSet", "daemonsets", true)
        .short_names(&["ds"])
        .categories(&["all"])
        .subresources(&["status"])
        .columns(columns)
}

fn controllerrevisions() -> ResourceInfo {
    ResourceInfo::new(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        true,
    )
    .columns(vec![
        Column::name(),
        Column::new("Controller", "Controller of the object"),
        Column::new(
            "Revision",
            "Revision indicates the revision of the state represented by Data.",
        ),
        Column::age(),
    ])
}

fn jobs() -> ResourceInfo {
    let mut columns = vec![
        Column::name(),
        Column::new("Status", "Status of the job."),
        Column::new(
            "Completions",
            "The number of pods which reached phase Succeeded.",
        ),
        Column::new("Duration", "Time required to complete the job."),
        Column::age(),
    ];
    columns.extend(template_columns(Some(
        "A label query over pods that should match the pod count.",
    )));
    ResourceInfo::new("batch", "v1", "Job", "jobs", true)
        .categories(&["all"])
        .subresources(&["status"])
        .selectable(&["status.successful"])
        .columns(columns)
}

fn cronjobs() -> ResourceInfo {
    let mut columns = vec![
        Column::name(),
        Column::new("Schedule", "The schedule in Cron format."),
        Column::new("Timezone", "The time zone name for the given schedule."),
        Column::new(
            "Suspend",
            "This flag tells the controller to suspend subsequent executions.",
        )
        .type_("boolean"),
        Column::new("Active", "A list of pointers to currently running jobs.").type_("integer"),
        Column::new(
            "Last Schedule",
            "Information when was the last time the job was successfully scheduled.",
        ),
        Column::age(),
    ];
    columns.extend(template_columns(Some(
        "A label query over pods that should match the pod count.",
    )));
    ResourceInfo::new("batch", "v1", "CronJob", "cronjobs", true)
        .short_names(&["cj"])
        .categories(&["all"])
        .subresources(&["status"])
        .columns(columns)
}

/// Served as `v2` (preferred) and `v1`, one stored collection; every read shows the version
/// asked for and a write applies to that version's view ([`crate::convert`]).
fn horizontalpodautoscalers(version: &str) -> ResourceInfo {
    ResourceInfo::new(
        "autoscaling",
        version,
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
    )
    .short_names(&["hpa"])
    .categories(&["all"])
    .subresources(&["status"])
    .columns(vec![
        Column::name(),
        Column::new(
            "Reference",
            "scaleTargetRef points to the target resource to scale.",
        ),
        Column::new(
            "Targets",
            "metrics contains the specifications for which to use to calculate the desired replica count.",
        ),
        Column::new(
            "MinPods",
            "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.",
        ),
        Column::new(
            "MaxPods",
            "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up.",
        ),
        Column::new(
            "Replicas",
            "currentReplicas is current number of replicas of pods managed by this autoscaler.",
        ),
        Column::age(),
    ])
}

fn poddisruptionbudgets() -> ResourceInfo {
    ResourceInfo::new(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
    )
    .short_names(&["pdb"])
    .subresources(&["status"])
    .columns(vec![
        Column::name(),
        Column::new(
            "Min Available",
            "The minimum number of pods that must be available.",
        ),
        Column::new(
            "Max Unavailable",
            "The maximum number of pods that may be unavailable.",
        ),
        Column::new(
            "Allowed Disruptions",
            "Calculated number of pods that may be disrupted at this time.",
        )
        .type_("integer"),
        Column::age(),
    ])
}
