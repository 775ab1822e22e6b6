//! `docs/SPEC.md` is the service's contract, and its numbered rules are what the code and the
//! tests cite. This test holds the two together:
//!
//! - every rule number cited anywhere in the repository's sources and docs is defined in
//!   `docs/SPEC.md` (a rule line `- **R-<s>.<n> <title>.** …`, or for a bare section number a
//!   heading `## R-<s> <title>`);
//! - every rule defined there is cited by at least one test: a file under `tests/tests/`,
//!   `host-http/tests/`, `engine/tests/` or `benches/`, a fixture under `fixtures/` (by its file
//!   name `r-<s>-<n>-…` or its content), or the `#[cfg(test)]` module of a source file. Test
//!   function names cite rules in snake case (`…_r_4_8`), which counts as well. A rule titled
//!   `Withdrawn` keeps its number only so that it is never reused, and needs no test;
//! - `docs/RULES.md`, the table "rule → tests", is what the first two produce. After a change,
//!   refresh it with `UPDATE_EXPECT=1 cargo test -p tests --test spec_rules` and commit it.
//!
//! A citation is `R-` and one or two digits, optionally `.` and one or two digits, with no word
//! character before it and no digit after it: refund ids such as `R-000001` and receipt
//! numbers such as `CR-000001` are not rules.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The contract, relative to the repository root.
const SPEC: &str = "docs/SPEC.md";
/// The generated table of rules and the tests that cite them.
const TABLE: &str = "docs/RULES.md";
/// How to rewrite [`TABLE`].
const REFRESH: &str = "UPDATE_EXPECT=1 cargo test -p tests --test spec_rules";
/// This file: it names rules in its examples, which cite nothing.
const THIS_FILE: &str = "tests/tests/spec_rules.rs";
/// Directories whose every file is a test.
const TEST_DIRS: [&str; 5] = [
    "tests/tests/",
    "host-http/tests/",
    "engine/tests/",
    "benches/",
    "fixtures/",
];

/// A section (`R-4`) or a rule (`R-4.8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct RuleId {
    section: u8,
    rule: Option<u8>,
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rule {
            Some(rule) => write!(f, "R-{}.{rule}", self.section),
            None => write!(f, "R-{}", self.section),
        }
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// One or two ASCII digits at the start of `text` and what follows them; `None` when there are
/// none, or more than two.
fn number(text: &str) -> Option<(u8, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 2 {
        return None;
    }
    Some((text[..digits].parse().ok()?, &text[digits..]))
}

/// The rule a citation names, given the text after its `R-` (`.` between the numbers) or
/// after its `r_` (`_` between them). `None` when the text is no rule number.
fn rule_after(text: &str, separator: char) -> Option<RuleId> {
    let (section, rest) = number(text)?;
    if let Some(after) = rest.strip_prefix(separator) {
        if let Some((rule, _)) = number(after) {
            return Some(RuleId {
                section,
                rule: Some(rule),
            });
        }
        // `R-4.` then not a digit: the section, at the end of a sentence. Three digits after
        // the separator (`R-4.123`) name no rule.
        if after.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
    }
    Some(RuleId {
        section,
        rule: None,
    })
}

/// Every `R-…` citation of a line.
fn citations(line: &str) -> Vec<RuleId> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices("R-") {
        if line[..at].chars().next_back().is_some_and(is_word) {
            continue;
        }
        found.extend(rule_after(&line[at + 2..], '.'));
    }
    found
}

/// Every snake-case citation of a line (`…_r_4_8`, `r_2`), as test names write them.
fn snake_citations(line: &str) -> Vec<RuleId> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices("r_") {
        let before = line[..at].chars().next_back();
        if before.is_some_and(|c| c != '_' && is_word(c)) {
            continue;
        }
        found.extend(rule_after(&line[at + 2..], '_'));
    }
    found
}

/// The rule a fixture's file name names: `r-1-2-022-unknown-currency-code.json` is R-1.2.
fn fixture_name_rule(path: &str) -> Option<RuleId> {
    let name = path.rsplit('/').next()?;
    let rest = name.strip_prefix("r-")?;
    let (section, rest) = number(rest)?;
    let (rule, rest) = number(rest.strip_prefix('-')?)?;
    rest.starts_with('-').then_some(RuleId {
        section,
        rule: Some(rule),
    })
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Whether a file is one whose citations count: sources and docs by extension, JSON only as
/// fixtures and schemas. The generated table is left out: it repeats the contract.
fn scanned(path: &str) -> bool {
    if path == TABLE || path.starts_with("fuzz/corpus/") {
        return false;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    let extension = name.rsplit_once('.').map_or("", |(_, ext)| ext);
    match extension {
        "rs" | "md" | "py" | "sh" | "toml" | "html" => true,
        "json" => path.starts_with("fixtures/") || path.starts_with("schemas/"),
        _ => false,
    }
}

/// The repository's files, relative to its root with `/` separators, sorted: what git tracks
/// plus new files it does not ignore; without git, a walk of the tree that skips `target/`,
/// `node_modules/` and `.git/`.
fn repository_files(root: &Path) -> Vec<String> {
    let listed = Command::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "-z",
        ])
        .output()
        .ok()
        .filter(|output| output.status.success());
    let mut files: Vec<String> = match listed {
        Some(output) => String::from_utf8_lossy(&output.stdout)
            .split('\0')
            .filter(|path| !path.is_empty() && root.join(path).is_file())
            .map(str::to_owned)
            .collect(),
        None => {
            let mut files = Vec::new();
            walk(root, root, &mut files);
            files
        }
    };
    files.sort();
    files.dedup();
    files
}

fn walk(root: &Path, dir: &Path, files: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | "node_modules" | ".git") {
                walk(root, &path, files);
            }
        } else if let Ok(relative) = path.strip_prefix(root) {
            let parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            files.push(parts.join("/"));
        }
    }
}

/// A source file read once.
struct Source {
    path: String,
    lines: Vec<String>,
    /// The first line (0-based) of the file's test text, if it has any: the whole file for
    /// a file of a test directory, from `#[cfg(test)]` before a `mod` for a source file.
    tests_from: Option<usize>,
}

fn is_test_dir_file(path: &str) -> bool {
    path != THIS_FILE && TEST_DIRS.iter().any(|dir| path.starts_with(dir))
}

fn read_sources(root: &Path) -> Vec<Source> {
    repository_files(root)
        .into_iter()
        .filter(|path| scanned(path))
        .filter_map(|path| {
            let text = std::fs::read_to_string(root.join(&path)).ok()?;
            let lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let tests_from = if is_test_dir_file(&path) {
                Some(0)
            } else if path.ends_with(".rs") && path.contains("src/") && path != THIS_FILE {
                lines.windows(2).position(|pair| {
                    pair[0].trim() == "#[cfg(test)]"
                        && ["mod ", "pub mod ", "pub(crate) mod "]
                            .iter()
                            .any(|start| pair[1].trim_start().starts_with(start))
                })
            } else {
                None
            };
            Some(Source {
                path,
                lines,
                tests_from,
            })
        })
        .collect()
}

/// What `docs/SPEC.md` defines.
#[derive(Debug, Default)]
struct Spec {
    /// Section number → title.
    sections: BTreeMap<u8, String>,
    /// Rule → title.
    rules: BTreeMap<RuleId, String>,
    /// Lines that look like a heading or a rule of the contract but are not well formed.
    problems: Vec<String>,
}

/// Reads the sections (`## R-4 Cancellation request`) and rules
/// (`- **R-4.8 Order of a cancellation.** …`) of the contract.
fn parse_spec(text: &str) -> Spec {
    let mut spec = Spec::default();
    let mut current: Option<u8> = None;
    for (index, line) in text.lines().enumerate() {
        let at = format!("{SPEC}:{}", index + 1);
        if line.starts_with('#') {
            current = None;
            let Some(heading) = line.strip_prefix("## R-") else {
                continue;
            };
            match number(heading) {
                Some((section, rest)) if rest.starts_with(' ') && !rest.trim().is_empty() => {
                    if spec
                        .sections
                        .insert(section, rest.trim().to_owned())
                        .is_some()
                    {
                        spec.problems
                            .push(format!("{at}: section R-{section} is defined twice"));
                    }
                    current = Some(section);
                }
                _ => spec.problems.push(format!(
                    "{at}: a section heading is `## R-<n> <title>`: {line}"
                )),
            }
            continue;
        }
        let Some(rest) = line.strip_prefix("- **R-") else {
            continue;
        };
        let parsed = number(rest).and_then(|(section, rest)| {
            let (rule, rest) = number(rest.strip_prefix('.')?)?;
            let (title, body) = rest.strip_prefix(' ')?.split_once("**")?;
            let title = title.trim().trim_end_matches('.').trim();
            (!title.is_empty() && body.starts_with(' ')).then(|| {
                (
                    RuleId {
                        section,
                        rule: Some(rule),
                    },
                    title.to_owned(),
                )
            })
        });
        let Some((id, title)) = parsed else {
            spec.problems.push(format!(
                "{at}: a rule is `- **R-<s>.<n> <title>.** <text>`: {line}"
            ));
            continue;
        };
        if current != Some(id.section) {
            spec.problems.push(format!(
                "{at}: {id} stands outside its section heading `## R-{} …`",
                id.section
            ));
        }
        if spec.rules.insert(id, title).is_some() {
            spec.problems.push(format!("{at}: {id} is defined twice"));
        }
    }
    for section in spec.sections.keys() {
        if !spec.rules.keys().any(|id| id.section == *section) {
            spec.problems
                .push(format!("{SPEC}: section R-{section} has no rule"));
        }
    }
    spec
}

impl Spec {
    fn defines(&self, id: RuleId) -> bool {
        match id.rule {
            Some(_) => self.rules.contains_key(&id),
            None => self.sections.contains_key(&id.section),
        }
    }
}

fn load_spec(root: &Path) -> Spec {
    let text = std::fs::read_to_string(root.join(SPEC))
        .unwrap_or_else(|e| panic!("cannot read {SPEC}: {e}"));
    parse_spec(&text)
}

/// Where a test of a rule lives, as the table lists it: a test file, a fixture directory, or a
/// source file's unit tests.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum TestPlace {
    File(String),
    Fixtures(String),
    UnitTests(String),
}

fn place_of(path: &str) -> TestPlace {
    if let Some(rest) = path.strip_prefix("fixtures/") {
        let dir = rest.rsplit_once('/').map_or("", |(dir, _)| dir);
        TestPlace::Fixtures(format!("fixtures/{dir}"))
    } else if is_test_dir_file(path) {
        TestPlace::File(path.to_owned())
    } else {
        TestPlace::UnitTests(path.to_owned())
    }
}

/// Whether a rule is kept only so that its number is never reused: it needs no test.
fn withdrawn(title: &str) -> bool {
    title == "Withdrawn"
}

/// Rule (or section) → the test files citing it (each fixture file once).
fn test_citations(sources: &[Source]) -> BTreeMap<RuleId, BTreeSet<String>> {
    let mut cited: BTreeMap<RuleId, BTreeSet<String>> = BTreeMap::new();
    for source in sources {
        let Some(from) = source.tests_from else {
            continue;
        };
        let mut ids: Vec<RuleId> = source.lines[from..]
            .iter()
            .flat_map(|line| {
                let mut ids = citations(line);
                ids.extend(snake_citations(line));
                ids
            })
            .collect();
        if source.path.starts_with("fixtures/") {
            ids.extend(fixture_name_rule(&source.path));
        }
        for id in ids {
            cited.entry(id).or_default().insert(source.path.clone());
        }
    }
    cited
}

#[test]
fn every_cited_rule_is_defined_in_the_spec() {
    let root = root();
    let spec = load_spec(&root);
    assert!(
        spec.problems.is_empty(),
        "{SPEC} is not well formed:\n{}",
        spec.problems.join("\n")
    );
    assert!(!spec.rules.is_empty(), "{SPEC} defines no rule");
    let sources = read_sources(&root);
    let mut undefined = Vec::new();
    let mut count = 0usize;
    for source in &sources {
        for (index, line) in source.lines.iter().enumerate() {
            let mut ids = citations(line);
            if source.tests_from.is_some_and(|from| index >= from) {
                ids.extend(snake_citations(line));
            }
            count += ids.len();
            for id in ids {
                if !spec.defines(id) {
                    let what = if id.rule.is_some() {
                        "no such rule"
                    } else {
                        "no such section heading"
                    };
                    undefined.push(format!("{}:{}: {id} ({what})", source.path, index + 1));
                }
            }
        }
    }
    for source in sources.iter().filter(|s| s.path.starts_with("fixtures/")) {
        if let Some(id) = fixture_name_rule(&source.path).filter(|id| !spec.defines(*id)) {
            undefined.push(format!("{}: {id} (no such rule)", source.path));
        }
    }
    assert!(
        count > 800,
        "only {count} citations found in {} files: is the scan reading the repository?",
        sources.len()
    );
    assert!(
        undefined.is_empty(),
        "{} citation(s) name no rule of {SPEC}:\n{}",
        undefined.len(),
        undefined.join("\n")
    );
}

#[test]
fn every_rule_of_the_spec_is_cited_by_a_test() {
    let root = root();
    let spec = load_spec(&root);
    let cited = test_citations(&read_sources(&root));
    let untested: Vec<String> = spec
        .rules
        .iter()
        .filter(|(id, title)| !withdrawn(title) && !cited.contains_key(id))
        .map(|(id, title)| format!("| {id} | {title} |"))
        .collect();
    assert!(
        untested.is_empty(),
        "{} rule(s) of {SPEC} are cited by no test (a file of {}, a fixture, or a \
         #[cfg(test)] module):\n| Rule | Title |\n|---|---|\n{}",
        untested.len(),
        TEST_DIRS.join(", "),
        untested.join("\n")
    );
}

/// The text of `docs/RULES.md`.
fn rules_table(spec: &Spec, cited: &BTreeMap<RuleId, BTreeSet<String>>) -> String {
    let mut text = String::from(
        "# Rules and their tests\n\n\
         Generated by `tests/tests/spec_rules.rs` from [SPEC.md](SPEC.md) and the tests that\n\
         cite its rules; do not edit it by hand. After changing a rule or the rules a test\n\
         cites, refresh it with\n\n\
         ```sh\nUPDATE_EXPECT=1 cargo test -p tests --test spec_rules\n```\n\n\
         A test cites a rule by its number (`R-4.8`) in its text, or in snake case in its name\n\
         (`…_r_4_8`); a fixture also by its file name (`r-1-2-022-….json`). \"unit tests\" is\n\
         the `#[cfg(test)]` module of a source file; a fixture directory shows how many of its\n\
         cases cite the rule.\n",
    );
    for (section, section_title) in &spec.sections {
        text.push_str(&format!(
            "\n## R-{section} {section_title}\n\n| Rule | Title | Tests |\n|---|---|---|\n"
        ));
        for (id, title) in spec.rules.range(
            RuleId {
                section: *section,
                rule: Some(0),
            }..=RuleId {
                section: *section,
                rule: Some(u8::MAX),
            },
        ) {
            let mut places: BTreeMap<TestPlace, usize> = BTreeMap::new();
            for path in cited.get(id).into_iter().flatten() {
                *places.entry(place_of(path)).or_default() += 1;
            }
            let tests: Vec<String> = places
                .iter()
                .map(|(place, count)| match place {
                    TestPlace::File(path) => format!("`{path}`"),
                    TestPlace::Fixtures(dir) => {
                        let cases = if *count == 1 { "case" } else { "cases" };
                        format!("`{dir}/` ({count} {cases})")
                    }
                    TestPlace::UnitTests(path) => format!("`{path}` (unit tests)"),
                })
                .collect();
            let tests = if tests.is_empty() {
                "**none**".to_owned()
            } else {
                tests.join(", ")
            };
            text.push_str(&format!("| {id} | {title} | {tests} |\n"));
        }
    }
    text
}

#[test]
fn the_rules_table_is_up_to_date() {
    let root = root();
    let spec = load_spec(&root);
    let expected = rules_table(&spec, &test_citations(&read_sources(&root)));
    let path = root.join(TABLE);
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == expected {
        return;
    }
    if std::env::var_os("UPDATE_EXPECT").is_some_and(|v| v == "1") {
        std::fs::write(&path, &expected).unwrap_or_else(|e| panic!("cannot write {TABLE}: {e}"));
        return;
    }
    let first_difference = committed
        .lines()
        .zip(expected.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| committed.lines().count().min(expected.lines().count()));
    panic!(
        "{TABLE} differs from what {SPEC} and the tests cite (first at line {}:\n  committed: {}\n  expected:  {})\nrefresh it with: {REFRESH}",
        first_difference + 1,
        committed.lines().nth(first_difference).unwrap_or("<end>"),
        expected.lines().nth(first_difference).unwrap_or("<end>"),
    );
}

#[test]
fn citations_are_read_as_the_contract_says() {
    let rule = |section, rule| RuleId {
        section,
        rule: Some(rule),
    };
    let section = |section| RuleId {
        section,
        rule: None,
    };
    assert_eq!(
        citations("see R-4.8, R-10.2 and R-7"),
        [rule(4, 8), rule(10, 2), section(7)]
    );
    assert_eq!(citations("(R-4.1/R-4.3)."), [rule(4, 1), rule(4, 3)]);
    assert_eq!(citations("as R-4."), [section(4)]);
    // Refund and receipt numbers, and longer numbers, are no rules.
    assert!(citations("R-000001 CR-000001 XR-4.8 R-123 R-4.123").is_empty());
    assert_eq!(
        snake_citations("fn refund_once_r_4_5_r_7_3()"),
        [rule(4, 5), rule(7, 3)]
    );
    assert_eq!(snake_citations("fn quote_fixtures_r_2() {"), [section(2)]);
    assert!(snake_citations("let per_1 = chr_2; r_123").is_empty());
    assert_eq!(
        fixture_name_rule("fixtures/validation/r-1-2-022-unknown-currency-code.json"),
        Some(rule(1, 2))
    );
    assert_eq!(
        fixture_name_rule("fixtures/penalties/01-no-policy.json"),
        None
    );
    let spec = parse_spec(
        "# Contract\n\n## R-1 Money\n\n- **R-1.1 Exact decimals.** Text.\n  More text.\n\
         - **R-1.2 Currency codes.** Text.\n\n## Routes\n",
    );
    assert!(spec.problems.is_empty(), "{:?}", spec.problems);
    assert_eq!(
        spec.rules.get(&rule(1, 2)).map(String::as_str),
        Some("Currency codes")
    );
    assert!(spec.defines(section(1)) && !spec.defines(section(2)));
    let broken = parse_spec("## R-1 Money\n- **R-2.1 Elsewhere.** Text.\n- **R-1.1** Text.\n");
    assert_eq!(broken.problems.len(), 3, "{:?}", broken.problems);
}
