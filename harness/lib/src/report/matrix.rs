//! The outcome matrix of one scenario id: its cells by cut point (rows) and
//! fault (columns, in [`Fault::ALL`] order). `report.html` draws its grid
//! from it and `tests/snapshots.rs` its entries; it only places cells and
//! renders nothing.

use crate::model::{CellSpec, Cut, Fault};

/// One row of the matrix: a cut point and the cells cut there, by fault;
/// or, with no cut, the clean-run row (cells with no cut or no fault).
pub struct Row<'a, T> {
    /// The cut point; `None` for the clean-run row.
    pub cut: Option<&'a Cut>,
    /// The cells at this cut, one list per fault, in [`Fault::ALL`] order
    /// (empty in the clean-run row).
    pub by_fault: [Vec<T>; Fault::ALL.len()],
    /// The cells of the clean-run row (empty in a cut's row).
    pub clean: Vec<T>,
}

/// The rows of `cells`, each given with its spec, in the order the cells
/// first reach each cut (the clean-run row where its first cell is); within
/// a slot, cells keep their order.
pub fn rows<'a, T>(cells: impl IntoIterator<Item = (&'a CellSpec, T)>) -> Vec<Row<'a, T>> {
    let mut rows: Vec<Row<'a, T>> = Vec::new();
    for (spec, cell) in cells {
        let (cut, fault) = (spec.cut(), spec.fault());
        let i = match rows.iter().position(|r| r.cut == cut) {
            Some(i) => i,
            None => {
                rows.push(Row {
                    cut,
                    by_fault: Default::default(),
                    clean: Vec::new(),
                });
                rows.len() - 1
            }
        };
        match fault {
            Some(fault) => rows[i].by_fault[column(fault)].push(cell),
            None => rows[i].clean.push(cell),
        }
    }
    rows
}

/// The column of `fault`: its place in [`Fault::ALL`].
pub fn column(fault: Fault) -> usize {
    Fault::ALL
        .iter()
        .position(|f| *f == fault)
        .expect("Fault::ALL lists every fault")
}
