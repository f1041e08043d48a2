//! Servers stopped and started by the fault tests, as their own tools do it (as root), and the
//! guard that starts a stopped one again even when the test fails.
//!
//! The PostgreSQL that goes down is a cluster of the fault tests' own (`delivery_faults`, port
//! 5433, created with `pg_createcluster` on first use), so stopping it disturbs nothing else on
//! the machine: neither the cluster every other test uses (port 5432) nor the tests running
//! beside the fault in the same binary. Only one test binary at a time uses it (cargo runs test
//! binaries one after another), and within a binary only one test.
#![allow(dead_code)] // each test binary uses part of it

use std::process::Command;

/// Runs a service command (as the servers' own tools do it), failing loudly.
pub fn service(what: &str, program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{what}: could not run {program}: {e}"));
    assert!(
        status.success(),
        "{what}: {program} {args:?} failed: {status}"
    );
}

/// The PostgreSQL version whose tools manage the clusters.
fn postgres_version() -> String {
    let versions =
        std::fs::read_dir("/etc/postgresql").expect("/etc/postgresql lists the clusters");
    let mut versions: Vec<String> = versions
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    versions.sort();
    versions.into_iter().next().expect("a PostgreSQL cluster")
}

const FAULT_CLUSTER: &str = "delivery_faults";
const FAULT_PORT: &str = "5433";

/// The fault tests' own PostgreSQL cluster, created (trust auth, port 5433) and started if
/// needed: its URL (database `postgres`).
pub fn fault_database() -> String {
    let version = postgres_version();
    let listed = Command::new("pg_lsclusters")
        .args(["--no-header", &version, FAULT_CLUSTER])
        .output()
        .expect("pg_lsclusters runs");
    let line = String::from_utf8_lossy(&listed.stdout).into_owned();
    if !listed.status.success() || line.trim().is_empty() {
        service(
            "creating the fault test's PostgreSQL cluster",
            "pg_createcluster",
            &[
                &version,
                FAULT_CLUSTER,
                "-p",
                FAULT_PORT,
                "--start",
                "--",
                "--auth=trust",
            ],
        );
    } else if !line.contains("online") {
        start_postgres();
    }
    format!("postgres://postgres@127.0.0.1:{FAULT_PORT}/postgres")
}

/// Stops the fault tests' cluster (`-m fast`: its clients' connections are closed at once).
pub fn stop_postgres() {
    service(
        "stopping PostgreSQL",
        "pg_ctlcluster",
        &[
            "--skip-systemctl-redirect",
            &postgres_version(),
            FAULT_CLUSTER,
            "stop",
            "-m",
            "fast",
        ],
    );
}

/// Starts the fault tests' cluster; returns once it accepts connections.
pub fn start_postgres() {
    service(
        "starting PostgreSQL",
        "pg_ctlcluster",
        &[
            "--skip-systemctl-redirect",
            &postgres_version(),
            FAULT_CLUSTER,
            "start",
        ],
    );
}

/// Starts a stopped server again when dropped, so a failing assertion leaves nothing stopped.
pub struct Restart(pub Option<fn()>);

impl Restart {
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Restart {
    fn drop(&mut self) {
        if let Some(start) = self.0.take() {
            start();
        }
    }
}
