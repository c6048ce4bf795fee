//! The embedded control plane's OpenAPI documents through real kubectls: `explain` of built-in
//! kinds (OpenAPI v3, and the protobuf v2 path of kubectl 1.27's `plaintext-openapiv2`) and of
//! a CRD's kind, `apply` refusing unknown fields (server-side strict validation, which
//! kubectl picks from the v3 PATCH operations) and patching from the published schemas.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Cloud, Pki, Ports, cloud};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);
const VERSIONED_DIR: &str = "/usr/lib/google-cloud-sdk/bin";
const KUBECTL_1_27: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.27";

/// The versioned kubectls installed beside the default one (`kubectl.1.27` ... `kubectl.1.33`).
fn versioned_kubectls() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(VERSIONED_DIR) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("kubectl.1."))
        })
        .collect();
    found.sort();
    found
}

/// A kubectl binary with its own cache directory (so no earlier run's documents are read).
struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
}

impl Kubectl {
    /// The kubectl on PATH, or `None` (with the reason printed) when there is none.
    fn on_path(cloud: &Cloud) -> Option<Kubectl> {
        if !e2e::recent_kubectl() {
            return None;
        }
        Some(Kubectl::at(Path::new("kubectl"), cloud))
    }

    fn at(bin: &Path, cloud: &Cloud) -> Kubectl {
        Kubectl {
            bin: bin.to_path_buf(),
            kubeconfig: cloud.running.kubeconfig().unwrap().to_path_buf(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write;
        let mut child = Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    }

    /// Runs kubectl, expects success, returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args, None);
        assert!(
            out.status.success(),
            "{} {args:?} failed: {}",
            self.bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn apply(&self, manifest: &str) -> Output {
        self.run(&["apply", "-f", "-"], Some(manifest))
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What `kubectl explain pods.spec.containers` must show, whatever its version.
fn assert_explains_containers(text: &str) {
    assert!(text.contains("KIND:") && text.contains("Pod"), "{text}");
    assert!(
        text.contains("List of containers belonging to the pod"),
        "{text}"
    );
    assert!(text.contains("image"), "{text}");
    assert!(text.contains("Container image name"), "{text}");
}

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: c
    image: nginx
    ports:
    - containerPort: 80
";

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    kind: Widget
    plural: widgets
    singular: widget
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        description: A widget made to order.
        properties:
          spec:
            type: object
            description: What the widget should be.
            properties:
              size:
                type: integer
                description: How big the widget is, in furlongs.
";

#[tokio::test(flavor = "multi_thread")]
async fn explain_prints_the_descriptions_of_built_in_fields() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let Some(kubectl) = Kubectl::on_path(&cloud) else {
        return;
    };
    assert_explains_containers(&kubectl.ok(&["explain", "pods.spec.containers"]));
    let meta = kubectl.ok(&["explain", "configmaps.metadata.name"]);
    assert!(
        meta.contains("Name must be unique within a namespace"),
        "{meta}"
    );

    let versioned = versioned_kubectls();
    if versioned.is_empty() {
        eprintln!("no versioned kubectl in {VERSIONED_DIR}: only the kubectl on PATH was tried");
    }
    for bin in versioned {
        let other = Kubectl::at(&bin, &cloud);
        assert_explains_containers(&other.ok(&["explain", "pods.spec.containers"]));
        // The v2 path: kubectl fetches /openapi/v2 as gnostic protobuf and parses it.
        let v2 = other.ok(&[
            "explain",
            "pods.spec.containers",
            "--output=plaintext-openapiv2",
        ]);
        assert_explains_containers(&v2);
    }
    if Path::new(KUBECTL_1_27).exists() {
        let old = Kubectl::at(Path::new(KUBECTL_1_27), &cloud);
        let recursive = old.ok(&[
            "explain",
            "pods.spec",
            "--recursive",
            "--output=plaintext-openapiv2",
        ]);
        assert!(recursive.contains("containerPort"), "{recursive}");
    }
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_refuses_unknown_fields_and_patches_from_the_schema() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let Some(kubectl) = Kubectl::on_path(&cloud) else {
        return;
    };
    apply_round(&kubectl, "web");
    // The oldest kubectl here too (every versioned one passes; one keeps the test short).
    if Path::new(KUBECTL_1_27).exists() {
        apply_round(&Kubectl::at(Path::new(KUBECTL_1_27), &cloud), "web-old");
    }
    cloud.stop().await;
}

/// Applies pod `name`: refused with an unknown field, created without, then patched (with a
/// strategic merge patch computed from the v3 schema) and refused again with an unknown field.
fn apply_round(kubectl: &Kubectl, name: &str) {
    let who = kubectl.bin.display();
    let pod = POD.replace("name: web\n", &format!("name: {name}\n"));
    let bad = pod.replace(
        "    image: nginx\n",
        "    image: nginx\n    imagePolicy: Always\n",
    );
    let out = kubectl.apply(&bad);
    assert!(!out.status.success(), "{who}: an unknown field was applied");
    let err = stderr(&out);
    assert!(err.contains("imagePolicy"), "{who}: {err}");

    let out = kubectl.apply(&pod);
    assert!(out.status.success(), "{who}: {}", stderr(&out));
    // At -v=5 kubectl logs it when it cannot compute the patch from the OpenAPI v3 schema.
    let changed = pod
        .replace("    app: web\n", "    app: web\n    tier: front\n")
        .replace("image: nginx", "image: nginx:1.27");
    let out = kubectl.run(&["apply", "-v=5", "-f", "-"], Some(&changed));
    let err = stderr(&out);
    assert!(out.status.success(), "{who}: {err}");
    assert!(
        !err.contains("OpenAPI V3 path") && !err.contains("error calculating patch"),
        "{who} fell back from the OpenAPI v3 schema: {err}"
    );
    let got = kubectl.ok(&[
        "get",
        "pod",
        name,
        "-o",
        "jsonpath={.metadata.labels.tier} {.spec.containers[0].image} {.spec.containers[0].ports[0].containerPort}",
    ]);
    assert_eq!(got, "front nginx:1.27 80", "{who}");
    // What the server answers passes its own strict check (`kubectl replace` sends it back).
    let current = kubectl.ok(&["get", "pod", name, "-o", "json"]);
    let out = kubectl.run(&["replace", "-f", "-"], Some(&current));
    assert!(out.status.success(), "{who}: {}", stderr(&out));
    // The same, refused when the patch carries an unknown field.
    let bad = changed.replace("    tier: front\n", "    tier: back\n  colour: red\n");
    let out = kubectl.apply(&bad);
    assert!(
        !out.status.success(),
        "{who}: an unknown field was patched in"
    );
    assert!(
        stderr(&out).contains("metadata.colour"),
        "{who}: {}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_shows_a_crd_schema_and_v2_is_served_as_protobuf() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;

    // The protobuf form, as kubectl asks for it.
    let client = cloud.kube().await;
    let req = http::Request::get("/openapi/v2")
        .header(
            "Accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.contains("protobuf"), "{content_type}");
    let body = resp.into_body().collect_bytes().await.unwrap();
    let needle = b"io.k8s.api.core.v1.Pod";
    assert!(body.windows(needle.len()).any(|w| w == needle));

    let Some(kubectl) = Kubectl::on_path(&cloud) else {
        return;
    };
    let out = kubectl.apply(CRD);
    assert!(out.status.success(), "{}", stderr(&out));
    eventually("kubectl explain shows the CRD schema", WAIT, || {
        let out = kubectl.run(&["explain", "widgets.spec"], None);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        std::future::ready(out.status.success() && text.contains("furlongs"))
    })
    .await;
    let text = kubectl.ok(&["explain", "widgets"]);
    assert!(text.contains("A widget made to order"), "{text}");
    if Path::new(KUBECTL_1_27).exists() {
        let old = Kubectl::at(Path::new(KUBECTL_1_27), &cloud);
        let v2 = old.ok(&["explain", "widgets.spec", "--output=plaintext-openapiv2"]);
        assert!(v2.contains("furlongs"), "{v2}");
    }
    // A custom object with an unknown field is refused too; a valid one applies.
    let widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: default\nspec:\n  size: 3\n";
    let out = kubectl.apply(widget);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = kubectl.apply(&widget.replace("  size: 3\n", "  size: 3\n  colour: red\n"));
    assert!(!out.status.success(), "an unknown field was applied");
    assert!(stderr(&out).contains("colour"), "{}", stderr(&out));
    cloud.stop().await;
}
