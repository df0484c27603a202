//! The layout rules of ARCHITECTURE.md, checked on the crate's own sources: no source file
//! over 600 lines (`src/`, `tests/`, `benches/`, `examples/`); in `src/`, no function over 60
//! lines. A type is not held to a size: one concept of 180 lines reads better than two
//! halves. Unit tests (`tests.rs`, `*_tests.rs`, `tests/` directories, `mod tests`) are held
//! to the file size alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 60;

/// One source file, its lines with strings, char literals and comments blanked out, so that
/// braces count.
struct Source {
    path: PathBuf,
    raw: Vec<String>,
    code: Vec<String>,
}

#[test]
fn files_and_functions_stay_within_their_sizes() {
    let mut problems = Vec::new();
    let sources: Vec<Source> = ["src", "tests", "benches", "examples"]
        .iter()
        .flat_map(|dir| rust_files(Path::new(dir)))
        .map(|path| read(&path))
        .collect();
    for s in &sources {
        if s.raw.len() > MAX_FILE_LINES {
            problems.push(format!(
                "{}: {} lines (at most {MAX_FILE_LINES})",
                s.path.display(),
                s.raw.len()
            ));
        }
    }
    for s in sources.iter().filter(|s| s.path.starts_with("src")) {
        if is_test_file(&s.path) {
            continue;
        }
        for ((kind, name), start, end) in items(s) {
            let lines = end - start + 1;
            if kind == "fn" && lines > MAX_FN_LINES {
                problems.push(format!(
                    "{}:{}: fn {name} is {lines} lines (at most {MAX_FN_LINES})",
                    s.path.display(),
                    start + 1
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the layout rules of ARCHITECTURE.md are broken:\n{}",
        problems.join("\n")
    );
}

/// The crate's top-level modules depend one way: no module reaches, through the others,
/// back to itself. A module's dependencies are the `crate::NAME` its files name outside
/// unit tests (test code may reach anywhere).
#[test]
fn modules_depend_one_way() {
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in rust_files(Path::new("src")) {
        if is_test_file(&path) {
            continue;
        }
        let s = read(&path);
        let from = module(&path);
        let code = s.code.join("\n");
        // Up to the first unit-test module: what follows it is test code.
        let code = code.split("#[cfg(test)]\nmod ").next().unwrap_or("");
        for (at, _) in code.match_indices("crate::") {
            let name: String = code[at + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty()
                && name != from
                && name.chars().next().is_some_and(char::is_lowercase)
            {
                uses.entry(from.clone()).or_default().insert(name);
            }
        }
    }
    for start in uses.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<Vec<String>> = vec![vec![start.clone()]];
        while let Some(path) = stack.pop() {
            let last = path.last().expect("never empty");
            for next in uses.get(last).into_iter().flatten() {
                let mut longer = path.clone();
                longer.push(next.clone());
                assert!(next != start, "modules in a cycle: {}", longer.join(" -> "));
                if seen.insert(next.clone()) {
                    stack.push(longer);
                }
            }
        }
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The crate's top-level module a file belongs to (`engine` for `src/engine/scheduler.rs`).
fn module(path: &Path) -> String {
    let under_src = path.strip_prefix("src").unwrap_or(path);
    let first = under_src
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    first.unwrap_or_default().trim_end_matches(".rs").to_owned()
}

/// Unit tests: `tests.rs`, `*_tests.rs`, and files under a `tests/` directory.
fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

fn read(path: &PathBuf) -> Source {
    let text = fs::read_to_string(path).expect("a source file is UTF-8");
    let raw: Vec<String> = text.lines().map(str::to_owned).collect();
    Source {
        path: path.clone(),
        code: blank_out(&raw),
        raw,
    }
}

/// The lines with the contents of strings and char literals, and comments, replaced by
/// spaces (a string may span lines).
fn blank_out(lines: &[String]) -> Vec<String> {
    let mut in_string = false;
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        let chars: Vec<char> = line.chars().collect();
        let mut kept = String::with_capacity(line.len());
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if in_string {
                match c {
                    '\\' => i += 1,
                    '"' => in_string = false,
                    _ => {}
                }
                kept.push(' ');
            } else if c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            } else if c == '"' {
                in_string = true;
                kept.push(' ');
            } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
                // A char literal such as '{' (not a lifetime).
                kept.push_str("   ");
                i += 2;
            } else {
                kept.push(c);
            }
            i += 1;
        }
        out.push(kept);
    }
    out
}

/// The items that open a block at the start of a line: (kind, name), first and last line.
/// A type's are its `struct`, `enum` or `trait` and each `impl` of it (named by the type
/// after `for`, without its generics); functions are those inside them or at the top.
/// Modules of unit tests (`mod tests { .. }`) are passed over.
fn items(s: &Source) -> Vec<((&'static str, String), usize, usize)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < s.code.len() {
        let line = s.code[i].trim_start();
        if line.starts_with("mod tests {") {
            // A module of unit tests inside the file.
            i = block_end(&s.code, i) + 1;
            continue;
        }
        if let Some(item) = item_at(line) {
            found.push((item, i, block_end(&s.code, i)));
        }
        i += 1;
    }
    found
}

fn item_at(line: &str) -> Option<(&'static str, String)> {
    let mut words = line.split_whitespace();
    let mut word = words.next()?;
    if word.starts_with("pub") {
        word = words.next()?;
    }
    for modifier in ["const", "unsafe", "async", "extern"] {
        if word == modifier {
            word = words.next()?;
        }
    }
    match word {
        "fn" => Some(("fn", ident(words.next()?))),
        "struct" | "enum" | "trait" | "union" => Some(("type", ident(words.next()?))),
        w if w == "impl" || w.starts_with("impl<") => Some(("type", impl_target(line)?)),
        _ => None,
    }
}

/// The type an `impl` line is of: past its generic parameters, and past `for` where it
/// implements a trait.
fn impl_target(line: &str) -> Option<String> {
    let rest = line
        .trim_start()
        .trim_start_matches("pub ")
        .strip_prefix("impl")?;
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in rest.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            c if depth == 0 && !c.is_whitespace() => {
                start = i;
                break;
            }
            _ => {}
        }
    }
    let rest = &rest[start..];
    let target = match rest.split_whitespace().position(|w| w == "for") {
        Some(at) => rest.split_whitespace().nth(at + 1)?,
        None => rest.split_whitespace().next()?,
    };
    Some(ident(target.trim_start_matches('&')))
}

/// The identifier a word starts with, past any path (`std::fmt::Debug` is `Debug`).
fn ident(word: &str) -> String {
    let name: String = word
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
        .collect();
    name.rsplit("::").next().unwrap_or("").to_owned()
}

/// The line that closes the block opened at `start` (or that ends it with `;`, for an item
/// without a body).
fn block_end(code: &[String], start: usize) -> usize {
    let mut depth = 0i64;
    let mut opened = false;
    for (i, line) in code.iter().enumerate().skip(start) {
        for c in line.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth -= 1,
                ';' if !opened && depth == 0 => return i,
                _ => {}
            }
        }
        if opened && depth <= 0 {
            return i;
        }
    }
    code.len() - 1
}
