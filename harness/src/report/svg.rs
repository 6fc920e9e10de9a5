//! A cell's sequence diagram as inline SVG: three lanes (harness, runner,
//! provider), one row per line of the evidence timeline
//! (`Evidence::timeline`), the cut marked in red and the rows that an
//! oracle's evidence points at (`events#N`, `journal.jsonl:N`) highlighted.

use std::fmt::Write as _;

use super::html::html;

/// At most this many rows are drawn; the text timeline has them all.
pub const DIAGRAM_ROWS_MAX: usize = 300;

const ROW_H: usize = 16;
const TOP: usize = 28;
const WIDTH: usize = 780;
/// x of the harness, runner and provider lanes.
const LANES: [usize; 3] = [40, 250, 740];
/// Label characters: a harness action fits between harness and runner,
/// everything else between runner and provider.
const LABEL_CHARS: [usize; 2] = [34, 78];

/// One parsed timeline line.
struct Row<'a> {
    ms: &'a str,
    cut: bool,
    lane: char,
    text: &'a str,
}

/// Parses `"{ms} ms {mark} {lane} {text}"`, the shape of
/// `Evidence::timeline` lines (`>>` marks the cut; lanes `H`, `R`, `P`).
fn parse(line: &str) -> Option<Row<'_>> {
    let (ms, rest) = line.trim_start().split_once(" ms ")?;
    let mark = rest.get(..3)?;
    let mut body = rest.get(3..)?.chars();
    let lane = body.next()?;
    let text = rest.get(3 + lane.len_utf8()..)?.trim_start();
    matches!(lane, 'H' | 'R' | 'P').then_some(Row {
        ms,
        cut: mark.starts_with(">>"),
        lane,
        text,
    })
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

/// The diagram of `timeline` (the text of `Evidence::timeline`), with the
/// rows `evidence` points at highlighted.
pub fn sequence_diagram(timeline: &str, evidence: &[&str]) -> String {
    let rows: Vec<Row> = timeline.lines().filter_map(parse).collect();
    let shown = rows.len().min(DIAGRAM_ROWS_MAX);
    let height = TOP + shown * ROW_H + 12;
    let mut out = format!(
        "<svg class=\"seqd\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" role=\"img\" \
         aria-label=\"sequence diagram\">\n"
    );
    for (x, name) in LANES.iter().zip(["harness", "runner", "provider"]) {
        let _ = writeln!(
            out,
            "<text x=\"{x}\" y=\"14\" class=\"lane\">{name}</text>\
             <line x1=\"{x}\" y1=\"20\" x2=\"{x}\" y2=\"{height}\" class=\"life\"/>"
        );
    }
    let mut journal_n = 0;
    for (i, row) in rows.iter().take(shown).enumerate() {
        if row.lane == 'P' {
            journal_n += 1;
        }
        let y = TOP + i * ROW_H + ROW_H / 2;
        if is_evidence(row, journal_n, evidence) {
            let _ = write!(
                out,
                "<rect x=\"0\" y=\"{}\" width=\"{WIDTH}\" height=\"{ROW_H}\" class=\"ev\"/>",
                y - ROW_H / 2
            );
        }
        draw_row(&mut out, row, y);
    }
    if rows.len() > shown {
        let _ = write!(
            out,
            "<text x=\"4\" y=\"{}\" class=\"more\">… {} more rows in the text timeline</text>",
            height - 2,
            rows.len() - shown
        );
    }
    out.push_str("</svg>");
    out
}

/// A harness action is an arrow to the runner, a provider message an arrow
/// between runner and provider (`<-` received, `->` sent), anything else a
/// dot on its lane; the cut is a red line across.
fn draw_row(out: &mut String, row: &Row<'_>, y: usize) {
    let [h, r, p] = LANES;
    let (from, to, text) = match row.lane {
        'H' => (h, r, row.text),
        'P' if row.text.starts_with("<-") => (r, p, &row.text[2..]),
        'P' if row.text.starts_with("->") => (p, r, &row.text[2..]),
        'P' => (p, p, row.text),
        _ => (r, r, row.text),
    };
    let chars = LABEL_CHARS[usize::from(row.lane != 'H')];
    // A provider fact's label ends at its lane, inside the picture.
    let (x, anchor) = if from == p && to == p {
        (p - 6, " text-anchor=\"end\"")
    } else {
        (from.min(to) + 6, "")
    };
    let full = format!("{} ms {}", row.ms, text.trim());
    let label: String = text.trim().chars().take(chars).collect();
    let _ = write!(out, "<g><title>{}</title>", html(&full));
    if row.cut {
        let _ = write!(
            out,
            "<line x1=\"0\" y1=\"{y}\" x2=\"{WIDTH}\" y2=\"{y}\" class=\"cut\"/>\
             <text x=\"2\" y=\"{}\" class=\"cutl\">cut</text>",
            y - 2
        );
    }
    if from == to {
        let _ = write!(
            out,
            "<circle cx=\"{from}\" cy=\"{y}\" r=\"3\" class=\"dot\"/>"
        );
    } else {
        let tip = if to > from { to - 6 } else { to + 6 };
        let _ = write!(
            out,
            "<line x1=\"{from}\" y1=\"{y}\" x2=\"{to}\" y2=\"{y}\" class=\"msg\"/>\
             <polygon points=\"{to},{y} {tip},{} {tip},{}\" class=\"head\"/>",
            y - 3,
            y + 3
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{x}\" y=\"{}\" class=\"t\"{anchor}>{}</text></g>",
        y - 2,
        html(&label)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMELINE: &str = "     0 ms    H submit 202\n    12 ms    R #3 turn.started {}\n    15 ms    P <- turn/start\n    20 ms >> H cut.reached runner.turn_intent.persisted#1\n    25 ms    P -> turn/completed\n";

    #[test]
    fn rows_become_arrows_dots_and_a_cut() {
        let svg = sequence_diagram(TIMELINE, &["events#3", "journal.jsonl:2"]);
        assert_eq!(svg.matches("<g>").count(), 5);
        assert_eq!(svg.matches("class=\"cut\"").count(), 1);
        assert_eq!(svg.matches("class=\"msg\"").count(), 4, "{svg}");
        assert_eq!(svg.matches("class=\"dot\"").count(), 1);
        assert_eq!(svg.matches("class=\"ev\"").count(), 2, "{svg}");
        assert!(svg.contains(">turn.started {}<") || svg.contains("#3 turn.started"));
    }

    #[test]
    fn text_is_escaped_and_long_timelines_are_capped() {
        let svg = sequence_diagram("1 ms    R #1 <script>\n", &[]);
        assert!(!svg.contains("<script>") && svg.contains("&lt;script&gt;"));
        let long: String = (0..DIAGRAM_ROWS_MAX + 5)
            .map(|i| format!("{i} ms    R #{i} x\n"))
            .collect();
        let svg = sequence_diagram(&long, &[]);
        assert_eq!(svg.matches("<g>").count(), DIAGRAM_ROWS_MAX);
        assert!(svg.contains("… 5 more rows"));
    }
}
