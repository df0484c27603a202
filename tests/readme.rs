//! The README's code that an example runs is the example's own: the parser of its Records
//! section is `examples/records.rs`'s, word for word, so that what the README says the
//! example prints is what its code counts.

use std::fs;

/// The first Rust code block after the heading `heading` of the README.
fn code_after(readme: &str, heading: &str) -> String {
    let section = &readme[readme.find(heading).expect("the heading")..];
    let start = section.find("```rust\n").expect("a Rust block") + "```rust\n".len();
    let end = section[start..].find("```").expect("the block's end");
    section[start..start + end].to_string()
}

#[test]
fn the_records_example_runs_the_readme_s_parser() {
    let readme = fs::read_to_string("README.md").expect("the README");
    let example = fs::read_to_string("examples/records.rs").expect("the example");
    let code = code_after(&readme, "## Records");
    let (uses, parser) = code.split_at(code.find("\nfn ").expect("a function") + 1);
    for line in uses.lines().filter(|l| !l.is_empty()) {
        assert!(example.contains(line), "examples/records.rs lacks `{line}`");
    }
    assert!(
        example.contains(parser),
        "examples/records.rs does not hold the README's parser as the README shows it:\n{parser}"
    );
}
