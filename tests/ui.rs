//! Compile-time checks of the attribute macros, pinned to one toolchain: rustc's own wording
//! changes between releases, so the snapshots are only compared on the toolchain they were made on.

#[rustversion::attr(not(stable(1.95)), ignore = "the UI snapshots are pinned to stable 1.95")]
#[test]
fn consumer_ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/consumer/pass/*.rs");
    t.compile_fail("tests/ui/consumer/fail/*.rs");
}
