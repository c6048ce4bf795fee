//! The CustomResourceDefinition of EdgeApplication: KubeEdge's group, version, names and
//! fields (`build/crds/apps/apps_v1alpha1_edgeapplication.yaml`), with a status subresource.
//! Two deliberate differences, both accepting what KubeEdge's own documents write: image
//! components in any letter case (its proposal writes `registry`), and duplicate
//! `targetNodeGroups` names refused at admission (kubeedge #4860, #5497).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

/// The EdgeApplication CRD.
pub(crate) fn crd() -> CustomResourceDefinition {
    let doc = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "edgeapplications.apps.kubeedge.io"},
        "spec": {
            "group": "apps.kubeedge.io",
            "names": {
                "kind": "EdgeApplication",
                "listKind": "EdgeApplicationList",
                "plural": "edgeapplications",
                "singular": "edgeapplication",
                "shortNames": ["eapp"],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "description": "EdgeApplication deploys its manifests once per target node group.",
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec(),
                        "status": status(),
                    },
                }},
            }],
        },
    });
    serde_json::from_value(doc).expect("the EdgeApplication CRD literal is a valid CRD")
}

/// `spec`.
fn spec() -> Value {
    json!({
        "type": "object",
        "required": ["workloadScope"],
        "properties": {
            "workloadTemplate": {
                "type": "object",
                "properties": {"manifests": {
                    "type": "array",
                    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }},
            },
            "workloadScope": {
                "type": "object",
                "properties": {
                    "targetNodeGroups": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {"name": {"type": "string"}, "overriders": overriders()},
                        },
                    },
                    "targetNodeLabels": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "labelSelector": label_selector(),
                                "overriders": overriders(),
                            },
                        },
                    },
                },
            },
        },
    })
}

/// `overriders`.
fn overriders() -> Value {
    let container = |operators: &[&str], value: Value| {
        json!({
            "type": "array",
            "items": {
                "type": "object",
                "required": ["containerName", "operator"],
                "properties": {
                    "containerName": {"type": "string"},
                    "operator": {"type": "string", "enum": operators},
                    "value": value,
                },
            },
        })
    };
    let strings = json!({"type": "array", "items": {"type": "string"}});
    let env = json!({"type": "array", "items": {
        "type": "object", "required": ["name"], "x-kubernetes-preserve-unknown-fields": true,
        "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
    }});
    json!({
        "type": "object",
        "properties": {
            "replicas": {"type": "integer", "minimum": 0},
            "imageOverriders": {"type": "array", "items": {
                "type": "object",
                "required": ["component", "operator"],
                "properties": {
                    "component": {"type": "string", "enum":
                        ["Registry", "Repository", "Tag", "registry", "repository", "tag"]},
                    "operator": {"type": "string", "enum": ["add", "remove", "replace"]},
                    "value": {"type": "string"},
                    "predicate": {"type": "object", "required": ["path"],
                        "properties": {"path": {"type": "string"}}},
                },
            }},
            "envOverriders": container(&["add", "remove", "replace"], env),
            "commandOverriders": container(&["add", "remove"], strings.clone()),
            "argsOverriders": container(&["add", "remove"], strings),
            "resourcesOverriders": {"type": "array", "items": {
                "type": "object",
                "required": ["containerName"],
                "properties": {
                    "containerName": {"type": "string"},
                    "value": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                },
            }},
        },
    })
}

/// A `LabelSelector`.
fn label_selector() -> Value {
    json!({
        "type": "object",
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {"type": "array", "items": {
                "type": "object",
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            }},
        },
    })
}

/// `status`.
fn status() -> Value {
    json!({
        "type": "object",
        "properties": {"workloadStatus": {"type": "array", "items": {
            "type": "object",
            "required": ["identifier"],
            "properties": {
                "conditions": {"type": "string", "enum": ["Processing", "Available"]},
                "identifier": {
                    "type": "object",
                    "required": ["ordinal"],
                    "properties": {
                        "ordinal": {"type": "integer", "minimum": 0},
                        "group": {"type": "string"},
                        "version": {"type": "string"},
                        "kind": {"type": "string"},
                        "resource": {"type": "string"},
                        "namespace": {"type": "string"},
                        "name": {"type": "string"},
                    },
                },
            },
        }}},
    })
}
