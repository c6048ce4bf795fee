//! RBAC on the embedded control plane, over real TLS: a service account does what its bindings
//! grant and nothing else, bindings take effect (and stop) with the next request, a ClusterRole
//! aggregated into `view` grants through a `view` binding, anonymous callers see only public
//! info, the bootstrap policy comes back at restart, the review APIs answer, whoever writes
//! roles and bindings grants only what it holds, and `kubectl auth can-i` (with `--list` and
//! `--as`) / `kubectl auth whoami` work for the admin and for a service account.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Cloud, Pki, Ports, cloud, kubectl};
use k8s_openapi::api::authentication::v1::{
    SelfSubjectReview, TokenRequest, TokenReview, TokenReviewStatus,
};
use k8s_openapi::api::authorization::v1::{SelfSubjectAccessReview, SubjectAccessReview};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn code_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    refusal(r).code
}

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// Makes `namespaces` and service account `team/bot`; returns a client with a token of it.
async fn team_bot(cloud: &Cloud, namespaces: &[&str]) -> (kube::Client, String) {
    let admin = cloud.kube().await;
    let pp = PostParams::default();
    for ns in namespaces {
        let ns: Namespace = obj(json!({"metadata": {"name": ns}}));
        Api::<Namespace>::all(admin.clone())
            .create(&pp, &ns)
            .await
            .unwrap();
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(admin, "team");
    accounts
        .create(&pp, &obj(json!({"metadata": {"name": "bot"}})))
        .await
        .unwrap();
    let request: TokenRequest = obj(json!({"spec": {"audiences": []}}));
    let issued = accounts
        .create_token_request("bot", &pp, &request)
        .await
        .unwrap();
    let token = issued.status.expect("a token").token;
    (cloud.kube_with_token(&token).await, token)
}

/// What the API answers to `review`.
async fn reviewed(reviews: &Api<TokenReview>, review: TokenReview) -> TokenReviewStatus {
    let answered = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    answered.status.expect("a TokenReview's status")
}

fn configmap(name: &str) -> ConfigMap {
    obj(json!({"metadata": {"name": name}, "data": {"k": "v"}}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_does_what_its_role_grants_in_its_namespace_and_nothing_else() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    let (bot, _) = team_bot(&cloud, &["team", "other"]).await;
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(bot.clone(), "team");

    // Nothing granted: nothing allowed, not even reads (the old "reads all but secrets" is gone).
    let refused = refusal(cms.list(&ListParams::default()).await);
    assert_eq!((refused.code, refused.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        refused.message,
        "configmaps is forbidden: User \"system:serviceaccount:team:bot\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\""
    );
    let pods: Api<Pod> = Api::all(bot.clone());
    assert_eq!(code_of(pods.list(&ListParams::default()).await), 403);

    let role: Role = obj(json!({
        "metadata": {"name": "cm-writer"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create"]}],
    }));
    Api::<Role>::namespaced(admin.clone(), "team")
        .create(&pp, &role)
        .await
        .unwrap();
    let binding: RoleBinding = obj(json!({
        "metadata": {"name": "bot-writes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-writer"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
    }));
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), "team");
    bindings.create(&pp, &binding).await.unwrap();
    // A binding's roleRef is checked, and cannot change.
    let mut bad = binding.clone();
    bad.metadata.name = Some("bad".into());
    bad.role_ref.kind = "Robot".into();
    let refused = refusal(bindings.create(&pp, &bad).await);
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert!(
        refused
            .message
            .contains("roleRef.kind: Unsupported value: \"Robot\""),
        "{}",
        refused.message
    );
    let mut moved = bindings.get("bot-writes").await.unwrap();
    moved.role_ref.name = "other".into();
    let refused = refusal(bindings.replace("bot-writes", &pp, &moved).await);
    assert!(
        refused.message.contains("roleRef: Invalid value"),
        "{}",
        refused.message
    );

    // At once, without a restart: what the role says, in its namespace.
    cms.create(&pp, &configmap("made")).await.unwrap();
    let listed = cms.list(&ListParams::default()).await.unwrap();
    assert!(
        listed
            .iter()
            .any(|cm| cm.metadata.name.as_deref() == Some("made")),
        "{listed:?}"
    );
    cms.get("made").await.unwrap();
    let delete = refusal(cms.delete("made", &DeleteParams::default()).await);
    assert_eq!(
        delete.message,
        "configmaps \"made\" is forbidden: User \"system:serviceaccount:team:bot\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"team\""
    );
    let elsewhere: Api<ConfigMap> = Api::namespaced(bot.clone(), "other");
    assert_eq!(code_of(elsewhere.list(&ListParams::default()).await), 403);
    assert_eq!(code_of(elsewhere.create(&pp, &configmap("x")).await), 403);
    let everywhere: Api<ConfigMap> = Api::all(bot.clone());
    assert_eq!(code_of(everywhere.list(&ListParams::default()).await), 403);
    let secrets: Api<Secret> = Api::namespaced(bot.clone(), "team");
    assert_eq!(code_of(secrets.list(&ListParams::default()).await), 403);
    let team_pods: Api<Pod> = Api::namespaced(bot.clone(), "team");
    assert_eq!(code_of(team_pods.list(&ListParams::default()).await), 403);

    // The binding deleted, the right goes with it.
    bindings
        .delete("bot-writes", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(code_of(cms.list(&ListParams::default()).await), 403);
    assert_eq!(code_of(cms.create(&pp, &configmap("late")).await), 403);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_role_aggregated_into_view_grants_through_a_view_binding() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    let (bot, _) = team_bot(&cloud, &["team"]).await;
    let pp = PostParams::default();
    let binding: RoleBinding = obj(json!({
        "metadata": {"name": "viewers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
    }));
    Api::<RoleBinding>::namespaced(admin.clone(), "team")
        .create(&pp, &binding)
        .await
        .unwrap();
    // view (aggregated from system:aggregate-to-view at start) reads pods, not secrets.
    Api::<Pod>::namespaced(bot.clone(), "team")
        .list(&ListParams::default())
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(bot.clone(), "team");
    assert_eq!(code_of(secrets.list(&ListParams::default()).await), 403);
    assert_eq!(
        code_of(
            Api::<ConfigMap>::namespaced(bot.clone(), "team")
                .create(&pp, &configmap("x"))
                .await
        ),
        403
    );

    let secret_reader: ClusterRole = obj(json!({
        "metadata": {"name": "secret-reader",
                     "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
    }));
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    roles.create(&pp, &secret_reader).await.unwrap();
    testkit::eventually("view picks up the secret-reader rule", WAIT, || async {
        secrets.list(&ListParams::default()).await.is_ok()
    })
    .await;
    // The chain: view is aggregated into edit, edit into admin.
    for name in ["view", "edit", "admin"] {
        testkit::eventually(&format!("{name} holds the rule"), WAIT, || async {
            let role = roles.get(name).await.unwrap();
            role.rules.unwrap_or_default().iter().any(|r| {
                r.resources.as_deref() == Some(&["secrets".to_string()][..]) && r.verbs == ["list"]
            })
        })
        .await;
    }

    // The aggregated role removed, view loses the rule.
    roles
        .delete("secret-reader", &DeleteParams::default())
        .await
        .unwrap();
    testkit::eventually("view drops the secret-reader rule", WAIT, || async {
        matches!(secrets.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 403)
    })
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_callers_see_only_public_info_and_a_node_gets_what_rbac_adds() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let path = cloud.running.kubeconfig().unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info.token = None;
    let anonymous = kube::Client::try_from(config).unwrap();
    anonymous.apiserver_version().await.unwrap();
    let refused = refusal(
        Api::<Pod>::namespaced(anonymous.clone(), "default")
            .list(&ListParams::default())
            .await,
    );
    assert_eq!(
        refused.message,
        "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let discovery = refusal(anonymous.list_api_groups().await);
    assert_eq!(
        (discovery.code, discovery.message.as_str()),
        (
            403,
            "forbidden: User \"system:anonymous\" cannot get path \"/apis\""
        )
    );

    // A node: the node rules do not let it list namespaces; a ClusterRoleBinding does.
    let node = cloud.kube_as_node("n1").await;
    let namespaces: Api<Namespace> = Api::all(node);
    assert_eq!(code_of(namespaces.list(&ListParams::default()).await), 403);
    let admin = cloud.kube().await;
    let pp = PostParams::default();
    let role: ClusterRole = obj(json!({
        "metadata": {"name": "ns-lister"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}],
    }));
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = obj(json!({
        "metadata": {"name": "nodes-list-namespaces"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ns-lister"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
    }));
    Api::<ClusterRoleBinding>::all(admin)
        .create(&pp, &binding)
        .await
        .unwrap();
    namespaces.list(&ListParams::default()).await.unwrap();
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_review_apis_answer_and_are_authorized_themselves() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    let (bot, token) = team_bot(&cloud, &["team"]).await;
    let pp = PostParams::default();

    // TokenReview: the service-account token, the admin token, a bad one.
    let reviews: Api<TokenReview> = Api::all(admin.clone());
    let review = |t: &str| obj::<TokenReview>(json!({"spec": {"token": t}}));
    let st = reviewed(&reviews, review(&token)).await;
    let user = st.user.unwrap();
    assert_eq!(st.authenticated, Some(true));
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:team:bot")
    );
    let groups = user.groups.unwrap();
    for g in [
        "system:serviceaccounts",
        "system:serviceaccounts:team",
        "system:authenticated",
    ] {
        assert!(groups.iter().any(|x| x == g), "{groups:?}");
    }
    // Audiences: a token minted for `api` is valid for `api` only; a default-audience token
    // is the API's, not `api`'s.
    let api_default = "https://kubernetes.default.svc.cluster.local";
    assert_eq!(st.audiences.as_deref(), Some(&[api_default.to_owned()][..]));
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team");
    let for_api: TokenRequest = obj(json!({"spec": {"audiences": ["api"]}}));
    let api_token = accounts
        .create_token_request("bot", &pp, &for_api)
        .await
        .unwrap();
    let api_token = api_token.status.unwrap().token;
    let for_audiences = |t: &str, audiences: Value| {
        obj::<TokenReview>(json!({"spec": {"token": t, "audiences": audiences}}))
    };
    let st = reviewed(&reviews, for_audiences(&api_token, json!(["api", "other"]))).await;
    assert_eq!(st.authenticated, Some(true), "{st:?}");
    assert_eq!(st.audiences.as_deref(), Some(&["api".to_owned()][..]));
    let st = reviewed(&reviews, review(&api_token)).await;
    assert_ne!(
        st.authenticated,
        Some(true),
        "an `api` token is not the API's: {st:?}"
    );
    let st = reviewed(&reviews, for_audiences(&token, json!(["api"]))).await;
    assert_ne!(
        st.authenticated,
        Some(true),
        "a default-audience token is not `api`'s: {st:?}"
    );
    let admin_token = cloud.running.api().unwrap().token().to_owned();
    let st = reviewed(&reviews, review(&admin_token)).await;
    assert!(
        st.user
            .unwrap()
            .groups
            .unwrap()
            .contains(&"system:masters".to_string())
    );
    let st = reviewed(&reviews, review("not-a-token")).await;
    assert_eq!(st.authenticated, Some(false));
    // ... and nothing was stored: the reviews are not even listable.
    assert_eq!(code_of(reviews.list(&ListParams::default()).await), 405);

    // SubjectAccessReview about the bot, as the admin; the bot may not ask about others.
    let sar = |verb: &str| {
        obj::<SubjectAccessReview>(json!({"spec": {
            "user": "system:serviceaccount:team:bot",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "resourceAttributes": {"namespace": "team", "verb": verb, "resource": "configmaps"}}}))
    };
    let sars: Api<SubjectAccessReview> = Api::all(admin.clone());
    let st = sars
        .create(&pp, &sar("list"))
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(!st.allowed);
    let invalid = refusal(sars.create(&pp, &obj(json!({"spec": {"user": "x"}}))).await);
    assert_eq!(invalid.code, 422, "{invalid:?}");
    assert!(
        invalid.message.contains("spec.resourceAttributes"),
        "{}",
        invalid.message
    );
    let forbidden = refusal(
        Api::<SubjectAccessReview>::all(bot.clone())
            .create(&pp, &sar("list"))
            .await,
    );
    assert_eq!(forbidden.code, 403);

    // SelfSubjectAccessReview and SelfSubjectReview, as the bot.
    let ssar: SelfSubjectAccessReview = obj(json!({"spec": {
        "nonResourceAttributes": {"path": "/version", "verb": "get"}}}));
    let st = Api::<SelfSubjectAccessReview>::all(bot.clone())
        .create(&pp, &ssar)
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(st.allowed, "{st:?}");
    let reason = st.reason.unwrap();
    assert!(
        reason.starts_with("RBAC: allowed by ClusterRoleBinding")
            && reason.contains("system:authenticated"),
        "{reason}"
    );
    let me = Api::<SelfSubjectReview>::all(bot)
        .create(&pp, &obj(json!({})))
        .await
        .unwrap();
    let info = me.status.unwrap().user_info.unwrap();
    assert_eq!(
        info.username.as_deref(),
        Some("system:serviceaccount:team:bot")
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_policy_is_made_at_start_and_restored_at_restart() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let roles: Api<ClusterRole> = Api::all(cloud.kube().await);
    let basic = roles.get("system:basic-user").await.unwrap();
    let meta = &basic.metadata;
    assert_eq!(
        meta.annotations.as_ref().unwrap()["rbac.authorization.kubernetes.io/autoupdate"],
        "true"
    );
    assert_eq!(
        meta.labels.as_ref().unwrap()["kubernetes.io/bootstrapping"],
        "rbac-defaults"
    );
    for name in [
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:discovery",
        "system:controller:deployment-controller",
    ] {
        roles.get(name).await.unwrap();
    }
    let view = roles.get("view").await.unwrap();
    assert!(
        !view.rules.unwrap_or_default().is_empty(),
        "view is aggregated at start"
    );
    // An administrator trims an autoupdated role; the next start gives the rule back.
    let mut trimmed = basic.clone();
    trimmed.rules = Some(Vec::new());
    roles
        .replace("system:basic-user", &PostParams::default(), &trimmed)
        .await
        .unwrap();
    cloud.stop().await;

    let cloud = e2e::cloud(&pki, Desired::new(), Ports::default()).await;
    let roles: Api<ClusterRole> = Api::all(cloud.kube().await);
    let restored = roles.get("system:basic-user").await.unwrap();
    assert_eq!(restored.rules.unwrap_or_default().len(), 2);
    cloud.stop().await;
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A copy of the admin kubeconfig with `token` in the admin's place.
fn kubeconfig_with_token(cloud: &Cloud, token: &str, dir: &Path) -> PathBuf {
    let admin = cloud.running.kubeconfig().unwrap();
    let text = std::fs::read_to_string(admin).unwrap();
    let admin_token = cloud.running.api().unwrap().token();
    let path = dir.join("bot.kubeconfig");
    std::fs::write(&path, text.replace(admin_token, token)).unwrap();
    path
}

/// Whether this kubectl's `auth whoami` asks `authentication.k8s.io/v1` (1.28 and later;
/// earlier ones ask the alpha and beta versions this server does not serve, Debian's 1.20 has
/// no such command).
fn has_whoami_v1() -> bool {
    let Ok(out) = Command::new("kubectl")
        .args(["version", "--client", "-o", "json"])
        .output()
    else {
        return false;
    };
    let version: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let minor = version["clientVersion"]["minor"].as_str().unwrap_or("0");
    let minor: u32 = minor.trim_end_matches('+').parse().unwrap_or(0);
    version["clientVersion"]["major"] == "1" && minor >= 28
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_and_whoami_answer_for_the_admin_and_a_service_account() {
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("skipped: no kubectl on PATH");
        return;
    }
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin_kc = cloud.running.kubeconfig().unwrap().to_path_buf();
    let (_, token) = team_bot(&cloud, &["team"]).await;
    let dir = tempfile::tempdir().unwrap();
    let bot_kc = kubeconfig_with_token(&cloud, &token, dir.path());

    // The RBAC kinds print as kube-apiserver prints them.
    let bindings = kubectl(
        &admin_kc,
        &["get", "clusterrolebinding", "cluster-admin", "-o", "wide"],
    );
    let text = stdout(&bindings);
    for word in [
        "ROLE",
        "GROUPS",
        "ClusterRole/cluster-admin",
        "system:masters",
    ] {
        assert!(text.contains(word), "{text}");
    }
    let roles = stdout(&kubectl(&admin_kc, &["get", "clusterroles"]));
    assert!(
        roles.starts_with("NAME") && roles.contains("CREATED AT"),
        "{roles}"
    );
    assert!(roles.contains("system:basic-user"), "{roles}");

    let yes = kubectl(&admin_kc, &["auth", "can-i", "delete", "pods", "-A"]);
    assert_eq!(
        (stdout(&yes).as_str(), yes.status.success()),
        ("yes", true),
        "{}",
        String::from_utf8_lossy(&yes.stderr)
    );
    let no = kubectl(
        &bot_kc,
        &["auth", "can-i", "list", "configmaps", "-n", "team"],
    );
    assert_eq!((stdout(&no).as_str(), no.status.code()), ("no", Some(1)));
    let public = kubectl(&bot_kc, &["auth", "can-i", "get", "/version"]);
    assert_eq!(stdout(&public), "yes");

    let admin = cloud.kube().await;
    let role: Role = obj(json!({
        "metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"],
                   "resourceNames": []}],
    }));
    let pp = PostParams::default();
    Api::<Role>::namespaced(admin.clone(), "team")
        .create(&pp, &role)
        .await
        .unwrap();
    let binding: RoleBinding = obj(json!({
        "metadata": {"name": "bot-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
    }));
    Api::<RoleBinding>::namespaced(admin, "team")
        .create(&pp, &binding)
        .await
        .unwrap();
    let now = kubectl(
        &bot_kc,
        &["auth", "can-i", "list", "configmaps", "-n", "team"],
    );
    assert_eq!(stdout(&now), "yes");
    let not_there = kubectl(
        &bot_kc,
        &["auth", "can-i", "list", "configmaps", "-n", "default"],
    );
    assert_eq!(stdout(&not_there), "no");
    // Impersonation: the admin may act as the bot; the bot may not act as anyone.
    let as_bot = [
        "auth",
        "can-i",
        "list",
        "configmaps",
        "-n",
        "team",
        "--as",
        "system:serviceaccount:team:bot",
    ];
    assert_eq!(stdout(&kubectl(&admin_kc, &as_bot)), "yes");
    let as_bot_elsewhere = kubectl(
        &admin_kc,
        &[
            "auth",
            "can-i",
            "list",
            "configmaps",
            "-n",
            "default",
            "--as",
            "system:serviceaccount:team:bot",
        ],
    );
    assert_eq!(stdout(&as_bot_elsewhere), "no");
    let climbing = kubectl(&bot_kc, &["get", "pods", "--as", "admin"]);
    let stderr = String::from_utf8_lossy(&climbing.stderr);
    assert!(
        !climbing.status.success() && stderr.contains("cannot impersonate resource \"users\""),
        "{stderr}"
    );

    let list = kubectl(&bot_kc, &["auth", "can-i", "--list", "-n", "team"]);
    let listed = stdout(&list);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    assert!(
        listed.contains("configmaps") && listed.contains("[get list]"),
        "{listed}"
    );
    assert!(
        listed.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{listed}"
    );
    assert!(listed.contains("/version"), "{listed}");
    assert!(!listed.contains("secrets"), "{listed}");

    if !has_whoami_v1() {
        eprintln!("kubectl auth whoami not checked: this kubectl asks no authentication.k8s.io/v1");
        cloud.stop().await;
        return;
    }
    let me = kubectl(&bot_kc, &["auth", "whoami", "-o", "json"]);
    assert!(
        me.status.success(),
        "{}",
        String::from_utf8_lossy(&me.stderr)
    );
    let me: Value = serde_json::from_str(&stdout(&me)).unwrap();
    assert_eq!(
        me["status"]["userInfo"]["username"],
        "system:serviceaccount:team:bot"
    );
    let alice = kubectl(
        &admin_kc,
        &["auth", "whoami", "--as", "alice", "--as-group", "devs"],
    );
    let text = stdout(&alice);
    assert!(
        text.contains("alice") && text.contains("devs") && text.contains("system:authenticated"),
        "{text}"
    );
    let admin_me = kubectl(&admin_kc, &["auth", "whoami"]);
    let text = stdout(&admin_me);
    assert!(
        text.contains("admin") && text.contains("system:masters"),
        "{text}"
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_write_roles_and_bindings_grants_only_what_it_holds() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    let (bot, _) = team_bot(&cloud, &["team"]).await;
    let pp = PostParams::default();
    let writer: Role = obj(json!({
        "metadata": {"name": "rbac-writer"},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
                   "verbs": ["create", "get", "patch", "update"]}],
    }));
    Api::<Role>::namespaced(admin.clone(), "team")
        .create(&pp, &writer)
        .await
        .unwrap();
    let binding = |name: &str, kind: &str, role: &str| -> RoleBinding {
        obj(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
        }))
    };
    Api::<RoleBinding>::namespaced(admin, "team")
        .create(&pp, &binding("bot-writes-rbac", "Role", "rbac-writer"))
        .await
        .unwrap();

    let roles: Api<Role> = Api::namespaced(bot.clone(), "team");
    let secrets_role: Role = obj(json!({
        "metadata": {"name": "secret-reader"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
    }));
    let refused = refusal(roles.create(&pp, &secrets_role).await);
    assert_eq!(refused.code, 403);
    assert!(
        refused
            .message
            .contains("is attempting to grant RBAC permissions not currently held"),
        "{}",
        refused.message
    );
    // What it holds, it may hand on.
    let rbac_reader: Role = obj(json!({
        "metadata": {"name": "rbac-reader"},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["get"]}],
    }));
    roles.create(&pp, &rbac_reader).await.unwrap();
    // Not by a patch either.
    let widen = json!({"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]});
    let patched = roles
        .patch(
            "rbac-reader",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&widen),
        )
        .await;
    assert_eq!(code_of(patched), 403);

    let bindings: Api<RoleBinding> = Api::namespaced(bot.clone(), "team");
    let to_admin = bindings
        .create(&pp, &binding("bot-admin", "ClusterRole", "admin"))
        .await;
    assert_eq!(code_of(to_admin), 403);
    bindings
        .create(&pp, &binding("bot-reads-rbac", "Role", "rbac-reader"))
        .await
        .unwrap();
    // Its own Secret read is still refused: nothing was escalated.
    let secrets: Api<Secret> = Api::namespaced(bot, "team");
    assert_eq!(code_of(secrets.get("any").await), 403);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletecollection_is_its_own_verb() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    let (bot, _) = team_bot(&cloud, &["team"]).await;
    let pp = PostParams::default();
    let admin_cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "team");
    for name in ["a", "b"] {
        admin_cms.create(&pp, &configmap(name)).await.unwrap();
    }
    let grant = |verbs: Value| {
        let admin = admin.clone();
        async move {
            let role: Role = obj(json!({"metadata": {"name": "cm"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]}));
            let roles: Api<Role> = Api::namespaced(admin.clone(), "team");
            let _ = roles.delete("cm", &DeleteParams::default()).await;
            roles.create(&PostParams::default(), &role).await.unwrap();
        }
    };
    let binding: RoleBinding = obj(json!({
        "metadata": {"name": "bot-cm"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
    }));
    Api::<RoleBinding>::namespaced(admin.clone(), "team")
        .create(&pp, &binding)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(bot.clone(), "team");

    // `delete` of each object is not `deletecollection`.
    grant(json!(["list", "delete"])).await;
    let refused = refusal(
        cms.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .map(|_| ()),
    );
    assert_eq!(refused.code, 403);
    assert!(
        refused
            .message
            .contains("cannot deletecollection resource \"configmaps\""),
        "{}",
        refused.message
    );
    // `deletecollection` alone deletes the collection.
    grant(json!(["list", "deletecollection"])).await;
    cms.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    // (kube-root-ca.crt is published again at once.)
    let left = admin_cms.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = left
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    assert!(!names.contains(&"a") && !names.contains(&"b"), "{names:?}");
    cloud.stop().await;
}
