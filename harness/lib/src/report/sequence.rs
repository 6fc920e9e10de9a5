//! Every cell's sequence, as compact data for the report's script, which
//! draws it as an SVG sequence diagram (harness, runner and provider lanes;
//! the cut marked; the rows an oracle's evidence points at highlighted).
//!
//! The rows come from the lines of `Evidence::timeline`. A cell that did not
//! pass keeps each row's full text; a passing cell keeps names only (the
//! harness action, the run-log event kind, the provider method), which is
//! what lets 5,000 diagrams fit in a report of a few hundred kilobytes: rows
//! are indexes into a table of distinct labels per scenario (one character
//! each while a scenario has at most 88 labels), and a cell's rows start
//! with the longest prefix it shares with the previous cell of its scenario.

use std::collections::HashMap;

use crate::model::{CellResult, Verdict};

/// At most this many rows are drawn per cell (the text timeline of a cell
/// that did not pass has them all).
pub const DIAGRAM_ROWS_MAX: usize = 300;

/// A row's full text is cut to this many characters.
const FULL_LABEL_CHARS_MAX: usize = 200;

/// The digits of the row codes: printable ASCII without `"`, backslash, `<`,
/// `>`, `&` and `'`, so a code never needs escaping in JSON or HTML.
const ALPHABET: &[u8] =
    b"!#$%()*+,-./0123456789:;=?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]^_`abcdefghijklmnopqrstuvwxyz{|}~";

/// One parsed timeline line: `"{ms} ms {mark} {lane} {text}"` (`>>` marks
/// the cut; lanes `H`, `R`, `P`).
struct Row<'a> {
    cut: bool,
    lane: char,
    text: &'a str,
}

fn parse(line: &str) -> Option<Row<'_>> {
    let (_, rest) = line.trim_start().split_once(" ms ")?;
    let mark = rest.get(..3)?;
    let lane = rest.get(3..)?.chars().next()?;
    let text = rest.get(3 + lane.len_utf8()..)?.trim_start();
    matches!(lane, 'H' | 'R' | 'P').then_some(Row {
        cut: mark.starts_with(">>"),
        lane,
        text,
    })
}

/// The names of a row: the harness action, the kind of a run-log event
/// (without its seq, which shifts with every earlier event), `<- method` /
/// `-> method` of a provider message or a fact's name.
fn short(row: &Row<'_>) -> String {
    let text = match row.lane {
        'R' => row.text.split_once(' ').map_or(row.text, |(_, rest)| rest),
        _ => row.text,
    };
    let words: Vec<&str> = text.split(' ').collect();
    let keep = match row.lane {
        'P' if matches!(words.first(), Some(&"<-" | &"->")) => 3,
        _ => 1,
    };
    words
        .iter()
        .take(keep)
        .filter(|w| !w.starts_with('('))
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether an evidence pointer names this row: `events#N` the run-log
/// event with seq N, `journal.jsonl:N` the N-th provider journal row.
fn is_evidence(row: &Row<'_>, journal_n: usize, evidence: &[&str]) -> bool {
    evidence.iter().any(|e| match row.lane {
        'R' => e
            .strip_prefix("events#")
            .is_some_and(|n| row.text.starts_with(&format!("#{n} "))),
        'P' => e
            .strip_prefix("journal.jsonl:")
            .is_some_and(|n| n.parse() == Ok(journal_n)),
        _ => false,
    })
}

/// The distinct row labels of one scenario.
#[derive(Default)]
struct Labels {
    labels: Vec<String>,
    index: HashMap<String, usize>,
}

impl Labels {
    fn code_of(&mut self, label: String) -> usize {
        let next = self.labels.len();
        let i = *self.index.entry(label.clone()).or_insert(next);
        if i == next {
            self.labels.push(label);
        }
        i
    }

    /// Digits per code: enough for every label.
    fn width(&self) -> u32 {
        let mut width = 1;
        while ALPHABET.len().pow(width) < self.labels.len() {
            width += 1;
        }
        width
    }
}

/// One cell's rows: those it shares with the previous cell of its scenario
/// and the rest.
struct Cell {
    id: String,
    scenario: String,
    prev: Option<String>,
    shared: usize,
    rest: Vec<usize>,
}

/// The sequences of a wave's cells, added in cell order.
#[derive(Default)]
pub struct Sequences {
    /// Labels by scenario id.
    tables: std::collections::BTreeMap<String, Labels>,
    cells: Vec<Cell>,
    evidence: serde_json::Map<String, serde_json::Value>,
    /// The last cell of each scenario and its rows.
    last: HashMap<String, (String, Vec<usize>)>,
}

impl Sequences {
    /// Adds a cell's timeline (full rows unless it passed).
    pub fn add(&mut self, cell: &CellResult, timeline: &str) {
        let full = cell.verdict != Verdict::Pass;
        let pointers: Vec<&str> = cell
            .oracles
            .iter()
            .filter(|o| o.verdict != Verdict::Pass)
            .flat_map(|o| o.evidence.iter().map(String::as_str))
            .collect();
        let table = self
            .tables
            .entry(cell.spec.scenario_id.to_string())
            .or_default();
        let mut rows = Vec::new();
        let mut marked = Vec::new();
        let mut journal_n = 0;
        for row in timeline.lines().filter_map(parse).take(DIAGRAM_ROWS_MAX) {
            journal_n += usize::from(row.lane == 'P');
            if full && is_evidence(&row, journal_n, &pointers) {
                marked.push(rows.len());
            }
            let text = if full {
                row.text.chars().take(FULL_LABEL_CHARS_MAX).collect()
            } else {
                short(&row)
            };
            let label = format!("{}{}{text}", row.lane, if row.cut { '>' } else { ' ' });
            rows.push(table.code_of(label));
        }
        let id = cell.spec.cell_id.clone();
        if !marked.is_empty() {
            self.evidence.insert(id.clone(), marked.into());
        }
        let (prev, shared) = match self.last.get(cell.spec.scenario_id.as_str()) {
            Some((prev, prev_rows)) => (
                Some(prev.clone()),
                prev_rows
                    .iter()
                    .zip(&rows)
                    .take_while(|(a, b)| a == b)
                    .count(),
            ),
            None => (None, 0),
        };
        self.cells.push(Cell {
            id: id.clone(),
            scenario: cell.spec.scenario_id.to_string(),
            prev,
            shared,
            rest: rows[shared..].to_vec(),
        });
        self.last
            .insert(cell.spec.scenario_id.to_string(), (id, rows));
    }

    /// `{"tables": {scenario id: {"w": code width, "labels": [lane + cut
    /// mark + text]}}, "cells": {id: codes, or [shared prefix length, codes,
    /// previous cell id]}, "ev": {id: [highlighted rows]}}`; a cell's table
    /// is its scenario's.
    pub fn into_json(self) -> serde_json::Value {
        let code = |mut i: usize, width: u32| {
            let mut digits = vec![ALPHABET[0]; width as usize];
            for d in digits.iter_mut().rev() {
                *d = ALPHABET[i % ALPHABET.len()];
                i /= ALPHABET.len();
            }
            String::from_utf8(digits).expect("ASCII digits")
        };
        let widths: HashMap<&String, u32> =
            self.tables.iter().map(|(s, t)| (s, t.width())).collect();
        let cells: serde_json::Map<String, serde_json::Value> = self
            .cells
            .iter()
            .map(|c| {
                let codes: String = c
                    .rest
                    .iter()
                    .map(|&i| code(i, widths[&c.scenario]))
                    .collect();
                let record = match &c.prev {
                    Some(prev) if c.shared > 0 => serde_json::json!([c.shared, codes, prev]),
                    _ => serde_json::json!(codes),
                };
                (c.id.clone(), record)
            })
            .collect();
        let tables: serde_json::Map<String, serde_json::Value> = self
            .tables
            .iter()
            .map(|(s, t)| {
                (
                    s.clone(),
                    serde_json::json!({"w": t.width(), "labels": t.labels}),
                )
            })
            .collect();
        serde_json::json!({
            "tables": tables,
            "cells": cells,
            "ev": self.evidence,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CellSpec, OracleResult, Outcome};

    const TIMELINE: &str = "     0 ms    H submit 202\n    12 ms    R #3 turn.started {}\n    15 ms    P <- request turn/start (id 2)\n    20 ms >> H cut.reached runner.turn_intent.persisted#1\n    25 ms    P -> turn/completed\n";

    fn cell(id: &str, verdict: Verdict) -> CellResult {
        let spec = CellSpec {
            cell_id: id.to_owned(),
            scenario_id: "s".into(),
            seed: 1,
            events: Vec::new(),
        };
        CellResult {
            oracles: vec![OracleResult {
                oracle: crate::model::Oracle::Contract,
                verdict,
                message: String::new(),
                evidence: vec!["events#3".to_owned(), "journal.jsonl:2".to_owned()],
            }],
            ..CellResult::bare(spec, verdict, Outcome::default())
        }
    }

    #[test]
    fn passing_cells_keep_names_and_share_prefixes() {
        let mut s = Sequences::default();
        s.add(&cell("t1", Verdict::Pass), TIMELINE);
        s.add(
            &cell("t2", Verdict::Pass),
            &TIMELINE.replace("turn/completed", "x"),
        );
        let j = s.into_json();
        assert_eq!(
            j["tables"]["s"]["labels"],
            serde_json::json!([
                "H submit",
                "R turn.started",
                "P <- request turn/start",
                "H>cut.reached",
                "P -> turn/completed",
                "P -> x"
            ])
        );
        assert_eq!(j["tables"]["s"]["w"], 1);
        assert_eq!(j["cells"]["t1"], serde_json::json!("!#$%("));
        assert_eq!(j["cells"]["t2"], serde_json::json!([4, ")", "t1"]));
        assert_eq!(j["ev"], serde_json::json!({}), "no evidence on a pass");
    }

    #[test]
    fn failing_cells_keep_full_rows_and_mark_evidence() {
        let mut s = Sequences::default();
        s.add(&cell("t1", Verdict::Fail), TIMELINE);
        let j = s.into_json();
        assert_eq!(
            j["tables"]["s"]["labels"][2],
            "P <- request turn/start (id 2)"
        );
        assert_eq!(j["ev"]["t1"], serde_json::json!([1, 4]));
    }

    #[test]
    fn codes_widen_with_the_labels_and_rows_are_capped() {
        let long: String = (0..DIAGRAM_ROWS_MAX + 5)
            .map(|i| format!("{i} ms    H action-{i}\n"))
            .collect();
        let mut s = Sequences::default();
        s.add(&cell("t1", Verdict::Pass), &long);
        let j = s.into_json();
        assert_eq!(j["tables"]["s"]["w"], 2, "300 labels need two digits");
        assert_eq!(
            j["cells"]["t1"].as_str().unwrap().len(),
            2 * DIAGRAM_ROWS_MAX
        );
    }
}
