//! Tidy: the invariants of the tree's shape, checked on the source itself (as
//! rust-analyzer's `tidy` does), so a change that breaks one fails CI with
//! the place and the rule instead of slowly eroding the codemap.
//!
//! Each rule is in `docs/architecture.md` ("Invariants"); each test here
//! names the rule it holds. The sources are parsed with `syn` (with span
//! locations), so lengths and names come from the syntax tree, not from
//! guessing at braces.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// No non-test function may be longer than this (lines, signature to `}`).
const FN_LIMIT: usize = 100;
/// A new function over this many lines needs a line in [`RATCHET`]; a listed
/// one may shrink but not grow.
const FN_RATCHET: usize = 70;
/// No file may hold more non-test lines than this.
const FILE_LIMIT: usize = 800;
/// Functions over [`FN_RATCHET`] lines when the ratchet was set: `path::name
/// lines`. Shrink a function and lower (or remove) its line.
const RATCHET: &str = include_str!("tidy/long_functions.txt");

/// The crates' source trees the rules apply to.
const SOURCE_DIRS: &[&str] = &[
    "runner/src",
    "fake-provider/src",
    "harness/src",
    "harness/lib/src",
    "harness/wire/src",
    "harness/cutpoint/src",
    "harness/conformance/src",
    "harness/lazyfs/src",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every source file, relative to the workspace root, with its text.
fn sources() -> Vec<(String, String)> {
    let root = root();
    let mut files = Vec::new();
    for d in SOURCE_DIRS {
        rust_files(&root.join(d), &mut files);
    }
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).unwrap().display().to_string();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// Whether a file is test code as a whole (a `tests.rs` module or a file
/// under a `tests/` directory).
fn is_test_file(rel: &str) -> bool {
    rel.ends_with("/tests.rs") || rel.contains("/tests/")
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    }) || attrs.iter().any(|a| a.path().is_ident("test"))
}

/// What one file's syntax tree says: its functions' lengths and the lines of
/// its test items.
#[derive(Default)]
struct Shape {
    /// `(qualified name, first line, lines)` of every non-test function.
    fns: Vec<(String, usize, usize)>,
    /// Lines inside `#[cfg(test)]` items.
    test_lines: usize,
    /// Paths naming another crate: `(first segment, line)`.
    crate_paths: Vec<(String, usize)>,
    /// Top-level modules of its own crate it names (`crate::X…`, `use
    /// crate::{X, …}`): `(X, line)`.
    crate_modules: Vec<(String, usize)>,
    /// What writes to the terminal: print macros and `stdout()`/`stderr()`
    /// calls, `(name, line)`.
    prints: Vec<(String, usize)>,
    /// Lines of `static` items.
    statics: Vec<usize>,
    owner: Vec<String>,
}

fn lines_of(span: proc_macro2::Span) -> (usize, usize) {
    (span.start().line, span.end().line - span.start().line + 1)
}

impl Shape {
    /// Records a function from its signature to its closing brace (its doc
    /// comment and attributes do not count).
    fn function(&mut self, sig: &syn::Signature, block: &syn::Block) {
        let name = &sig.ident;
        let first = sig.fn_token.span.start().line;
        let n = block.brace_token.span.close().end().line - first + 1;
        let mut q = self.owner.clone();
        q.push(name.to_string());
        self.fns.push((q.join("::"), first, n));
    }
}

impl<'ast> Visit<'ast> for Shape {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            _ => &[],
        };
        if is_cfg_test(attrs) {
            self.test_lines += lines_of(item.span()).1;
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.function(&f.sig, &f.block);
        self.owner.push(f.sig.ident.to_string());
        syn::visit::visit_item_fn(self, f);
        self.owner.pop();
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let ty = match &*i.self_ty {
            syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        self.owner.push(ty.unwrap_or_else(|| "impl".into()));
        syn::visit::visit_item_impl(self, i);
        self.owner.pop();
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_cfg_test(&f.attrs) {
            return;
        }
        self.function(&f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        if let Some(name) = m.path.segments.last().map(|s| s.ident.to_string())
            && PRINT_MACROS.contains(&name.as_str())
        {
            self.prints
                .push((format!("{name}!"), m.path.span().start().line));
        }
        syn::visit::visit_macro(self, m);
    }

    fn visit_item_static(&mut self, i: &'ast syn::ItemStatic) {
        self.statics.push(i.static_token.span.start().line);
        syn::visit::visit_item_static(self, i);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if let Some(last) = p.segments.last()
            && (last.ident == "stdout" || last.ident == "stderr")
            && p.segments.len() > 1
        {
            self.prints
                .push((format!("{}()", last.ident), last.ident.span().start().line));
        }
        // A one-segment path is a local name (`runner.kill()`), not a crate.
        if let (Some(first), true) = (p.segments.first(), p.segments.len() > 1) {
            self.crate_paths
                .push((first.ident.to_string(), first.ident.span().start().line));
            if first.ident == "crate" {
                let m = &p.segments[1].ident;
                self.crate_modules
                    .push((m.to_string(), m.span().start().line));
            }
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_use_tree(&mut self, t: &'ast syn::UseTree) {
        if let syn::UseTree::Path(p) = t {
            self.crate_paths
                .push((p.ident.to_string(), p.ident.span().start().line));
            if p.ident == "crate" {
                self.crate_modules.extend(use_heads(&p.tree));
            }
            // Only the first segment of a `use` names a crate.
            return;
        }
        syn::visit::visit_use_tree(self, t);
    }
}

/// The macros that print.
const PRINT_MACROS: &[&str] = &["println", "print", "eprintln", "eprint", "dbg"];

/// The first names of a `use crate::…` tree after `crate`.
fn use_heads(t: &syn::UseTree) -> Vec<(String, usize)> {
    match t {
        syn::UseTree::Path(p) => vec![(p.ident.to_string(), p.ident.span().start().line)],
        syn::UseTree::Name(n) => vec![(n.ident.to_string(), n.ident.span().start().line)],
        syn::UseTree::Rename(r) => vec![(r.ident.to_string(), r.ident.span().start().line)],
        syn::UseTree::Group(g) => g.items.iter().flat_map(use_heads).collect(),
        syn::UseTree::Glob(_) => Vec::new(),
    }
}

fn shape(rel: &str, text: &str) -> Shape {
    let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let mut s = Shape::default();
    s.visit_file(&file);
    s
}

fn shapes() -> Vec<(String, String, Shape)> {
    sources()
        .into_iter()
        .filter(|(rel, _)| !is_test_file(rel))
        .map(|(rel, text)| {
            let s = shape(&rel, &text);
            (rel, text, s)
        })
        .collect()
}

fn ratchet() -> BTreeMap<String, usize> {
    RATCHET
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, n) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad ratchet line {l:?}"));
            (name.trim().to_owned(), n.parse().unwrap())
        })
        .collect()
}

/// Rule: no non-test function over 100 lines; none over 70 unless the
/// ratchet lists it at its length or more; the ratchet lists no function that
/// no longer needs it.
#[test]
fn functions_stay_short() {
    let ratchet = ratchet();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (rel, _, s) in shapes() {
        for (name, line, n) in &s.fns {
            let key = format!("{rel}::{name}");
            if *n > FN_LIMIT {
                problems.push(format!(
                    "{rel}:{line}: `{name}` is {n} lines (limit {FN_LIMIT}): split it"
                ));
            } else if *n > FN_RATCHET {
                match ratchet.get(&key) {
                    Some(&max) if *n <= max => {
                        seen.insert(key.clone());
                    }
                    Some(&max) => problems.push(format!(
                        "{rel}:{line}: `{name}` grew to {n} lines (ratchet {max}): shorten it"
                    )),
                    None => problems.push(format!(
                        "{rel}:{line}: `{name}` is {n} lines (over {FN_RATCHET}): split it"
                    )),
                }
            }
        }
    }
    for key in ratchet.keys().filter(|k| !seen.contains(*k)) {
        problems.push(format!(
            "harness/tests/tidy/long_functions.txt: `{key}` is gone or now ≤ {FN_RATCHET} lines: remove its line"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Rule: no file holds more than 800 lines of non-test code.
#[test]
fn files_stay_small() {
    let mut problems = Vec::new();
    for (rel, text, s) in shapes() {
        let n = text.lines().count() - s.test_lines;
        if n > FILE_LIMIT {
            problems.push(format!(
                "{rel}: {n} lines of non-test code (limit {FILE_LIMIT}): split it by concept"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Rule: the harness library (`harness/lib`) depends on neither the runner
/// nor the fakes, in any section of its manifest: it runs them as
/// processes, and everything the programs share goes through the `wire`
/// crate. Only the `turncut` binary crate (`harness/`) links them, for
/// `turncut runnerd` and `turncut fake-provider` (their `main`) and
/// runnerd's list of seeded bugs.
#[test]
fn the_harness_library_depends_on_neither_the_runner_nor_the_fakes() {
    let text = std::fs::read_to_string(root().join("harness/lib/Cargo.toml")).unwrap();
    let manifest: toml::Table = text.parse().unwrap();
    let mut problems = Vec::new();
    for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
        let Some(deps) = manifest.get(section).and_then(|d| d.as_table()) else {
            continue;
        };
        for dep in ["runner", "fake-provider", "turncut"] {
            if deps.contains_key(dep) {
                problems.push(format!(
                    "harness/lib/Cargo.toml [{section}] names `{dep}`: the library runs the programs as processes (pass what it needs in from harness/src/main.rs)"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Rule: `wire`, `cutpoint` and `lazyfs` are leaves: they depend on no crate of the
/// workspace, so every program can depend on them without pointing back up.
#[test]
fn the_shared_crates_are_leaves() {
    let root = root();
    let members = [
        "runner",
        "fake-provider",
        "harness",
        "turncut",
        "conformance",
        "cutpoint",
        "wire",
        "lazyfs",
    ];
    for krate in ["harness/wire", "harness/cutpoint", "harness/lazyfs"] {
        let text = std::fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
        let manifest: toml::Table = text.parse().unwrap();
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(deps) = manifest.get(section).and_then(|d| d.as_table()) else {
                continue;
            };
            for name in deps.keys() {
                assert!(
                    !members.contains(&name.as_str()),
                    "{krate}/Cargo.toml: [{section}] {name}: a shared crate must not depend on a workspace crate"
                );
            }
        }
    }
}

/// The module cycles the harness had when this rule came (issue 22): each
/// line is one strongly connected component, `crate-dir: a b c`. A cycle not
/// listed fails; a listed one that changed or is gone fails too, so the
/// list only shrinks.
const MODULE_CYCLES: &str = include_str!("tidy/module_cycles.txt");

/// The top-level module a source file belongs to (`cell` for
/// `harness/lib/src/cell/faults.rs`), or `None` for the crate root.
fn top_module(rel_in_src: &str) -> Option<String> {
    let first = rel_in_src.split('/').next()?;
    let name = first.trim_end_matches(".rs");
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// Every edge `A → B` between top-level modules of the crate in `dir` (a
/// non-test item of a file of `A` names `crate::B`).
fn module_edges(dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let prefix = format!("{dir}/");
    let shapes: Vec<_> = shapes()
        .into_iter()
        .filter(|(rel, _, _)| rel.starts_with(&prefix))
        .collect();
    let modules: BTreeSet<String> = shapes
        .iter()
        .filter_map(|(rel, _, _)| top_module(&rel[prefix.len()..]))
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, _, s) in &shapes {
        let Some(from) = top_module(&rel[prefix.len()..]) else {
            continue;
        };
        let to: Vec<String> = s
            .crate_modules
            .iter()
            .map(|(m, _)| m)
            .filter(|m| **m != from && modules.contains(*m))
            .cloned()
            .collect();
        edges.entry(from).or_default().extend(to);
    }
    edges
}

/// The strongly connected components of more than one module.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for n in edges.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (m, r) in &reaches {
        let scc: BTreeSet<String> = r
            .iter()
            .filter(|n| reaches.get(n).is_some_and(|back| back.contains(*m)))
            .cloned()
            .collect();
        if scc.len() > 1 && !out.contains(&scc) {
            out.push(scc);
        }
    }
    out
}

/// Rule: the top-level modules of every crate form a DAG (the harness keeps
/// only the cycles `tidy/module_cycles.txt` lists, and only while they stay
/// exactly as listed).
#[test]
fn the_modules_of_each_crate_form_a_dag() {
    let allowed: BTreeSet<(String, BTreeSet<String>)> = MODULE_CYCLES
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (dir, mods) = l.split_once(':').expect("`dir: modules`");
            (
                dir.to_owned(),
                mods.split_whitespace().map(str::to_owned).collect(),
            )
        })
        .collect();
    let mut found = BTreeSet::new();
    let mut problems = Vec::new();
    for dir in SOURCE_DIRS {
        for scc in cycles(&module_edges(dir)) {
            let key = (dir.to_string(), scc.clone());
            if !allowed.contains(&key) {
                let names: Vec<_> = scc.iter().map(String::as_str).collect();
                problems.push(format!(
                    "{dir}: the modules {} import each other in a cycle: break it",
                    names.join(" ")
                ));
            }
            found.insert(key);
        }
    }
    for (dir, mods) in allowed.difference(&found) {
        let names: Vec<_> = mods.iter().map(String::as_str).collect();
        problems.push(format!(
            "harness/tests/tidy/module_cycles.txt: `{dir}: {}` is no longer a cycle as listed: update or remove its line",
            names.join(" ")
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The calls that send a signal.
const SIGNAL_CALLS: &[&str] = &["signal::kill(", "killpg(", "signal::raise(", " kill(Pid"];

/// Rule: only the runner's supervisor, the harness's nemesis and supervisor,
/// and the fakes' fault points (which kill their own process) send signals.
#[test]
fn only_the_supervisors_and_the_nemesis_send_signals() {
    let allowed = |rel: &str| {
        rel.starts_with("runner/src/supervisor")
            || rel == "harness/lib/src/nemesis.rs"
            || rel == "harness/lib/src/supervisor.rs"
            || rel == "fake-provider/src/faults.rs"
    };
    let mut problems = Vec::new();
    for (rel, text, s) in shapes() {
        if allowed(&rel) {
            continue;
        }
        let code_lines = text.lines().count() - s.test_lines;
        for (i, line) in text.lines().enumerate().take(code_lines) {
            let code = line.split("//").next().unwrap_or("");
            if SIGNAL_CALLS.iter().any(|c| code.contains(c)) {
                problems.push(format!("{rel}:{}: sends a signal: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Rule: the seeded bugs are listed once (`runner::seeded::SeededBug`), and
/// `docs/seeded-bugs.md` documents exactly those.
#[test]
fn the_seeded_bug_doc_lists_every_bug_and_no_other() {
    let doc = std::fs::read_to_string(root().join("docs/seeded-bugs.md")).unwrap();
    let table = doc
        .split("## The bugs")
        .nth(1)
        .expect("docs/seeded-bugs.md: a `## The bugs` section");
    let table = table.split("\n## ").next().unwrap();
    let documented: BTreeSet<String> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name.to_owned()))
        .collect();
    let code: BTreeSet<String> = runner::seeded::SeededBug::ALL
        .iter()
        .map(|b| b.as_str().to_owned())
        .collect();
    assert_eq!(
        documented, code,
        "docs/seeded-bugs.md's table against runner::seeded::SeededBug::ALL"
    );
}

/// Rule: every scenario file of one task has a snapshot, and every
/// snapshot a scenario (a file of several tasks has none: its paths follow
/// the tasks' interleaving, `tests/snapshots.rs`).
#[test]
fn every_scenario_has_a_snapshot() {
    let root = root();
    let names = |dir: &str, prefix: &str, suffix: &str| -> BTreeSet<String> {
        std::fs::read_dir(root.join(dir))
            .unwrap()
            .filter_map(|e| {
                let n = e.unwrap().file_name().to_string_lossy().into_owned();
                n.strip_prefix(prefix)?
                    .strip_suffix(suffix)
                    .map(str::to_owned)
            })
            .collect()
    };
    let one_task = |name: &String| {
        let path = format!("scenarios/{name}.toml");
        let text = std::fs::read_to_string(root.join(&path)).unwrap();
        harness::scenario::parse(&text, &path)
            .unwrap()
            .tasks()
            .len()
            == 1
    };
    let scenarios: BTreeSet<String> = names("scenarios", "", ".toml")
        .into_iter()
        .filter(one_task)
        .collect();
    let snapshots = names("reports/snapshots", "scenario@", ".toml.snap");
    assert_eq!(
        scenarios, snapshots,
        "scenarios/*.toml against reports/snapshots/scenario@*.toml.snap"
    );
}

/// The lines of `text` (a file's non-test code) that name `serde_json`'s
/// `Value`: a path through `serde_json` to `Value`, or a `use` of it (a
/// glob of `serde_json` included, which brings it in).
fn names_json_value(rel: &str, text: &str) -> Vec<usize> {
    #[derive(Default)]
    struct Finder {
        lines: Vec<usize>,
    }
    impl<'ast> Visit<'ast> for Finder {
        fn visit_item(&mut self, item: &'ast syn::Item) {
            let attrs: &[syn::Attribute] = match item {
                syn::Item::Mod(m) => &m.attrs,
                syn::Item::Fn(f) => &f.attrs,
                syn::Item::Impl(i) => &i.attrs,
                syn::Item::Use(u) => &u.attrs,
                _ => &[],
            };
            if !is_cfg_test(attrs) {
                syn::visit::visit_item(self, item);
            }
        }

        fn visit_path(&mut self, p: &'ast syn::Path) {
            let names: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
            if names.first().is_some_and(|n| n == "serde_json")
                && names.iter().any(|n| n == "Value")
            {
                self.lines.push(p.span().start().line);
            }
            syn::visit::visit_path(self, p);
        }

        fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
            fn walk(t: &syn::UseTree, json: bool, out: &mut Vec<usize>) {
                match t {
                    syn::UseTree::Path(p) => walk(&p.tree, json || p.ident == "serde_json", out),
                    syn::UseTree::Name(n) if json && n.ident == "Value" => {
                        out.push(n.ident.span().start().line)
                    }
                    syn::UseTree::Rename(r) if json && r.ident == "Value" => {
                        out.push(r.ident.span().start().line)
                    }
                    syn::UseTree::Glob(g) if json => out.push(g.star_token.span.start().line),
                    syn::UseTree::Group(g) => g.items.iter().for_each(|i| walk(i, json, out)),
                    _ => {}
                }
            }
            walk(&u.tree, false, &mut self.lines);
        }
    }
    let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let mut f = Finder::default();
    f.visit_file(&file);
    f.lines.sort_unstable();
    f.lines.dedup();
    f.lines
}

/// Rule: the oracles read typed evidence only. No non-test code under
/// `harness/lib/src/oracles/` names `serde_json::Value`: the evidence is
/// parsed once where it is read (`run_log::RunLogEvent`,
/// `evidence::TaskRead`, the typed accessors of `evidence`), so a runner
/// that renames a field fails the parse with its place (`unknown`), never
/// an oracle's lookup silently.
#[test]
fn the_oracles_never_name_a_json_value() {
    let mut problems = Vec::new();
    for (rel, text) in sources() {
        if !rel.starts_with("harness/lib/src/oracles/") || is_test_file(&rel) {
            continue;
        }
        for line in names_json_value(&rel, &text) {
            problems.push(format!(
                "{rel}:{line}: names serde_json::Value: read the typed evidence (run_log, evidence) instead"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The tidy checks themselves: each rule finds what it is for.
#[test]
fn the_rules_find_what_they_look_for() {
    let text = "fn short() {}\n#[cfg(test)]\nmod tests {\n    fn long() {\n\n\n    }\n}\nimpl Foo {\n    fn m(&self) {\n        runner::cli::X;\n    }\n}\n";
    let s = shape("x.rs", text);
    let fns: Vec<_> = s.fns.iter().map(|(n, l, c)| (n.as_str(), *l, *c)).collect();
    assert_eq!(fns, [("short", 1, 1), ("Foo::m", 10, 3)]);
    assert_eq!(s.test_lines, 7);
    assert!(s.crate_paths.contains(&("runner".into(), 11)));
    let c = shape("z.rs", "use crate::{a::X, b};\nfn f() { crate::c::g(); }\n");
    let named: Vec<_> = c.crate_modules.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(named, ["a", "b", "c"]);
    let edges: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
            .iter()
            .map(|(x, y)| (x.to_string(), BTreeSet::from([y.to_string()])))
            .collect();
    let sccs = cycles(&edges);
    assert_eq!(sccs, [BTreeSet::from(["a".into(), "b".into(), "c".into()])]);
    let json = "use serde_json::{json, Value as V};\nuse serde_json::*;\nfn f(v: &serde_json::Value) {}\nfn g(v: serde_json::Map) {}\n#[cfg(test)]\nmod tests {\n    use serde_json::Value;\n}\n";
    assert_eq!(names_json_value("j.rs", json), [1, 2, 3]);
    let p = shape(
        "p.rs",
        "static S: u8 = 0;\nfn f() {\n    println!(\"a\");\n    let _ = std::io::stdout();\n    g(|| eprint!(\"b\"));\n}\n#[cfg(test)]\nmod tests {\n    fn t() { println!(); }\n}\n",
    );
    let prints: Vec<_> = p.prints.iter().map(|(w, l)| (w.as_str(), *l)).collect();
    assert_eq!(prints, [("println!", 3), ("stdout()", 4), ("eprint!", 5)]);
    assert_eq!(p.statics, [1]);
    let u = shape("y.rs", "use fake_provider::journal::read;\n");
    assert!(
        u.crate_paths.contains(&("fake_provider".into(), 1)),
        "{:?}",
        u.crate_paths
    );
}

/// The files of the harness library that may write to the terminal: the
/// console reporters, the step summary's warning, and `demo`, whose lines
/// are `turncut demo`'s own output rather than progress.
const LIB_PRINTERS: &[&str] = &[
    "harness/lib/src/report/console.rs",
    "harness/lib/src/report/dir.rs",
    "harness/lib/src/demo.rs",
];

/// Rule: the harness library shows progress and outcomes only through its
/// reporters (`--message-format json` stays JSON lines), and the stream
/// keeps no global state (no `static` in `progress.rs` or `report/`).
#[test]
fn the_library_prints_only_through_its_reporters() {
    let mut problems = Vec::new();
    for (rel, _, s) in shapes() {
        if !rel.starts_with("harness/lib/src/") {
            continue;
        }
        if !LIB_PRINTERS.contains(&rel.as_str()) {
            for (what, line) in &s.prints {
                problems.push(format!(
                    "{rel}:{line}: `{what}` outside a reporter: emit an event (`Progress::note`, or a typed one) instead"
                ));
            }
        }
        let stream =
            rel == "harness/lib/src/progress.rs" || rel.starts_with("harness/lib/src/report/");
        if stream {
            for line in &s.statics {
                problems.push(format!(
                    "{rel}:{line}: a `static` in the progress stream: reporters are values in a `Progress`"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every file of the tree under `dir` but build output, installed packages
/// and git's own, relative to `root`.
fn tree_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let skip = ["target", "node_modules", ".git"];
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        if p.is_dir() {
            if !skip.contains(&name.as_ref()) {
                tree_files(root, &p, out);
            }
        } else {
            out.push(p.strip_prefix(root).unwrap().display().to_string());
        }
    }
}

/// The backticked spans of `doc`, with their 1-based line.
fn backticked(doc: &str) -> Vec<(usize, &str)> {
    doc.lines()
        .enumerate()
        .flat_map(|(i, line)| line.split('`').skip(1).step_by(2).map(move |t| (i + 1, t)))
        .collect()
}

/// A source file's path as the codemap writes one (`src/cell/mod.rs`,
/// `harness/tests/tidy.rs`, `docs/scenarios.md`): a path of the tree ends
/// with it. Files a run writes (`wave.json`, `summary.md`) are not paths of
/// the tree and are not checked.
fn is_tree_path(t: &str) -> bool {
    let ext = t.rsplit_once('.').map(|(_, x)| x).unwrap_or_default();
    let plain = t
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
    plain && (["rs", "ts", "toml"].contains(&ext) || (t.contains('/') && ext == "md"))
}

#[test]
fn the_codemap_rule_reads_paths_and_names() {
    let doc = "a `src/cell/mod.rs` b `Evidence::task` c `wave.json` d `--out DIR`";
    let spans: Vec<&str> = backticked(doc).into_iter().map(|(_, t)| t).collect();
    assert_eq!(
        spans,
        [
            "src/cell/mod.rs",
            "Evidence::task",
            "wave.json",
            "--out DIR"
        ]
    );
    assert!(is_tree_path("src/cell/mod.rs") && is_tree_path("docs/scenarios.md"));
    assert!(!is_tree_path("wave.json") && !is_tree_path("summary.md"));
    assert_eq!(rust_name("Evidence::task"), Some(vec!["Evidence", "task"]));
    assert_eq!(rust_name("run_cell()"), Some(vec!["run_cell"]));
    assert_eq!(rust_name("--out DIR"), None);
}

/// A Rust name as the codemap writes one: `name`, `Type::name`, `name()`.
fn rust_name(t: &str) -> Option<Vec<&str>> {
    let t = t.strip_suffix("()").unwrap_or(t);
    let ident = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let segments: Vec<&str> = t.split("::").collect();
    segments.iter().all(|s| ident(s)).then_some(segments)
}

/// `docs/architecture.md` names only what exists: every source path it
/// gives is a file of the tree, and every Rust name (each segment of
/// `Type::name`) is a word of some source file, so a rename or a move
/// that leaves the codemap behind fails here.
#[test]
fn the_codemap_names_only_what_exists() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut files = Vec::new();
    tree_files(&root, &root, &mut files);
    let code = ["rs", "ts", "toml", "json", "sh"];
    let mut words = BTreeSet::new();
    for f in files
        .iter()
        .filter(|f| code.iter().any(|x| f.ends_with(&format!(".{x}"))))
    {
        let text = std::fs::read_to_string(root.join(f)).unwrap_or_default();
        words.extend(
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_owned),
        );
    }
    let mut stale = Vec::new();
    for (line, t) in backticked(&doc) {
        if is_tree_path(t) {
            let found = files
                .iter()
                .any(|f| f == t || f.ends_with(&format!("/{t}")));
            if !found {
                stale.push(format!("docs/architecture.md:{line}: no file `{t}`"));
            }
        } else if let Some(segments) = rust_name(t) {
            for s in segments.into_iter().filter(|s| !words.contains(*s)) {
                stale.push(format!(
                    "docs/architecture.md:{line}: `{s}` is in no source file"
                ));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the codemap is stale:\n{}",
        stale.join("\n")
    );
}

/// The cell produces evidence and judges nothing: no file of
/// `harness/lib/src/cell/` names the oracles (`judge::judged` does the
/// judging, above it).
#[test]
fn the_cell_never_judges() {
    let judging: Vec<String> = sources()
        .into_iter()
        .filter(|(rel, _)| rel.starts_with("harness/lib/src/cell/"))
        .flat_map(|(rel, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, l)| !l.trim_start().starts_with("//"))
                .filter(|(_, l)| l.contains("oracles::"))
                .map(|(i, _)| format!("{rel}:{}", i + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        judging.is_empty(),
        "the cell names the oracles: {judging:?}"
    );
}

/// No control flow by downcast: an error a caller branches on is a typed
/// enum (`planner::PlanError`, `cell::steps::StepError`), so a new kind of
/// error is a new variant the compiler makes every caller handle, not a
/// string or a type a `downcast_ref` may silently stop finding.
#[test]
fn no_control_flow_by_downcast() {
    let found: Vec<String> = sources()
        .into_iter()
        .filter(|(rel, _)| !is_test_file(rel))
        .flat_map(|(rel, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, l)| !l.trim_start().starts_with("//"))
                .filter(|(_, l)| l.contains(".downcast"))
                .map(|(i, _)| format!("{rel}:{}", i + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "branch on a typed error instead of a downcast: {}",
        found.join(", ")
    );
}
