//! `Inbox::first_times` (a batch of units recorded at once) held to the same contract in every
//! database: each id recorded once, the first time only, in the caller's transaction, for its
//! consumer alone, across as many statements as its parameters need.
#![allow(dead_code)] // each test binary uses part of it

use std::collections::HashSet;

use delivery::UnitId;
use delivery::inbox::{Inbox, InboxDatabase};
use sqlx::Pool;

fn ids<S: AsRef<str>>(ids: impl IntoIterator<Item = S>) -> Vec<UnitId> {
    ids.into_iter().map(|id| UnitId::new(id.as_ref())).collect()
}

fn set<S: AsRef<str>>(ids: impl IntoIterator<Item = S>) -> HashSet<UnitId> {
    ids.into_iter().map(|id| UnitId::new(id.as_ref())).collect()
}

/// The contract of `first_times` on `db`, for `billing` and `shipping` (two consumers of one
/// table, whose records start empty), with `many` ids in one call: more than one statement
/// holds in the database under test.
pub async fn first_times_records_each_id_once<DB: InboxDatabase>(
    db: &Pool<DB>,
    billing: &Inbox,
    shipping: &Inbox,
    many: usize,
) {
    let mut tx = db.begin().await.unwrap();
    assert_eq!(
        billing
            .first_times(&mut tx, &ids(["u-2", "u-1", "u-2"]))
            .await
            .unwrap(),
        set(["u-1", "u-2"]),
        "an id given twice is recorded once"
    );
    assert_eq!(
        billing
            .first_times(&mut tx, &ids(["u-2", "u-3"]))
            .await
            .unwrap(),
        set(["u-3"]),
        "u-2 was recorded before, in this transaction"
    );
    assert!(
        !billing.first_time(&mut tx, &"u-3".into()).await.unwrap(),
        "first_time sees what first_times recorded"
    );
    assert!(billing.first_time(&mut tx, &"u-4".into()).await.unwrap());
    assert_eq!(
        billing
            .first_times(&mut tx, &ids(["u-4", "u-5"]))
            .await
            .unwrap(),
        set(["u-5"]),
        "first_times sees what first_time recorded"
    );
    assert_eq!(
        billing.first_times(&mut tx, &[]).await.unwrap(),
        HashSet::new()
    );
    assert_eq!(
        shipping
            .first_times(&mut tx, &ids(["u-1", "u-6"]))
            .await
            .unwrap(),
        set(["u-1", "u-6"]),
        "another consumer's records are its own"
    );
    tx.commit().await.unwrap();

    // Rolled back: the records go with the transaction.
    let mut tx = db.begin().await.unwrap();
    assert_eq!(
        billing
            .first_times(&mut tx, &ids(["u-1", "u-7"]))
            .await
            .unwrap(),
        set(["u-7"])
    );
    tx.rollback().await.unwrap();
    let mut tx = db.begin().await.unwrap();
    assert_eq!(
        billing
            .first_times(&mut tx, &ids(["u-7", "u-5"]))
            .await
            .unwrap(),
        set(["u-7"]),
        "the rolled back record is gone, the committed one stays"
    );
    tx.commit().await.unwrap();

    // More ids than one statement takes: the even ones recorded first, then all of them.
    let all: Vec<String> = (0..many).map(|i| format!("n-{i}")).collect();
    let even: Vec<&String> = all.iter().step_by(2).collect();
    let odd: Vec<&String> = all.iter().skip(1).step_by(2).collect();
    let mut tx = db.begin().await.unwrap();
    assert_eq!(
        billing.first_times(&mut tx, &ids(&even)).await.unwrap(),
        set(&even)
    );
    tx.commit().await.unwrap();
    let mut tx = db.begin().await.unwrap();
    let first = billing.first_times(&mut tx, &ids(&all)).await.unwrap();
    assert_eq!(first.len(), odd.len());
    assert_eq!(first, set(&odd), "only the ids not recorded before");
    tx.commit().await.unwrap();
}
