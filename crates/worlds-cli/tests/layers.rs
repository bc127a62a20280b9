//! The CLI's top-level modules in layers: a module may use only modules of the layers below its
//! own, so no two modules use each other (directly or through others) and no command module
//! uses another.
//!
//! A module "uses" another when its code (not its comments, string literals or tests) names
//! `crate::module`, or `super::module` from a file at the top of `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level modules of `src/`, lowest layer first.
const LAYERS: &[&[&str]] = &[
    // Plain values and services: text for the terminal, times and words, signals.
    &["escape", "text", "signals"],
    // The world a command works on: a directory, a database or a server, and what the
    // commands do there.
    &["target"],
    // The command line's syntax.
    &["cli"],
    // The commands, each on its own.
    &[
        "bench",
        "cancel",
        "dev",
        "hooks",
        "inspect",
        "keys",
        "logs",
        "pauses",
        "prune",
        "reopen",
        "schedules",
        "serve",
        "show",
        "simulate",
    ],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// `text` with comments removed and the insides of string and character literals blanked, so
/// that neither a path in a comment or a string nor a brace in a literal is taken for code.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && matches!(next, Some('"') | Some('#'))
            && !chars[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}'), or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` without its `#[cfg(test)]` items, and the names of the test modules it declares in
/// files of their own (`#[cfg(test)] mod tests;`).
fn without_tests(code: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    let mut kept = String::new();
    let mut test_files = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        kept.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        let semicolon = item.find(';').unwrap_or(item.len());
        let brace = item.find('{').unwrap_or(item.len());
        if semicolon < brace {
            let words: Vec<&str> = item[..semicolon].split_whitespace().collect();
            if let [.., "mod", name] = words.as_slice() {
                test_files.push((*name).to_owned());
            }
            rest = &item[(semicolon + 1).min(item.len())..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item.char_indices().skip(brace) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    kept.push_str(rest);
    (kept, test_files)
}

/// The items of a `{…}` group (up to its closing brace), split at its top-level commas.
fn group_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

/// The first name of a path (`a::b` gives a, `{a, b::c}` gives a and b).
fn first_names(path: &str) -> Vec<String> {
    let path = path.trim_start();
    if let Some(group) = path.strip_prefix('{') {
        return group_items(group)
            .into_iter()
            .flat_map(first_names)
            .collect();
    }
    let name: String = path
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if name.is_empty() || name == "self" {
        Vec::new()
    } else {
        vec![name]
    }
}

/// The top-level modules `code` names, from a file of module `path` (`["target", "dir"]`):
/// through `crate::x`, or `super::x` when the `super`s lead to the crate's root.
fn named_modules(code: &str, path: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(start).map(|at| at + from) {
            from = at + start.len();
            let before = at.checked_sub(1).map(|b| bytes[b] as char);
            if before.is_some_and(|b| b.is_alphanumeric() || b == '_' || b == ':') {
                continue;
            }
            let mut after = &code[at + start.len()..];
            if start == "crate::" {
                found.extend(first_names(after));
                continue;
            }
            let mut depth = 1;
            while let Some(more) = after.strip_prefix("super::") {
                depth += 1;
                after = more;
            }
            if depth == path.len() {
                found.extend(first_names(after));
            }
        }
    }
    found
}

/// The module path of a file under `src/` (`target/mod.rs` is `target`, `target/dir.rs` is
/// `target::dir`).
fn module_path(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

fn visit(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            visit(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules: the files and folders of `src/` but `main.rs`.
fn modules() -> BTreeSet<String> {
    fs::read_dir(src())
        .unwrap()
        .map(|entry| {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            name.trim_end_matches(".rs").to_owned()
        })
        .filter(|name| name != "main")
        .collect()
}

/// Every (from, to) use between different top-level modules.
fn edges() -> BTreeSet<(String, String)> {
    let src = src();
    let modules = modules();
    let mut files = Vec::new();
    visit(&src, &mut files);
    let mut code = BTreeMap::new();
    let mut test_files: BTreeSet<PathBuf> = BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap().to_path_buf();
        let (kept, tests) = without_tests(&code_only(&fs::read_to_string(file).unwrap()));
        let folder = match relative.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs" | "main.rs") => relative.parent().unwrap().to_path_buf(),
            _ => relative.with_extension(""),
        };
        for name in tests {
            test_files.insert(folder.join(name));
        }
        code.insert(relative, kept);
    }
    let mut edges = BTreeSet::new();
    for (relative, code) in &code {
        let path = module_path(relative);
        // A test module's own file (`tests.rs`), or its folder (`tests/…`).
        let in_tests = test_files
            .iter()
            .any(|test| *relative == test.with_extension("rs") || relative.starts_with(test));
        if in_tests || path == ["main"] {
            continue;
        }
        let from = &path[0];
        for to in named_modules(code, &path) {
            if modules.contains(&to) && &to != from {
                edges.insert((from.clone(), to));
            }
        }
    }
    edges
}

#[test]
fn every_module_has_a_layer() {
    for module in modules() {
        assert!(
            layer_of(&module).is_some(),
            "src/{module} is in no layer: add it to LAYERS in tests/layers.rs"
        );
    }
}

#[test]
fn modules_use_only_the_layers_below_their_own() {
    let edges = edges();
    // The check sees what it checks: commands use the world they work on.
    assert!(
        edges.contains(&("inspect".to_owned(), "target".to_owned())),
        "{edges:?}"
    );
    let wrong: Vec<_> = edges
        .into_iter()
        .filter(|(from, to)| layer_of(from) <= layer_of(to))
        .collect();
    assert!(
        wrong.is_empty(),
        "these modules use a module of their own layer or above: {wrong:?}; move what they \
         share down (a helper to `text`, an operation on a world to `target`)"
    );
}

#[test]
fn no_two_modules_use_each_other() {
    let edges = edges();
    let mut uses: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in &edges {
        uses.entry(from).or_default().insert(to);
    }
    for (from, to) in &edges {
        // Everything `to` reaches, directly or not.
        let mut seen = BTreeSet::new();
        let mut next = vec![to.as_str()];
        while let Some(module) = next.pop() {
            if seen.insert(module) {
                next.extend(uses.get(module).into_iter().flatten().copied());
            }
        }
        assert!(
            !seen.contains(from.as_str()),
            "{from} uses {to}, and {to} leads back to {from}: an import circle"
        );
    }
}

#[test]
fn uses_are_read_from_code_only() {
    let code = code_only(
        "use crate::{a::{b, c}, d};\n// crate::comment\nlet s = \"crate::string\";\n\
         let c = '{'; fn f<'a>() {}\nuse super::e;\nuse super::super::f;\n\
         #[cfg(test)]\nmod tests { use crate::tested; }\n#[cfg(test)]\nmod more;\n\
         crate::g::h();",
    );
    let (code, test_files) = without_tests(&code);
    assert_eq!(test_files, ["more"]);
    let top = ["x".to_owned()];
    assert_eq!(named_modules(&code, &top), ["a", "d", "g", "e"]);
    let nested = ["x".to_owned(), "y".to_owned()];
    assert_eq!(named_modules(&code, &nested), ["a", "d", "g", "f"]);
}
