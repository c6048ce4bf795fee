//! Inventory and digest.

use objstore::{Digest, InventoryFilter, NewObject, ObjKey};

use crate::common::{TempStore, pod, pod_key};

#[tokio::test]
async fn digest_is_equal_for_the_same_content_written_in_different_orders() {
    let (one, two) = (TempStore::new(), TempStore::new());
    for i in 0..50 {
        let name = format!("p{i}");
        one.store
            .put(pod_key("ns", &name), pod(&name, "n1", i))
            .await
            .unwrap();
    }
    one.store
        .put(
            ObjKey::new("nodes", "", "n1"),
            NewObject::from_value("{}").resource_version("7"),
        )
        .await
        .unwrap();
    one.store.delete(&pod_key("ns", "p3")).await.unwrap();

    two.store
        .put(
            ObjKey::new("nodes", "", "n1"),
            NewObject::from_value("{}").resource_version("7"),
        )
        .await
        .unwrap();
    for i in (0..50).rev() {
        let name = format!("p{i}");
        // A stale version first, then the final one.
        two.store
            .put(pod_key("ns", &name), pod(&name, "n2", 999))
            .await
            .unwrap();
        if i != 3 {
            two.store
                .put(pod_key("ns", &name), pod(&name, "n1", i))
                .await
                .unwrap();
        }
    }
    two.store.delete(&pod_key("ns", "p3")).await.unwrap();

    let all = InventoryFilter::default();
    let (d1, d2) = (
        one.store.digest(all.clone()).await.unwrap(),
        two.store.digest(all.clone()).await.unwrap(),
    );
    assert_eq!(d1, d2);
    assert_ne!(d1, Digest::EMPTY);
    assert_ne!(one.store.revision(), two.store.revision());

    // The cloud computes the same digest from its own list of (key, rv).
    let cloud: Vec<(ObjKey, String)> = (0..50)
        .filter(|i| *i != 3)
        .map(|i| (pod_key("ns", &format!("p{i}")), i.to_string()))
        .chain([(ObjKey::new("nodes", "", "n1"), "7".to_owned())])
        .collect();
    let cloud_digest = wire::digest(cloud.iter().map(|(k, rv)| {
        (
            wire::object_key(&k.resource, Some(&k.namespace), &k.name),
            rv,
        )
    }));
    assert_eq!(cloud_digest, d1);

    two.store
        .put(pod_key("ns", "p7"), pod("p7", "n1", 8))
        .await
        .unwrap();
    assert_ne!(two.store.digest(all).await.unwrap(), d1);
}

#[tokio::test]
async fn inventory_lists_keys_and_versions_by_filter() {
    let t = TempStore::new();
    t.store
        .put(pod_key("a", "x"), pod("x", "n1", 3))
        .await
        .unwrap();
    t.store
        .put(pod_key("b", "y"), pod("y", "n1", 4))
        .await
        .unwrap();
    t.store
        .put(
            ObjKey::new("nodes", "", "n1"),
            NewObject::from_value("{}").resource_version("5"),
        )
        .await
        .unwrap();
    let mut pods = t
        .store
        .inventory(InventoryFilter {
            resource: Some("pods".into()),
            namespace: None,
        })
        .await
        .unwrap();
    pods.sort();
    assert_eq!(
        pods,
        [
            (pod_key("a", "x"), "3".to_owned()),
            (pod_key("b", "y"), "4".to_owned())
        ]
    );
    let in_b = InventoryFilter {
        resource: None,
        namespace: Some("b".into()),
    };
    assert_eq!(t.store.inventory(in_b).await.unwrap().len(), 1);
    assert_eq!(
        t.store
            .inventory(InventoryFilter::default())
            .await
            .unwrap()
            .len(),
        3
    );
}
