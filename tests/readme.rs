//! The README shows a compile error verbatim; it must stay the one the macro really produces.

#[test]
fn readme_shows_the_real_compile_error() {
    let readme = include_str!("../README.md");
    let stderr = include_str!("ui/consumer/fail/readme_clock_in_body.stderr");
    assert!(
        readme.contains(stderr.trim_end()),
        "README.md no longer shows tests/ui/consumer/fail/readme_clock_in_body.stderr verbatim"
    );
}
