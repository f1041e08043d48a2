//! Compile-time checks of the attribute macros, pinned to one toolchain: rustc's own wording
//! changes between releases, so the snapshots are only compared on the toolchain they were made on.
//!
//! - `tests/ui/consumer/pass/`: realistic handlers that must compile (and run).
//! - `tests/ui/consumer/fail/`: one rule per file, with the expected error in the `.stderr` beside it.
//! - `tests/ui/consumer/fail-lapin/`: rules that need the `lapin` feature (`--features lapin`).
//! - `tests/ui/consumer/pending/{pass,fail}/`: known false positives (should pass) and misses
//!   (should fail) of the macro, not yet fixed; each file says what is wrong. Not in the suite:
//!   run them with `cargo test --test ui -- --ignored`, and move a file into `pass/` or `fail/`
//!   (with its `.stderr`, `TRYBUILD=overwrite`) once the macro handles it.
//!
//! Regenerate snapshots with `TRYBUILD=overwrite cargo test --test ui` and read every `.stderr`.

#[rustversion::attr(
    not(stable(1.95)),
    ignore = "the UI snapshots are pinned to stable 1.95"
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

/// Known defects of `#[consumer]`, asserting the behaviour they should have. Fails until fixed.
#[test]
#[ignore = "known false positives and misses of #[consumer]; see tests/ui/consumer/pending/"]
fn consumer_ui_pending() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/consumer/pending/pass/*.rs");
    t.compile_fail("tests/ui/consumer/pending/fail/*.rs");
    #[cfg(feature = "lapin")]
    t.compile_fail("tests/ui/consumer/pending/lapin/*.rs");
}
