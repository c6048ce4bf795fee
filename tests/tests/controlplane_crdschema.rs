//! CustomResourceDefinition schemas enforced by the embedded control plane, driven with the
//! machine's kubectl: a custom resource of the wrong type or too short a name is refused with
//! a 422 naming the field, defaults appear, unknown fields are pruned, an
//! `x-kubernetes-validations` rule refuses what it does not hold for (on create, patch and
//! server-side apply), a CRD whose rule does not compile is refused, and a default added to
//! the CRD later is set on objects read from storage.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use e2e::{Pki, Ports, k8s_cloud};
use serde_json::Value;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(20);

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: RULE
            properties:
              replicas: {type: integer}
              name: {type: string, minLength: 3}
              mode: {type: string, default: fast}
              min: {type: integer}
              max: {type: integer}
";

fn crd(rule: &str) -> String {
    CRD.replace("RULE", &format!("\"{rule}\""))
}

fn widget(spec: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: default\nspec:\n{spec}"
    )
}

fn apply(kubeconfig: &Path, yaml: &str, extra: &[&str]) -> Output {
    let mut args = vec!["apply", "-f", "-"];
    args.extend_from_slice(extra);
    e2e::kubectl_stdin(kubeconfig, &args, yaml)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_writes_of_custom_resources_follow_the_crd_schema() {
    if !e2e::recent_kubectl() {
        return;
    }
    let pki = Pki::new();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let kc = cloud.running.kubeconfig().unwrap().to_path_buf();

    let out = apply(&kc, &crd("self.min <="), &[]);
    assert!(!out.status.success(), "a rule that does not compile");
    let err = stderr(&out);
    assert!(err.contains("x-kubernetes-validations[0].rule"), "{err}");
    assert!(err.contains("compilation failed"), "{err}");

    let out = apply(&kc, &crd("self.min <= self.max"), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    eventually("widgets are served", WAIT, || async {
        e2e::kubectl(&kc, &["get", "widgets"]).status.success()
    })
    .await;

    let out = apply(&kc, &widget("  replicas: two\n"), &[]);
    assert!(!out.status.success(), "replicas must be an integer");
    let err = stderr(&out);
    assert!(err.contains("spec.replicas"), "{err}");
    assert!(err.contains("must be of type integer"), "{err}");

    let out = apply(&kc, &widget("  name: ab\n"), &[]);
    assert!(!out.status.success(), "name is shorter than minLength");
    let err = stderr(&out);
    assert!(err.contains("spec.name"), "{err}");
    assert!(err.contains("should be at least 3 chars long"), "{err}");

    let out = apply(&kc, &widget("  min: 5\n  max: 1\n"), &[]);
    assert!(!out.status.success(), "the CEL rule refuses min > max");
    let err = stderr(&out);
    assert!(err.contains("failed rule: self.min <= self.max"), "{err}");

    let spec = "  replicas: 2\n  name: abc\n  min: 1\n  max: 3\n  color: red\n";
    let out = apply(&kc, &widget(spec), &["--validate=false"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json = e2e::kubectl_ok(&kc, &["get", "widget/w", "-o", "json"]);
    let w: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(w["spec"]["mode"], "fast", "the default is set: {w}");
    assert!(
        w["spec"].get("color").is_none(),
        "the unknown field is pruned: {w}"
    );
    assert_eq!(w["spec"]["replicas"], 2);

    let patch = r#"{"spec": {"min": 9}}"#;
    let out = e2e::kubectl(&kc, &["patch", "widget/w", "--type=merge", "-p", patch]);
    assert!(!out.status.success(), "an update is held to the rule too");
    assert!(stderr(&out).contains("failed rule"), "{}", stderr(&out));

    let w2 = widget("  replicas: two\n").replace("name: w\n", "name: w2\n");
    let out = apply(&kc, &w2, &["--server-side"]);
    assert!(!out.status.success(), "server-side apply is validated too");
    assert!(stderr(&out).contains("spec.replicas"), "{}", stderr(&out));

    // A default added to the CRD later shows on objects read from storage.
    let tier = "              tier: {type: string, default: gold}\n";
    let out = apply(&kc, &format!("{}{tier}", crd("self.min <= self.max")), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json = e2e::kubectl_ok(&kc, &["get", "widget/w", "-o", "json"]);
    let w: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(w["spec"]["tier"], "gold", "defaulted on read: {w}");
    cloud.stop().await;
}
