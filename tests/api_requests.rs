//! The request counter on a real kube client, against the control plane.

use std::collections::BTreeMap;

use futures::TryStreamExt as _;
use imagemap::api_requests::{RequestKey, client_with_counter};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Config;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, WatchParams};

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn counts_a_real_clients_requests() {
    let config = Config::infer().await.unwrap();
    let (client, requests) = client_with_counter(config).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let key = |verb, resource: &str, code: &str| RequestKey {
        verb,
        resource: resource.to_owned(),
        code: code.to_owned(),
    };

    namespaces.list(&ListParams::default()).await.unwrap();
    namespaces
        .list(&ListParams::default().limit(500))
        .await
        .unwrap();
    namespaces.get("default").await.unwrap();
    assert!(
        config_maps
            .get_opt("api-requests-absent")
            .await
            .unwrap()
            .is_none()
    );
    let name = format!("api-requests-{}", std::process::id());
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    config_maps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    assert!(
        config_maps
            .create(&PostParams::default(), &cm)
            .await
            .is_err()
    );
    config_maps
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let stream = config_maps
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap();
    let _ = stream.try_collect::<Vec<_>>().await;

    let snapshot = requests.snapshot();
    let expected: BTreeMap<RequestKey, u64> = [
        (key("list", "namespaces", "200"), 2),
        (key("get", "namespaces", "200"), 1),
        (key("get", "configmaps", "404"), 1),
        (key("create", "configmaps", "201"), 1),
        (key("create", "configmaps", "409"), 1),
        (key("delete", "configmaps", "200"), 1),
        (key("watch", "configmaps", "200"), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(snapshot, expected);
    assert_eq!(requests.writes(), 3);
    assert_eq!(requests.count(|k| k.verb == "list"), 2);
    // The LIST without a limit is recorded apart; the one with `limit=500` is not.
    assert_eq!(
        requests.unbounded_lists(),
        BTreeMap::from([("namespaces".to_string(), 1)])
    );
}
