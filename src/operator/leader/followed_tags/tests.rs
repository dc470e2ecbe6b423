use super::*;
use crate::core::rules::{MatchKind, RuleRef};
use crate::operator::replica::digests::followed::FollowedBy;

impl From<&str> for Followed {
    fn from(reference: &str) -> Followed {
        k(reference)
    }
}

fn k(reference: &str) -> Followed {
    Followed {
        reference: reference.into(),
        by: FollowedBy::Cluster,
    }
}

const R: &str = "local:5000/app:dev";
const S: Duration = Duration::from_secs(30);

fn failed(why: &str) -> RegistryError {
    RegistryError {
        reference: R.into(),
        cause: crate::registry::Cause::Unreachable(why.into()),
        asked_as: None,
        via: None,
    }
}

fn vm(name: &str) -> NamespacedName {
    NamespacedName::new("dev", name)
}

#[test]
fn a_tag_is_checked_once_per_interval_however_many_vms_follow_it() {
    let tags = FollowedTags::default();
    let t0 = Instant::now();
    for i in 0..1000 {
        let lookups = tags.follow(&vm(&format!("vm-{i}")), vec![R.into()], t0);
        assert_eq!(lookups, [(k(R), Lookup::Pending)]);
    }
    assert_eq!(tags.len(), 1);
    assert_eq!(tags.take_due(t0).0, [k(R)]);
    let users = tags.checked(&k(R), Ok("sha256:1".into()), t0, S);
    assert_eq!(users.len(), 1000, "the first answer reaches every user");
    assert_eq!(tags.take_due(t0 + S / 2), (vec![], Some(t0 + S)));
    assert_eq!(tags.take_due(t0 + S).0, [k(R)]);
    // The same digest again: nobody to reconcile.
    assert!(
        tags.checked(&k(R), Ok("sha256:1".into()), t0 + S, S)
            .is_empty()
    );
    // It moved: every user.
    assert_eq!(
        tags.checked(&k(R), Ok("sha256:2".into()), t0 + S * 2, S)
            .len(),
        1000
    );
    assert_eq!(
        tags.follow(&vm("vm-0"), vec![R.into()], t0)[0].1,
        Lookup::Known {
            digest: Some("sha256:2".into()),
            error: None
        }
    );
}

#[test]
fn a_failed_check_keeps_the_last_digest_and_backs_off() {
    let tags = FollowedTags::default();
    let t0 = Instant::now();
    tags.follow(&vm("a"), vec![R.into()], t0);
    tags.checked(&k(R), Ok("sha256:1".into()), t0, S);
    let users = tags.checked(&k(R), Err(failed("connection refused")), t0 + S, S);
    assert_eq!(users, [vm("a")], "the error is news");
    assert_eq!(
        tags.follow(&vm("a"), vec![R.into()], t0)[0].1,
        Lookup::Known {
            digest: Some("sha256:1".into()),
            error: Some(failed("connection refused"))
        }
    );
    assert_eq!(tags.take_due(t0 + S).1, Some(t0 + S + S * 2));
    assert!(
        tags.checked(&k(R), Err(failed("connection refused")), t0 + S * 3, S)
            .is_empty()
    );
    assert_eq!(tags.take_due(t0 + S * 3).1, Some(t0 + S * 3 + S * 4));
    // Another error is news too: the VMs say what is wrong now.
    assert_eq!(
        tags.checked(&k(R), Err(failed("denied")), t0 + S * 7, S),
        [vm("a")]
    );
    // Answering again clears the error, and a move meanwhile is followed.
    assert_eq!(
        tags.checked(&k(R), Ok("sha256:3".into()), t0 + S * 9, S),
        [vm("a")]
    );
}

#[test]
fn tags_no_vm_follows_are_forgotten() {
    let tags = FollowedTags::default();
    let t0 = Instant::now();
    tags.follow(&vm("a"), vec![R.into(), "local:5000/other:dev".into()], t0);
    tags.follow(&vm("b"), vec![R.into()], t0);
    tags.follow(&vm("a"), vec![R.into()], t0);
    assert_eq!(tags.len(), 1);
    tags.forget(&vm("a"));
    assert_eq!(tags.len(), 1);
    tags.follow(&vm("b"), Vec::new(), t0);
    assert!(tags.is_empty());
    assert!(!tags.check_now(R, t0));
}

#[test]
fn new_credentials_make_every_tag_due_at_once() {
    let tags = FollowedTags::default();
    let t0 = Instant::now();
    assert_eq!(tags.check_all_now(t0), 0);
    tags.follow(&vm("a"), vec![R.into(), "local:5000/other:dev".into()], t0);
    tags.checked(&k(R), Ok("sha256:1".into()), t0, S);
    tags.checked(&k("local:5000/other:dev"), Err(failed("denied")), t0, S);
    assert!(tags.take_due(t0 + S / 2).0.is_empty());
    assert_eq!(tags.check_all_now(t0 + S / 2), 2);
    assert_eq!(tags.take_due(t0 + S / 2).0.len(), 2);
}

#[test]
fn a_tag_under_way_is_not_taken_twice_and_a_push_meanwhile_checks_it_again() {
    let tags = FollowedTags::default();
    let t0 = Instant::now();
    tags.follow(&vm("a"), vec![R.into()], t0);
    assert_eq!(tags.take_due(t0).0, [k(R)]);
    // Under way (a slow registry): not due again, and not counted as next.
    assert_eq!(tags.take_due(t0 + S * 10), (vec![], None));
    // A push while it is under way: due as soon as it ends, not an interval later.
    assert!(tags.check_now(R, t0 + S));
    tags.checked(&k(R), Ok("sha256:1".into()), t0 + S * 2, S);
    assert_eq!(tags.take_due(t0 + S * 2).0, [k(R)]);
    tags.checked(&k(R), Ok("sha256:2".into()), t0 + S * 3, S);
    assert_eq!(tags.take_due(t0 + S * 3), (vec![], Some(t0 + S * 4)));
}

async fn woken(tags: &FollowedTags) -> bool {
    tokio::time::timeout(Duration::from_millis(50), tags.wake.notified())
        .await
        .is_ok()
}

#[tokio::test]
async fn an_answer_wakes_the_follower_if_due_before_it_looks_again() {
    const O: &str = "local:5000/other:dev";
    let tags = FollowedTags::default();
    let t0 = Instant::now();
    tags.follow(&vm("a"), vec![R.into(), O.into()], t0);
    assert!(woken(&tags).await, "fresh references");
    tags.take_due(t0);
    // Nothing else planned: the first answer wakes the follower...
    tags.checked(&k(O), Ok("sha256:1".into()), t0, S);
    assert!(woken(&tags).await);
    // ...one due after what it now plans for does not...
    tags.checked(&k(R), Ok("sha256:1".into()), t0, S * 10);
    assert!(!woken(&tags).await);
    // ...and one due before it does.
    assert_eq!(tags.take_due(t0 + S), (vec![k(O)], Some(t0 + S * 10)));
    tags.checked(&k(O), Ok("sha256:1".into()), t0 + S, S);
    assert!(woken(&tags).await);
}

#[test]
fn a_notification_never_cuts_a_failing_tags_backoff_short() {
    let tags = FollowedTags::default();
    let t0 = Instant::now();
    tags.follow(&vm("a"), vec![R.into()], t0);
    tags.take_due(t0);
    tags.checked(&k(R), Err(failed("refused")), t0, S);
    assert!(tags.check_now(R, t0 + S), "followed");
    assert_eq!(tags.take_due(t0 + S), (vec![], Some(t0 + S * 2)));
    // Answering again, a push is checked at once.
    assert_eq!(tags.take_due(t0 + S * 2).0, [k(R)]);
    tags.checked(&k(R), Ok("sha256:1".into()), t0 + S * 2, S);
    assert!(tags.check_now(R, t0 + S * 2));
    assert_eq!(tags.take_due(t0 + S * 2).0, [k(R)]);
}

#[test]
fn one_tag_followed_by_the_cluster_and_by_a_namespace_is_two_checks() {
    let rule = |scope, namespace: Option<&str>, kind| RuleRef {
        mapping: MappingKey {
            scope,
            namespace: namespace.map(str::to_string),
            name: "m".into(),
        },
        index: 0,
        kind,
    };
    let cluster = Followed::of(
        R,
        Some(&rule(MappingScope::Cluster, None, MatchKind::Repository)),
        "dev",
    );
    let tenant = Followed::of(
        R,
        Some(&rule(
            MappingScope::Namespaced,
            Some("dev"),
            MatchKind::Repository,
        )),
        "dev",
    );
    assert_eq!(cluster.by, FollowedBy::Cluster);
    assert_eq!(tenant.by, FollowedBy::Namespace("dev".into()));
    // A cluster rule that lets the VM name the path follows for the VM's namespace.
    for kind in [MatchKind::Prefix, MatchKind::Regex] {
        let chosen = Followed::of(R, Some(&rule(MappingScope::Cluster, None, kind)), "dev");
        assert_eq!(chosen.by, FollowedBy::Namespace("dev".into()), "{kind:?}");
    }
    assert_eq!(
        Followed::of(R, None, "dev").by,
        FollowedBy::Namespace("dev".into())
    );
    let tags = FollowedTags::default();
    let t0 = Instant::now();
    tags.follow(&vm("a"), vec![cluster.clone(), tenant.clone()], t0);
    let mut due = tags.take_due(t0).0;
    due.sort();
    assert_eq!(due, [cluster.clone(), tenant.clone()]);
    tags.checked(&cluster, Ok("sha256:1".into()), t0, S);
    assert_eq!(tags.digest(&cluster).as_deref(), Some("sha256:1"));
    assert_eq!(tags.digest(&tenant), None, "answers are not shared");
    let cluster_mapping = rule(MappingScope::Cluster, None, MatchKind::Repository).mapping;
    let tenant_mapping = rule(MappingScope::Namespaced, Some("dev"), MatchKind::Repository).mapping;
    assert_eq!(
        tags.digest_for_mapping(&cluster_mapping, R).as_deref(),
        Some("sha256:1")
    );
    assert_eq!(tags.digest_for_mapping(&tenant_mapping, R), None);
    // A push names the reference: both are checked.
    tags.checked(&tenant, Ok("sha256:1".into()), t0, S);
    assert!(tags.check_now(R, t0 + S / 2));
    assert_eq!(tags.take_due(t0 + S / 2).0.len(), 2);
}

#[test]
fn a_huge_interval_does_not_overflow() {
    let tags = FollowedTags::default();
    let t0 = Instant::now();
    tags.follow(&vm("a"), vec![R.into()], t0);
    tags.take_due(t0);
    tags.checked(&k(R), Err(failed("refused")), t0, Duration::MAX);
    assert!(tags.take_due(t0 + S).0.is_empty());
}

#[test]
fn a_tag_pods_run_is_checked_while_a_pod_runs_it_and_reconciles_only_vms() {
    let tags = FollowedTags::default();
    let t0 = Instant::now();
    let pod = Follower::PodsIn("dev".into());
    assert_eq!(
        tags.follow_as(&pod, vec![R.into()], t0),
        [(k(R), Lookup::Pending)]
    );
    tags.follow(&vm("vm"), vec![R.into()], t0);
    assert_eq!(tags.take_due(t0).0, [k(R)]);
    // The digest learned: the VM is reconciled, the pod is not (it runs what it runs).
    assert_eq!(
        tags.checked(&k(R), Ok("sha256:1".into()), t0, S),
        [vm("vm")]
    );
    tags.forget(&vm("vm"));
    assert_eq!(
        tags.digest(&k(R)).as_deref(),
        Some("sha256:1"),
        "the pod still runs it"
    );
    tags.forget_follower(&pod);
    assert!(tags.is_empty());
}
