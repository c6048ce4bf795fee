use super::*;

fn read(q: &str, watch: bool) -> Result<ReadParams, ApiError> {
    ReadParams::parse(&Params::parse(Some(q)), watch)
}

#[test]
fn values_are_url_decoded_and_first_wins() {
    let p = Params::parse(Some(
        "labelSelector=%21service.kubernetes.io%2Fheadless%2Capp+in+(a)&x=1&x=2",
    ));
    assert_eq!(
        p.get("labelSelector"),
        Some("!service.kubernetes.io/headless,app in (a)")
    );
    assert_eq!(p.get("x"), Some("1"));
    assert_eq!(p.all("x").count(), 2);
}

#[test]
fn booleans_follow_apiserver_conversion() {
    let p = Params::parse(Some("a=true&b=1&c=false&d=0&e=&f=False"));
    let flag = |k| p.flag(k);
    assert_eq!(
        [
            flag("a"),
            flag("b"),
            flag("c"),
            flag("d"),
            flag("e"),
            flag("f")
        ],
        [
            Some(true),
            Some(true),
            Some(false),
            Some(false),
            Some(true),
            Some(false)
        ]
    );
    assert_eq!(flag("missing"), None);
}

#[test]
fn list_start_follows_the_resource_version_table() {
    let start = |q| read(q, false).unwrap().list_start().unwrap();
    assert_eq!(start(""), Start::Latest);
    assert_eq!(start("resourceVersion=0"), Start::Latest);
    assert_eq!(start("resourceVersion=0&limit=500"), Start::Latest);
    assert_eq!(start("resourceVersion=7"), Start::NotOlderThan(7));
    assert_eq!(start("resourceVersion=7&limit=5"), Start::Exact(7));
    assert_eq!(
        start("resourceVersion=7&resourceVersionMatch=Exact"),
        Start::Exact(7)
    );
    assert_eq!(
        start("resourceVersion=7&limit=5&resourceVersionMatch=NotOlderThan"),
        Start::NotOlderThan(7)
    );
    let e = read("resourceVersion=x", false)
        .unwrap()
        .list_start()
        .unwrap_err();
    assert_eq!(e.code, 400);
}

#[test]
fn invalid_list_option_combinations_are_422() {
    for q in [
        "resourceVersionMatch=Exact",
        "resourceVersionMatch=Exact&resourceVersion=0",
        "resourceVersionMatch=Sometime&resourceVersion=1",
        "resourceVersionMatch=NotOlderThan&resourceVersion=1&continue=abc",
        "sendInitialEvents=true",
    ] {
        assert_eq!(read(q, false).unwrap_err().code, 422, "{q}");
    }
}

#[test]
fn watch_list_options_must_come_together() {
    for q in [
        "sendInitialEvents=true",
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        "resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        "sendInitialEvents=true&resourceVersionMatch=Exact&allowWatchBookmarks=true",
    ] {
        assert_eq!(read(q, true).unwrap_err().code, 422, "{q}");
    }
    let ok = read(
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        true,
    )
    .unwrap();
    assert_eq!(ok.send_initial_events, Some(true));
}

#[test]
fn dry_run_accepts_only_all() {
    assert!(Params::parse(Some("dryRun=All")).dry_run().unwrap());
    assert!(!Params::parse(None).dry_run().unwrap());
    assert_eq!(
        Params::parse(Some("dryRun=Some"))
            .dry_run()
            .unwrap_err()
            .code,
        400
    );
}
