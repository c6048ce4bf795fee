//! Per-object cost of each way of serving a stored pod (`cargo test --release -p kapi --lib
//! -- --ignored --nocapture order_speed`): the figures BENCHMARKS.md's "Go field order" gives.

use std::time::Instant;

use super::super::{Served, value};
use super::differential::samples;
use super::reference;

#[test]
#[ignore = "speed"]
fn order_speed_per_stored_pod() {
    let (pod, ..) = samples().remove(0);
    let alphabetical = serde_json::to_vec(&pod).unwrap();
    let in_go_order = value(&pod);
    let served = Served::new("Pod", "v1");
    const N: u32 = 20_000;
    let time = |what: &str, f: &dyn Fn() -> usize| {
        let mut n = 0;
        let t = Instant::now();
        for _ in 0..N {
            n += f();
        }
        let each = t.elapsed() / N;
        println!("{what}: {each:?} per pod ({} bytes)", n / N as usize);
    };
    time("first writer (reference), alphabetical text", &|| {
        reference::object(&alphabetical, "Pod", "v1").unwrap().len()
    });
    time("one-pass writer, alphabetical text", &|| {
        served.object(&alphabetical).unwrap().len()
    });
    time("one-pass writer, Go-order text", &|| {
        served.object(&in_go_order).unwrap().len()
    });
    time("check of Go-order text (served as stored)", &|| {
        usize::from(served.is_written(&in_go_order)) * in_go_order.len()
    });
    time("serde peek of kind, apiVersion (before issue 28)", &|| {
        #[derive(serde::Deserialize)]
        struct Peek<'a> {
            #[serde(borrow)]
            kind: &'a str,
            #[serde(rename = "apiVersion", borrow)]
            _api_version: &'a str,
        }
        let p: Peek<'_> = serde_json::from_slice(&alphabetical).unwrap();
        p.kind.len() + alphabetical.len() - 3
    });
}
