//! Compile-time checks of the attribute macros, pinned to one toolchain: rustc's own wording
//! changes between releases, so the snapshots are only compared on the toolchain they were made on.
//!
//! - `tests/ui/consumer/pass/`: realistic handlers that must compile (and run).
//! - `tests/ui/consumer/fail/`: one rule per file, with the expected error in the `.stderr` beside it.
//! - `tests/ui/consumer/fail-lapin/`: rules that need the `lapin` feature (`--features lapin`).
//! - `tests/ui/webhook/{pass,fail}/`: `#[webhook]`, which needs the `axum` feature: `#[consumer]`'s
//!   rules, plus rule 5 (no parameter reads the body before it is verified) and its arguments.
//! - `tests/ui/relay/{pass,fail}/`: `#[relay]`: `#[consumer]`'s rules, plus rule 6 (the function
//!   returns the sink's `Receipt`) and parameters resolved from the outbox record.
//!
//! Regenerate snapshots with `TRYBUILD=overwrite cargo test --all-features --test ui` (rustc's notes
//! list the types in scope, which depend on the features) and read every `.stderr`.

#[rustversion::attr(
    not(stable(1.95)),
    ignore = "the UI snapshots are pinned to stable 1.95"
)]
#[cfg_attr(
    not(feature = "lapin"),
    ignore = "the UI snapshots are taken with every feature on: run scripts/test.sh"
)]
#[test]
fn consumer_ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/consumer/pass/*.rs");
    t.compile_fail("tests/ui/consumer/fail/*.rs");
}

#[cfg(feature = "lapin")]
#[rustversion::attr(
    not(stable(1.95)),
    ignore = "the UI snapshots are pinned to stable 1.95"
)]
#[test]
fn consumer_ui_lapin() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/consumer/fail-lapin/*.rs");
}

#[cfg(feature = "axum")]
#[rustversion::attr(
    not(stable(1.95)),
    ignore = "the UI snapshots are pinned to stable 1.95"
)]
#[test]
fn webhook_ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/webhook/pass/*.rs");
    t.compile_fail("tests/ui/webhook/fail/*.rs");
}

#[rustversion::attr(
    not(stable(1.95)),
    ignore = "the UI snapshots are pinned to stable 1.95"
)]
#[cfg_attr(
    not(feature = "lapin"),
    ignore = "the UI snapshots are taken with every feature on: run scripts/test.sh"
)]
#[test]
fn relay_ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/relay/pass/*.rs");
    t.compile_fail("tests/ui/relay/fail/*.rs");
}
