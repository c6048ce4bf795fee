use std::net::IpAddr;

use serde_json::json;

use super::*;
use crate::objects::{Service, Slice};

fn zone() -> Zone {
    let mut zone = Zone::new("cluster.local", 5).unwrap();
    let svc = |spec: serde_json::Value| Some(Service::from_json(&json!({ "spec": spec })));
    zone.set_service(
        "default",
        "redis",
        svc(json!({
            "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::10"],
            "ports": [{"name": "redis", "protocol": "TCP", "port": 6379}, {"port": 9121}]
        })),
    );
    zone.set_service(
        "default",
        "db",
        svc(json!({ "clusterIP": "None", "ports": [{"name": "pg", "port": 5432}] })),
    );
    zone.set_service(
        "default",
        "ext",
        svc(json!({ "type": "ExternalName", "externalName": "db.example.org." })),
    );
    zone.set_slice(
        "default",
        "db-abc",
        slice(
            "db",
            &[
                ("10.244.1.5", Some("db-0"), true),
                ("10.244.2.6", None, true),
                ("10.244.2.7", Some("db-2"), false),
            ],
        ),
    );
    zone
}

fn slice(service: &str, endpoints: &[(&str, Option<&str>, bool)]) -> Option<Slice> {
    let endpoints: Vec<_> = endpoints
        .iter()
        .map(|(ip, host, ready)| {
            json!({ "addresses": [ip], "hostname": host, "conditions": { "ready": ready } })
        })
        .collect();
    Slice::from_json(&json!({
        "metadata": { "labels": { "kubernetes.io/service-name": service } },
        "addressType": "IPv4",
        "ports": [{ "name": "pg", "protocol": "TCP", "port": 5433 }],
        "endpoints": endpoints,
    }))
}

fn name(text: &str) -> Name {
    fqdn(text).unwrap()
}

/// The answer's record data, as text, in order.
fn data(answer: &Answer) -> Vec<String> {
    match answer {
        Answer::Records { answers, .. } => answers.iter().map(|r| r.data().to_string()).collect(),
        other => panic!("expected records, got {other:?}"),
    }
}

#[test]
fn a_cluster_ip_service_answers_its_addresses_by_family() {
    let zone = zone();
    let n = name("redis.default.svc.cluster.local");
    assert_eq!(data(&zone.lookup(&n, RecordType::A)), ["10.96.0.10"]);
    assert_eq!(data(&zone.lookup(&n, RecordType::AAAA)), ["fd00::10"]);
    assert_eq!(zone.lookup(&n, RecordType::MX), Answer::NoData);
}

#[test]
fn names_are_matched_without_regard_to_case() {
    let zone = zone();
    let n = name("Redis.DEFAULT.svc.Cluster.Local");
    assert_eq!(data(&zone.lookup(&n, RecordType::A)), ["10.96.0.10"]);
}

#[test]
fn a_named_port_has_an_srv_record_pointing_at_the_service() {
    let zone = zone();
    let n = name("_redis._tcp.redis.default.svc.cluster.local");
    let answer = zone.lookup(&n, RecordType::SRV);
    assert_eq!(
        data(&answer),
        ["0 100 6379 redis.default.svc.cluster.local."]
    );
    let Answer::Records { additionals, .. } = answer else {
        unreachable!()
    };
    assert_eq!(additionals.len(), 2, "the target's A and AAAA come along");
}

#[test]
fn a_headless_service_answers_its_ready_endpoints_and_their_names() {
    let zone = zone();
    let mut all = data(&zone.lookup(&name("db.default.svc.cluster.local"), RecordType::A));
    all.sort();
    assert_eq!(all, ["10.244.1.5", "10.244.2.6"]);
    let host = name("db-0.db.default.svc.cluster.local");
    assert_eq!(data(&zone.lookup(&host, RecordType::A)), ["10.244.1.5"]);
    let dashed = name("10-244-2-6.db.default.svc.cluster.local");
    assert_eq!(data(&zone.lookup(&dashed, RecordType::A)), ["10.244.2.6"]);
    let unready = name("db-2.db.default.svc.cluster.local");
    assert_eq!(zone.lookup(&unready, RecordType::A), Answer::NxDomain);
}

#[test]
fn a_headless_service_srv_lists_each_endpoint_on_the_slice_port() {
    let zone = zone();
    let mut srv = data(&zone.lookup(
        &name("_pg._tcp.db.default.svc.cluster.local"),
        RecordType::SRV,
    ));
    srv.sort();
    assert_eq!(
        srv,
        [
            "0 100 5433 10-244-2-6.db.default.svc.cluster.local.",
            "0 100 5433 db-0.db.default.svc.cluster.local."
        ]
    );
}

#[test]
fn publish_not_ready_addresses_lists_unready_endpoints_too() {
    let mut zone = zone();
    let spec = json!({ "spec": { "clusterIP": "None", "publishNotReadyAddresses": true } });
    zone.set_service("default", "db", Some(Service::from_json(&spec)));
    let unready = name("db-2.db.default.svc.cluster.local");
    assert_eq!(data(&zone.lookup(&unready, RecordType::A)), ["10.244.2.7"]);
}

#[test]
fn pointer_records_name_cluster_ips_and_headless_endpoints() {
    let zone = zone();
    let ptr = |ip: &str| {
        let mut n = Name::from(ip.parse::<IpAddr>().unwrap());
        n.set_fqdn(true);
        zone.lookup(&n, RecordType::PTR)
    };
    assert_eq!(
        data(&ptr("10.96.0.10")),
        ["redis.default.svc.cluster.local."]
    );
    assert_eq!(data(&ptr("fd00::10")), ["redis.default.svc.cluster.local."]);
    assert_eq!(
        data(&ptr("10.244.1.5")),
        ["db-0.db.default.svc.cluster.local."]
    );
    assert_eq!(
        ptr("192.0.2.1"),
        Answer::NotOurs,
        "unknown reverse names are forwarded"
    );
}

#[test]
fn an_address_two_headless_services_share_keeps_the_other_pointer_when_one_goes() {
    let mut zone = zone();
    let spec = json!({ "spec": { "clusterIP": "None" } });
    zone.set_service("default", "db2", Some(Service::from_json(&spec)));
    zone.set_slice(
        "default",
        "db2-x",
        slice("db2", &[("10.244.1.5", Some("db-0"), true)]),
    );
    let mut n = Name::from("10.244.1.5".parse::<IpAddr>().unwrap());
    n.set_fqdn(true);
    let mut both = data(&zone.lookup(&n, RecordType::PTR));
    both.sort();
    assert_eq!(
        both,
        [
            "db-0.db.default.svc.cluster.local.",
            "db-0.db2.default.svc.cluster.local."
        ]
    );
    zone.set_service("default", "db2", None);
    assert_eq!(
        data(&zone.lookup(&n, RecordType::PTR)),
        ["db-0.db.default.svc.cluster.local."]
    );
}

#[test]
fn an_external_name_service_is_a_cname() {
    let zone = zone();
    let n = name("ext.default.svc.cluster.local");
    assert_eq!(data(&zone.lookup(&n, RecordType::A)), ["db.example.org."]);
    assert_eq!(
        zone.lookup(&n, RecordType::CNAME),
        zone.lookup(&n, RecordType::A)
    );
}

#[test]
fn missing_names_are_nxdomain_and_names_with_children_are_nodata() {
    let zone = zone();
    let nx = [
        "nope.default.svc.cluster.local",
        "redis.other.svc.cluster.local",
        "x.cluster.local",
    ];
    for n in nx {
        assert_eq!(
            zone.lookup(&name(n), RecordType::A),
            Answer::NxDomain,
            "{n}"
        );
    }
    let nodata = [
        "default.svc.cluster.local",
        "svc.cluster.local",
        "_tcp.redis.default.svc.cluster.local",
        "cluster.local",
    ];
    for n in nodata {
        assert_eq!(zone.lookup(&name(n), RecordType::A), Answer::NoData, "{n}");
    }
    assert_eq!(
        data(&zone.lookup(&name("cluster.local"), RecordType::SOA)).len(),
        1
    );
}

#[test]
fn names_outside_the_zone_are_not_ours() {
    let zone = zone();
    assert_eq!(
        zone.lookup(&name("example.org"), RecordType::A),
        Answer::NotOurs
    );
    assert_eq!(
        zone.lookup(
            &name("redis.default.svc.cluster.local.example.org"),
            RecordType::A
        ),
        Answer::NotOurs
    );
}

#[test]
fn removing_a_service_removes_its_names_and_empty_parents() {
    let mut zone = zone();
    for svc in ["redis", "db", "ext"] {
        zone.set_service("default", svc, None);
    }
    assert_eq!(
        zone.lookup(&name("redis.default.svc.cluster.local"), RecordType::A),
        Answer::NxDomain
    );
    assert_eq!(
        zone.lookup(&name("default.svc.cluster.local"), RecordType::A),
        Answer::NxDomain
    );
    assert!(zone.names.is_empty() && zone.existing.is_empty() && zone.owned.is_empty());
}

#[test]
fn an_endpoint_slice_change_replaces_the_headless_answers() {
    let mut zone = zone();
    zone.set_slice(
        "default",
        "db-abc",
        slice("db", &[("10.244.3.9", Some("db-0"), true)]),
    );
    let host = name("db-0.db.default.svc.cluster.local");
    assert_eq!(data(&zone.lookup(&host, RecordType::A)), ["10.244.3.9"]);
    let gone = name("10-244-2-6.db.default.svc.cluster.local");
    assert_eq!(zone.lookup(&gone, RecordType::A), Answer::NxDomain);
    zone.set_slice("default", "db-abc", None);
    assert_eq!(
        zone.lookup(&name("db.default.svc.cluster.local"), RecordType::A),
        Answer::NoData
    );
}

#[test]
fn pod_names_spell_their_address() {
    let zone = zone();
    let n = name("10-244-1-5.default.pod.cluster.local");
    assert_eq!(data(&zone.lookup(&n, RecordType::A)), ["10.244.1.5"]);
    assert_eq!(
        zone.lookup(&name("nope.default.pod.cluster.local"), RecordType::A),
        Answer::NxDomain
    );
}

#[test]
fn the_soa_serial_moves_with_every_change() {
    let mut zone = zone();
    let serial = |z: &Zone| match z.soa().data() {
        RData::SOA(soa) => soa.serial(),
        _ => unreachable!(),
    };
    let RData::SOA(soa) = zone.soa().data().clone() else {
        unreachable!()
    };
    assert_eq!(soa.mname().to_string(), "ns.dns.cluster.local.");
    let before = serial(&zone);
    zone.set_service("default", "redis", None);
    assert!(serial(&zone) > before);
}

#[test]
fn the_zone_tells_its_dns_schema_version() {
    let zone = zone();
    let n = name("dns-version.cluster.local");
    assert_eq!(data(&zone.lookup(&n, RecordType::TXT)), ["1.1.0"]);
}
