//! The embedded control plane driven by real clients: kubectl (the one on the machine) and the
//! `kube` crate, over HTTPS with the admin kubeconfig cloudcore writes.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Pki, Ports, cloud, kubectl, kubectl_ok as ok};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

/// Runs kubectl with `stdin` as the manifest (`-f -`).
fn apply_stdin(kubeconfig: &Path, verb: &str, manifest: &str) -> Output {
    e2e::kubectl_stdin(kubeconfig, &[verb, "-f", "-"], manifest)
}

fn success(out: &Output) -> String {
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: nginx
    image: nginx:1.27
";

const CONFIGMAP: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: fast
";

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wg]
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
";

const WIDGET: &str = "apiVersion: example.com/v1
kind: Widget
metadata:
  name: sprocket
spec:
  size: 3
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_the_embedded_control_plane() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let kc = cloud.running.kubeconfig().unwrap().to_path_buf();

    let namespaces = ok(&kc, &["get", "namespaces"]);
    for ns in ["default", "kube-system", "kube-node-lease", "kubeedge"] {
        assert!(namespaces.contains(ns), "{namespaces}");
    }
    assert!(
        namespaces.starts_with("NAME")
            && namespaces.contains("STATUS")
            && namespaces.contains("Active"),
        "{namespaces}"
    );

    // create (validated by default), then get with the table columns of a real cluster.
    let created = success(&apply_stdin(&kc, "create", POD));
    assert!(created.contains("pod/web created"), "{created}");
    let pods = ok(&kc, &["get", "pods"]);
    let header: Vec<&str> = pods.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{pods}"
    );
    assert!(
        pods.contains("web") && pods.contains("0/1") && pods.contains("Pending"),
        "{pods}"
    );

    // apply: create, then update in place.
    assert!(success(&apply_stdin(&kc, "apply", CONFIGMAP)).contains("configmap/settings created"));
    let changed = CONFIGMAP.replace("mode: fast", "mode: safe");
    assert!(
        success(&apply_stdin(&kc, "apply", &changed)).contains("configmap/settings configured")
    );
    assert_eq!(
        ok(
            &kc,
            &[
                "get",
                "configmap",
                "settings",
                "-o",
                "jsonpath={.data.mode}"
            ]
        ),
        "safe"
    );

    // label, and the three patch types.
    ok(&kc, &["label", "pod", "web", "tier=front"]);
    assert_eq!(
        ok(&kc, &["get", "pods", "-l", "tier=front", "-o", "name"]).trim(),
        "pod/web"
    );
    ok(
        &kc,
        &[
            "patch",
            "configmap",
            "settings",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"merged":"yes"}}"#,
        ],
    );
    ok(
        &kc,
        &[
            "patch",
            "configmap",
            "settings",
            "--type",
            "json",
            "-p",
            r#"[{"op":"add","path":"/data/json","value":"yes"}]"#,
        ],
    );
    ok(
        &kc,
        &[
            "patch",
            "pod",
            "web",
            "-p",
            r#"{"spec":{"containers":[{"name":"nginx","image":"nginx:1.28"}]}}"#,
        ],
    );
    let data = ok(
        &kc,
        &["get", "configmap", "settings", "-o", "jsonpath={.data}"],
    );
    assert!(
        data.contains("merged") && data.contains("json") && data.contains("safe"),
        "{data}"
    );
    assert_eq!(
        ok(
            &kc,
            &[
                "get",
                "pod",
                "web",
                "-o",
                "jsonpath={.spec.containers[0].image}"
            ]
        ),
        "nginx:1.28"
    );

    // describe reads the object and its events.
    let described = ok(&kc, &["describe", "pod", "web"]);
    assert!(
        described.contains("Name:")
            && described.contains("web")
            && described.contains("nginx:1.28"),
        "{described}"
    );

    // get -w sees a change as it happens.
    let mut watch = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["get", "configmaps", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    eventually("the watch lists what exists", WAIT, || {
        std::future::ready(lines.lock().unwrap().contains("settings"))
    })
    .await;
    // (imperative `kubectl create configmap` sends its body in protobuf)
    ok(&kc, &["create", "configmap", "fresh", "--from-literal=k=v"]);
    eventually("the watch shows the new object", WAIT, || {
        std::future::ready(lines.lock().unwrap().contains("fresh"))
    })
    .await;
    let _ = watch.kill();
    let _ = watch.wait();

    // a custom resource, with its printer column.
    assert!(success(&apply_stdin(&kc, "apply", CRD)).contains("created"));
    ok(
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=20s",
        ],
    );
    eventually("the widgets resource is served", WAIT, || {
        std::future::ready(kubectl(&kc, &["get", "widgets"]).status.success())
    })
    .await;
    assert!(
        success(&apply_stdin(&kc, "apply", WIDGET)).contains("widget.example.com/sprocket created")
    );
    let widgets = ok(&kc, &["get", "wg"]);
    assert!(
        widgets.contains("SIZE") && widgets.contains("sprocket") && widgets.contains('3'),
        "{widgets}"
    );

    // delete and wait.
    ok(&kc, &["delete", "pod", "web", "--wait=false"]);
    ok(&kc, &["wait", "--for=delete", "pod/web", "--timeout=20s"]);
    let missing = kubectl(&kc, &["get", "pod", "web"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    cloud.stop().await;
}
