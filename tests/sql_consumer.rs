//! `examples/sql_consumer.rs` run as a child process against a real PostgreSQL and a SQLite file,
//! its queue in the same database as its effects: its contract, and SIGKILL mid-transaction many
//! times over 20 000 units with the database out for 2 s in the middle (PostgreSQL stopped and
//! started; the SQLite file locked by another connection). The example has no inbox: its
//! confirmation counter is applied exactly once only because each unit's acknowledgement commits
//! in the transaction of its effect. Fails, never skips, when a server is unreachable. Each test
//! writes into a schema of its own, or a SQLite file of its own. The PostgreSQL crash test needs
//! root: its outage stops and starts a PostgreSQL cluster with its own tools
//! (`support/faults.rs`). The SQLite tests need the feature `sqlite` too.
#![cfg(feature = "postgres")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/faults.rs"]
mod faults;
#[path = "support/sql_orders.rs"]
mod orders;
#[path = "support/process.rs"]
mod process;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use delivery::dead_letter::DeadLetter;
use delivery::disposition::ReasonKind;
use faults::{Restart, fault_database, start_postgres, stop_postgres};
use orders::Env;
use process::{Orders as _, order, terminate, wait_for};

fn by_id(dead: &[DeadLetter]) -> BTreeMap<String, &DeadLetter> {
    dead.iter().map(|d| (d.id().to_string(), d)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_applies_orders_once_and_dead_letters_poison() {
    contract(Env::new("contract", 5).await).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_on_sqlite_applies_orders_once_and_dead_letters_poison() {
    contract(Env::sqlite("contract", 5).await).await;
}

/// The example's contract: each order applied once, the same unit published twice enqueued once,
/// a plain `INSERT` consumed as a published unit, poison dead-lettered at once and intact, one
/// confirmation per unit, and a graceful SIGTERM.
async fn contract(env: Env) {
    let mut child = env.start(8, 0);
    assert!(env.publish("m-1", order("o-1", "c-1", 100)).await);
    assert!(env.publish("m-2", order("o-2", "c-1", 50)).await);
    assert!(
        !env.publish("m-1", order("o-1", "c-1", 100)).await,
        "the same unit published again: the queue already holds it"
    );
    // As any producer can enqueue: a plain INSERT, no library.
    env.insert("m-3", &order("o-3", "c-2", 7)).await;
    assert!(env.publish("bad-json", "{not json").await);
    assert!(
        env.publish("missing-field", r#"{"order_id":"o-9","customer_id":"c-9"}"#)
            .await
    );
    assert!(env.publish("negative", order("o-neg", "c-3", -5)).await);

    wait_for(
        "3 orders, 3 dead letters and nothing pending",
        Duration::from_secs(60),
        async || {
            env.scalar("SELECT count(*) FROM $schema.orders").await == 3
                && env.dead_count().await == 3
                && env.rows("pending").await == 0
        },
    )
    .await;
    assert_eq!(
        env.balances().await,
        BTreeMap::from([("c-1".into(), 150), ("c-2".into(), 7)])
    );
    assert_eq!(
        env.latest_orders().await,
        BTreeMap::from([("c-1".into(), "o-2".into()), ("c-2".into(), "o-3".into())])
    );
    assert_eq!(
        env.confirmations().await,
        BTreeMap::from([("c-1".into(), 2), ("c-2".into(), 1)]),
        "one confirmation per unit: m-1 once, m-2, m-3; none for a unit refused"
    );
    let dead = env.all_dead().await;
    assert_eq!(dead.len(), 3, "{dead:?}");
    let dead = by_id(&dead);
    for (id, payload, reason) in [
        ("bad-json", &b"{not json"[..], ReasonKind::Malformed),
        (
            "missing-field",
            br#"{"order_id":"o-9","customer_id":"c-9"}"#,
            ReasonKind::Malformed,
        ),
        (
            "negative",
            order("o-neg", "c-3", -5).as_bytes(),
            ReasonKind::Rejected,
        ),
    ] {
        let letter = dead[id];
        assert_eq!(letter.reason, Some(reason), "{id}");
        assert_eq!(letter.unit.payload().as_ref(), payload, "{id}: intact");
        assert_eq!(
            letter.delivery_count().get(),
            1,
            "{id}: dead-lettered directly"
        );
        assert_eq!(letter.source, env.name, "{id}");
    }
    assert!(
        dead["negative"].detail.contains("negative amount"),
        "{}",
        dead["negative"].detail
    );
    assert_eq!(env.dead_count().await, 3, "listing consumed nothing");

    let status = terminate(&mut child);
    assert!(
        status.success(),
        "graceful shutdown on SIGTERM exits 0: {status:?}"
    );
    assert_eq!(env.rows("pending").await, 0, "nothing left pending");
    assert_eq!(env.rows("delivered").await, 3, "m-1, m-2 and m-3");
    env.cleanup().await;
}

/// A deterministic pseudo-random sequence (an LCG), so a failing run can be replayed.
struct Lcg(u64);

impl Lcg {
    /// A number in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        lo + (self.0 >> 33) % (hi - lo + 1)
    }
}

/// What the crash test publishes, and what the tables must hold once it is all consumed.
#[derive(Default)]
struct Plan {
    /// Every unit in publication order: `(unit id, payload)`.
    units: Vec<(String, Vec<u8>)>,
    /// Units published again under the same id (a producer's retry), after the consumers started.
    retries: Vec<(String, Vec<u8>)>,
    /// The poison units, with the reason each must be dead-lettered for.
    poison: BTreeMap<String, (Vec<u8>, ReasonKind)>,
    /// Distinct valid orders.
    orders: usize,
    balances: BTreeMap<String, i64>,
    /// The units (distinct unit ids) of valid orders, per customer: one confirmation each.
    confirmations: BTreeMap<String, i64>,
    /// Each customer's last order in publication order.
    latest: BTreeMap<String, String>,
}

impl Plan {
    /// `slots` publications over `customers` customers: 2 % poison (a third each malformed
    /// JSON, a missing field, a negative amount) and 4 % duplicates, of two kinds (2 % each):
    ///
    /// - the same unit again, under the same unit id (a producer retrying a publish whose commit
    ///   it did not see). The queue keeps one row per id, so it is one unit: one confirmation, and
    ///   `publish` answers `false`. Published while the consumers run, when the first publication
    ///   may be delivered, pending or held by a consumer about to be killed.
    /// - the same order again under a new unit id (a producer that lost track of the first and
    ///   published a fresh unit). Two units: each is confirmed (two confirmations), while the
    ///   order itself is applied once (`orders` keyed by order id). Published right after its
    ///   first publication, before any later order of its customer, so that whichever of the two
    ///   applies the order, the customer's latest order is the same.
    fn new(slots: usize, customers: usize) -> Plan {
        let mut plan = Plan::default();
        // The last valid order published: (order id, customer, amount).
        let mut last: Option<(String, String, i64)> = None;
        for i in 0..slots {
            let customer = format!("c-{}", i % customers);
            match (i % 50, i % 100) {
                (25, _) => {
                    let id = format!("poison-{i}");
                    let (body, reason) = match (i / 50) % 3 {
                        0 => (format!(r#"{{"order_id":"o-{i}","#), ReasonKind::Malformed),
                        1 => (
                            format!(r#"{{"order_id":"o-{i}","customer_id":"{customer}"}}"#),
                            ReasonKind::Malformed,
                        ),
                        _ => (
                            order(&format!("o-{i}"), &customer, -1),
                            ReasonKind::Rejected,
                        ),
                    };
                    plan.units.push((id.clone(), body.clone().into_bytes()));
                    plan.poison.insert(id, (body.into_bytes(), reason));
                }
                (_, 10 | 60) => {
                    // The unit of slot i - 7 (a valid order of its own), exactly as it was.
                    let id = format!("m-{}", i - 7);
                    let (_, body) = plan
                        .units
                        .iter()
                        .rev()
                        .find(|(unit, _)| *unit == id)
                        .unwrap();
                    plan.retries.push((id, body.clone()));
                }
                (_, 35 | 85) => {
                    // The order of slot i - 1, under a unit id of its own.
                    let (order_id, customer, amount) = last.clone().unwrap();
                    plan.units.push((
                        format!("m-{i}"),
                        order(&order_id, &customer, amount).into_bytes(),
                    ));
                    *plan.confirmations.entry(customer).or_default() += 1;
                }
                _ => {
                    let order_id = format!("o-{i}");
                    let amount = (i % 89 + 1) as i64;
                    plan.units.push((
                        format!("m-{i}"),
                        order(&order_id, &customer, amount).into_bytes(),
                    ));
                    plan.orders += 1;
                    *plan.balances.entry(customer.clone()).or_default() += amount;
                    *plan.confirmations.entry(customer.clone()).or_default() += 1;
                    plan.latest.insert(customer.clone(), order_id.clone());
                    last = Some((order_id, customer, amount));
                }
            }
        }
        plan
    }
}

/// Units held (claimed, not settled) by the consumer process `pid`: its source names its leases
/// `<pid>-<uuid>`.
async fn held_by(env: &Env, pid: u32) -> i64 {
    env.scalar(&format!(
        "SELECT count(*) FROM $schema.{} WHERE status = 'pending' AND lease_owner LIKE '{pid}-%'",
        env.table()
    ))
    .await
}

/// The issue's crash test on PostgreSQL. 20 000 publications (2 % poison, 4 % duplicates: see
/// [`Plan::new`]) consumed by the example with 16 handlers, each pausing 3 ms between its effect
/// and the commit of its unit's transaction, so that the kills land mid-transaction; the database
/// stopped for 2 s under it: see [`crash`].
///
/// The outage is a real stop and start of a PostgreSQL server (`pg_ctlcluster stop -m fast`,
/// every connection closed, then `start`), not a TCP proxy cut: a stop is what a restart or a
/// failover does, server side included (transactions in progress aborted, backends gone). The
/// server stopped is the fault tests' own cluster (`support/faults.rs`, port 5433), so the other
/// tests of this binary, running beside this one on the shared cluster, are not disturbed; a
/// guard starts it again if the test fails during the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_and_a_database_outage_lose_nothing_and_confirm_each_unit_once() {
    // Each claim counts a delivery in the unit's row (rule 2), a claim by a consumer killed
    // before it settled included: a unit held at a few kills in a row, or at a kill and the
    // outage, legitimately reaches the example's default bound of 5 (4 seen here). The bound is
    // not what this test is about, so it is out of reach: a valid unit in the dead letter would
    // fail the test for the wrong reason. The poison goes there at its first run regardless.
    let env = Env::with_database("crash", 10, fault_database()).await;
    let run = CrashRun {
        concurrency: 16,
        effect_delay_ms: 3,
        outage: Outage::Stop,
    };
    crash(env, run).await;
}

/// The same crash test on a SQLite file: 4 handlers (SQLite's transactions take turns on its one
/// write lock: more handlers only queue behind it), no pause (each transaction holds the lock
/// while the next ones wait, so a kill lands in one), and for the outage another connection
/// holding the file with `BEGIN EXCLUSIVE` for 2 s, twice as long as the example's statements
/// wait for a lock here (`BUSY_TIMEOUT_MS`): its claims, the beginnings of its units'
/// transactions and its settles fail with `SQLITE_BUSY` until the file is released. (Now and then
/// a unit's transaction waits that long behind the example's own, and its unit is returned: one
/// more delivery, well within the bound.)
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sigkill_and_a_locked_file_lose_nothing_and_confirm_each_unit_once() {
    // The delivery bound out of reach, as in PostgreSQL's run.
    let mut env = Env::sqlite("crash", 10).await;
    env.busy_timeout_ms = Some(1000);
    let run = CrashRun {
        concurrency: 4,
        effect_delay_ms: 0,
        outage: Outage::Lock,
    };
    crash(env, run).await;
}

/// What the crash runs of the two databases do differently.
struct CrashRun {
    /// The example's handlers (`CONCURRENCY`).
    concurrency: usize,
    /// Each handler's pause between its effect and the commit (`EFFECT_DELAY_MS`).
    effect_delay_ms: u64,
    outage: Outage,
}

/// How a crash run takes the database away from a running consumer for 2 s.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// PostgreSQL: the fault tests' own server stopped, then started.
    Stop,
    /// SQLite: the file held by another connection with `BEGIN EXCLUSIVE`, then released.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // the SQLite test's
    Lock,
}

impl Outage {
    /// The database it takes away.
    fn database(self) -> &'static str {
        match self {
            Outage::Stop => "PostgreSQL",
            Outage::Lock => "SQLite",
        }
    }

    /// What it does to the database.
    fn done(self) -> &'static str {
        match self {
            Outage::Stop => "stopped",
            Outage::Lock => "locked",
        }
    }

    /// The database out for `how_long`: nothing is committed meanwhile.
    async fn cause(self, env: &Env, how_long: Duration) {
        match self {
            Outage::Stop => {
                stop_postgres();
                let restart = Restart(Some(start_postgres));
                tokio::time::sleep(how_long).await;
                start_postgres();
                restart.disarm();
            }
            Outage::Lock => {
                let lock = env.lock().await;
                let locked_at = env.scalar("SELECT count(*) FROM $schema.orders").await;
                tokio::time::sleep(how_long).await;
                assert_eq!(
                    env.scalar("SELECT count(*) FROM $schema.orders").await,
                    locked_at,
                    "nothing is committed while another connection holds the file"
                );
                lock.release().await;
            }
        }
    }
}

/// The issue's crash test. `env`'s queue gets the [`Plan`]'s 20 000 publications, consumed by the
/// example; the consumer is killed with SIGKILL after 0.3–1.5 s (pseudo-random, fixed seed),
/// started again and killed again while the backlog drains; once half the orders are applied,
/// its database is out for 2 s under it ([`Outage`]), and it must carry on by itself. A last
/// consumer drains the rest. The example has no inbox: each confirmation is counted in the unit's
/// transaction, with its acknowledgement, so each unit is confirmed exactly once or the test
/// fails.
async fn crash(mut env: Env, run: CrashRun) {
    // One crash run at a time: two at once on a 2-core machine measure the machine, not the
    // consumer (SQLite's run, whose transactions take turns on its lock, slowed by half).
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_AT_A_TIME.lock().await;
    const SLOTS: usize = 20_000;
    const CUSTOMERS: usize = 97;
    /// Kills stop once this share of the orders is applied (per thousand); the last consumer
    /// drains the rest.
    const KILL_UNTIL: usize = 950;
    /// A bound on the rounds, whatever the machine's speed (here, one crash run at a time,
    /// PostgreSQL needed 25–30 and SQLite 50–65).
    const MAX_KILLS: usize = 80;
    let began = Instant::now();
    // A unit held by a killed consumer is claimable again 2 s after its claim.
    env.visibility_ms = 2000;
    let plan = Plan::new(SLOTS, CUSTOMERS);
    // The units enqueued by plain INSERTs, as any producer can; the retries below through
    // `Queue::publish`.
    env.insert_all(plan.units.iter().cloned()).await;
    let orders = plan.orders as i64;
    let applied = async || env.scalar("SELECT count(*) FROM $schema.orders").await;
    let published_in = began.elapsed();

    let mut rng = Lcg(0x5eed_1234_abcd);
    let mut kills = 0;
    let mut held_at_kills = 0;
    let mut outage = None;
    let mut retried = false;
    while kills < MAX_KILLS && applied().await < orders * KILL_UNTIL as i64 / 1000 {
        let at_start = applied().await;
        let mut child = env.start(run.concurrency, run.effect_delay_ms);
        tokio::time::sleep(Duration::from_millis(rng.between(300, 1500))).await;
        if outage.is_none() && (at_start >= orders / 2 || kills >= MAX_KILLS / 2) {
            // The database out under a running consumer, once it is consuming.
            wait_for(
                &format!(
                    "the consumer applying orders before the outage (log: {})",
                    env.log().display()
                ),
                Duration::from_secs(60),
                async || applied().await > at_start,
            )
            .await;
            let stopped_at = applied().await;
            run.outage.cause(&env, Duration::from_secs(2)).await;
            let restarted_at = applied().await;
            wait_for(
                &format!(
                    "the same consumer applying orders again after the outage (log: {})",
                    env.log().display()
                ),
                Duration::from_secs(60),
                async || applied().await > restarted_at,
            )
            .await;
            outage = Some((stopped_at, kills));
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the consumer was still running when it was to be killed (log: {})",
            env.log().display()
        );
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        held_at_kills += held_by(&env, child.id()).await;
        if !retried && kills == 3 {
            // A producer's retries, while units are delivered, pending and held.
            let new = env.publish_all(plan.retries.iter().cloned()).await;
            assert!(
                new.iter().all(|&new| !new),
                "a unit published again under its id is not enqueued again"
            );
            retried = true;
        }
    }
    assert!(retried, "the retries were published");
    let (applied_at_outage, kills_before_outage) = outage.expect("the database was out");
    let applied_before_final = applied().await;
    let killing_took = began.elapsed() - published_in;

    let mut child = env.start(run.concurrency, 0);
    wait_for(
        &format!(
            "every valid order applied, the poison dead-lettered and nothing pending (log: {})",
            env.log().display()
        ),
        Duration::from_secs(180),
        async || {
            applied().await == orders
                && env.rows("pending").await == 0
                && env.rows("dead").await == plan.poison.len() as i64
        },
    )
    .await;
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");

    // Nothing lost: every valid order applied, each amount counted once.
    assert_eq!(applied().await, orders);
    assert_eq!(
        env.balances().await,
        plan.balances,
        "every order's amount counted exactly once"
    );
    // Nothing applied twice, with no inbox: one confirmation per unit, not per delivery.
    assert_eq!(
        env.confirmations().await,
        plan.confirmations,
        "one confirmation per unit id published, however often it was delivered"
    );
    assert_eq!(
        env.latest_orders().await,
        plan.latest,
        "each customer's latest order is its last published, whatever order they were applied in"
    );
    assert_eq!(
        env.rows("delivered").await,
        plan.units.len() as i64 - plan.poison.len() as i64,
        "every valid unit delivered, once each (one row per unit id)"
    );
    let dead = env.all_dead().await;
    let found: BTreeMap<String, (Vec<u8>, ReasonKind)> = dead
        .iter()
        .map(|d| {
            assert_eq!(d.source, env.name, "{d:?}");
            (
                d.id().to_string(),
                (d.unit.payload().to_vec(), d.reason.expect("a reason")),
            )
        })
        .collect();
    assert_eq!(found.len(), dead.len(), "each unit dead-lettered once");
    assert_eq!(
        found.keys().collect::<BTreeSet<_>>(),
        plan.poison.keys().collect::<BTreeSet<_>>(),
        "the dead letter holds exactly the poison units"
    );
    for (id, (payload, reason)) in &plan.poison {
        let (found_payload, found_reason) = &found[id];
        assert_eq!(
            String::from_utf8_lossy(found_payload),
            String::from_utf8_lossy(payload),
            "{id}: intact"
        );
        assert_eq!(found_payload, payload, "{id}: intact, byte for byte");
        assert_eq!(found_reason, reason, "{id}");
    }

    // The kills did land on units in flight: some were delivered more than once.
    let (redelivered, most) = {
        let table = env.table().to_owned();
        let redelivered = env
            .scalar(&format!(
                "SELECT count(*) FROM $schema.{table} WHERE status = 'delivered' AND attempts > 1"
            ))
            .await;
        let most = env
            .scalar(&format!(
                "SELECT CAST(max(attempts) AS bigint) FROM $schema.{table}"
            ))
            .await;
        (redelivered, most)
    };
    assert!(
        held_at_kills > 0 && redelivered > 0,
        "the kills interrupted units: {held_at_kills} held at the kills, {redelivered} redelivered"
    );
    eprintln!(
        "crash run ({}): {} units ({} orders, {} poison, {} retries of a unit id, {} orders under a \
         second unit id) set up and published in {published_in:.1?}; {kills} SIGKILLs in {killing_took:.1?} \
         ({held_at_kills} units held by the consumer at its kills), the database {} for 2 s \
         after {kills_before_outage} kills with {applied_at_outage} orders applied; \
         {applied_before_final} applied before the last consumer; {redelivered} units delivered \
         more than once (at most {most} deliveries); total {:.1?}",
        run.outage.database(),
        plan.units.len(),
        plan.orders,
        plan.poison.len(),
        plan.retries.len(),
        plan.units.len() - plan.orders - plan.poison.len(),
        run.outage.done(),
        began.elapsed(),
    );
    env.cleanup().await;
}
